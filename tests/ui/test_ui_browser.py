"""The UI in real headless Chromium against a real server and a real streaming training."""

import subprocess
import sys
from pathlib import Path
from typing import Any

from tests.harness.support import REPO, ServerProcess, wait_for


def _start_training(
    server: ServerProcess, name: str, batches: int, delay_s: float, *hold: str
) -> Any:
    return subprocess.Popen(
        [sys.executable, "-m", "tests.harness.train_script", "--server", server.url, "--name", name,
         "--epochs", "1", "--batches", str(batches), "--batch-delay-s", str(delay_s), *hold],
        cwd=REPO,
    )  # fmt: skip


def _running_run_id(server: ServerProcess) -> int:
    def first_steps() -> int | None:
        runs = server.get("/api/v1/runs")["data"]
        if runs and runs[0]["summary"]["steps"] > 0:
            return runs[0]["id"]
        return None

    return wait_for(first_steps, timeout_s=90, what="the training's first steps")


def test_run_page_chart_grows_while_training_streams(
    server: ServerProcess, page: Any, artifacts: Path, tmp_path: Path
) -> None:
    # The training holds after step 40 until the page shows its first points: however slowly
    # the machine brings Chromium up, 110 steps are still to come when the test starts watching.
    release = tmp_path / "release"
    training = _start_training(
        server, "live-chart", 150, 0.1, "--hold-at-step", "40", "--release-file", str(release)
    )
    try:
        run_id = _running_run_id(server)
        page.goto(f"{server.url}/#/runs/{run_id}")
        chart = page.get_by_test_id("step-time-chart")
        chart.wait_for()

        def points() -> int:
            return int(chart.get_attribute("data-points") or 0)

        first = wait_for(points, timeout_s=30, what="the chart's first points")
        assert first <= 40
        release.touch()
        wait_for(lambda: points() > first + 10, timeout_s=60, what="the chart to grow")
        page.screenshot(path=str(artifacts / "run-page-live.png"))
    finally:
        release.touch()
        training.wait(timeout=120)
    wait_for(lambda: points() == 150, timeout_s=30, what="all 150 steps in the chart")


def test_runs_list_shows_run_and_links_to_it(
    server: ServerProcess, page: Any, artifacts: Path
) -> None:
    training = _start_training(server, "listed-run", batches=20, delay_s=0.0)
    assert training.wait(timeout=120) == 0
    page.goto(f"{server.url}/#/")
    row = page.get_by_test_id("run-row").first
    row.wait_for()
    assert "listed-run" in row.inner_text()
    page.screenshot(path=str(artifacts / "runs-list.png"))
    row.get_by_role("link", name="listed-run").click()
    page.get_by_test_id("step-time-chart").wait_for()
    wait_for(
        lambda: page.get_by_test_id("step-time-chart").get_attribute("data-points") == "20",
        timeout_s=30,
        what="the finished run's 20 steps",
    )


def test_run_name_with_markup_renders_as_text(server: ServerProcess, page: Any) -> None:
    import uuid

    import httpx

    name = "<img src=x onerror=alert(1)>"
    hello = {"type": "hello", "protocol": 1, "run_key": uuid.uuid4().hex, "name": name,
             "tags": ["<b>tag</b>"]}  # fmt: skip
    httpx.post(f"{server.url}/api/v1/ingest", json={"hello": hello}).raise_for_status()
    dialogs: list[str] = []
    page.on("dialog", lambda dialog: (dialogs.append(dialog.message), dialog.dismiss()))
    page.goto(f"{server.url}/#/")
    row = page.get_by_test_id("run-row").first
    row.wait_for()
    assert name in row.inner_text()
    assert "<b>tag</b>" in row.inner_text()
    assert page.locator("img[src=x]").count() == 0
    assert dialogs == []
