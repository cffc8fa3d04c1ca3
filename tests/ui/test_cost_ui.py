"""The starvation cost in real headless Chromium against a real `stoker serve` with a GPU-hour
price. Runs are fed through the HTTP ingest, as an agent sends them:

- the runs list shows each run's lost device time, priced, and sorts by it; its input-bound
  levels are the server's (the summary's verdict), at a threshold too;
- compare has the "Lost device time" row among its diagnosis figures, unstarred;
- a run page says how much sooner the run would have finished had it been fed;
- the cost page (#/cost) lists projects and runs by lost device hours, each run with its
  whole-run input wait;
- when the server's settings cannot be read, the run page says so and shows the cost unpriced.

Screenshots go to test-artifacts/ui-cost-*.png.
"""

import re
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.harness.support import ServerProcess

expect = pytest.importorskip("playwright.sync_api").expect

FOUR_GPUS = {"gpus": [{"index": i, "name": "A100"} for i in range(4)]}
ONE_GPU = {"gpus": [{"index": 0, "name": "A100"}]}


@pytest.fixture(scope="module")
def priced_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    env = {"STOKER_GPU_HOUR_PRICE": "3", "STOKER_CURRENCY": "$"}
    process = ServerProcess(data_dir=tmp_path_factory.mktemp("cost-ui"), env=env).start()
    yield process
    process.stop()


def _training(
    server: ServerProcess, name: str, project: str, *, dur: float, wait: float,
    environment: dict[str, Any],
) -> int:  # fmt: skip
    """A finished run of 100 steps of `dur` seconds, each (but step 0) waiting `wait`."""
    n = 100
    t0 = time.time() - n * dur - 5
    batch = {
        "type": "batch", "seq": 1,
        "steps": {"step": list(range(n)), "t": [t0 + i * dur for i in range(n)],
                  "dur": [dur] * n, "wait": [wait] * n, "batch_size": [32] * n},
    }  # fmt: skip
    hello = {"type": "hello", "protocol": 1, "run_key": uuid.uuid4().hex, "name": name,
             "project": project, "environment": environment}  # fmt: skip
    body = {"hello": hello, "batches": [batch], "end": {"type": "end", "status": "finished"}}
    response = httpx.post(f"{server.url}/api/v1/ingest", json=body, timeout=30)
    assert response.status_code == 200, response.text
    return response.json()["run_id"]


@pytest.fixture(scope="module")
def runs(priced_server: ServerProcess) -> dict[str, Any]:
    project = f"ui-cost-{uuid.uuid4().hex[:8]}"
    return {
        "project": project,
        # 99 timed steps of 10 s, 6 s of them waiting, on 4 GPUs: 99 * 6 * 4 s = 0.66 GPU·h.
        "starved": _training(priced_server, "cost-starved", project, dur=10.0, wait=6.0,
                             environment=FOUR_GPUS),
        # 99 steps of 10 s, 0.5 s waiting, on one GPU: 49.5 s. (A run without GPU readings
        # shows no lost GPU time: tests/ui/test_gpu_truth_ui.py.)
        "fed": _training(priced_server, "cost-fed", project, dur=10.0, wait=0.5,
                         environment=ONE_GPU),
    }  # fmt: skip


def test_runs_list_shows_and_sorts_by_lost_gpu_time(
    priced_server: ServerProcess, runs: dict[str, Any], page: Any, artifacts: Path
) -> None:
    page.goto(f"{priced_server.url}/#/")
    page.get_by_placeholder("Filter by name, project, tag, status").fill(runs["project"])
    starved = page.locator(f'[data-testid="run-row"][data-run-id="{runs["starved"]}"]')
    fed = page.locator(f'[data-testid="run-row"][data-run-id="{runs["fed"]}"]')
    expect(starved.get_by_test_id("lost-gpu")).to_have_text("40 min · $1.98", timeout=15_000)
    expect(fed.get_by_test_id("lost-gpu")).to_have_text("50 s · $0.04")
    # The levels are the server's summary verdict: 6 s of 10 s waiting is highly input-bound;
    # 0.5 s of 10 s is 5 %, moderately (a share at a threshold is at that level).
    for row, verdict, level in ((starved, "highly", "high"), (fed, "moderately", "moderate")):
        badge = row.get_by_test_id("verdict-badge")
        expect(badge).to_have_attribute("data-verdict", f"{verdict}_input_bound")
        expect(row.get_by_test_id("input-wait")).to_have_class(re.compile(rf"\bwait-{level}\b"))
    page.locator('button[data-sort="lost"]').click()
    rows = page.get_by_test_id("run-row")
    expect(rows.first).to_have_attribute("data-run-id", str(runs["starved"]))
    page.locator('button[data-sort="lost"]').click()
    expect(rows.first).to_have_attribute("data-run-id", str(runs["fed"]))
    page.screenshot(path=str(artifacts / "ui-cost-runs.png"), full_page=True)


def test_compare_shows_the_lost_device_time_priced_among_the_diagnosis_figures(
    priced_server: ServerProcess, runs: dict[str, Any], page: Any, artifacts: Path
) -> None:
    page.goto(f"{priced_server.url}/#/compare?runs={runs['starved']},{runs['fed']}")
    lost = page.locator('[data-testid="compare-diagnosis"] tr[data-metric="lost_gpu"]')
    expect(lost).to_contain_text("40 min · $1.98", timeout=15_000)
    expect(lost.locator("th")).to_have_text("Lost device time")
    # A figure, not a metric the user gave a direction: no star (issue 38).
    expect(lost.locator('td[data-best="true"]')).to_have_count(0)
    # Input wait is a share over its window, never a time: no "Input wait (time)" row.
    expect(page.locator('tr[data-metric="wait_s"]')).to_have_count(0)
    page.screenshot(path=str(artifacts / "ui-cost-compare.png"), full_page=True)


def test_run_page_says_how_much_sooner_a_fed_run_would_have_finished(
    priced_server: ServerProcess, runs: dict[str, Any], page: Any, artifacts: Path
) -> None:
    run = priced_server.get(f"/api/v1/runs/{runs['starved']}")
    wall = run["summary"]["duration_s"]
    assert wall is not None and wall > 594
    page.goto(f"{priced_server.url}/#/runs/{runs['starved']}")
    line = page.get_by_test_id("fed-estimate")
    # 99 * 6 s = 594 s of the run's wall time were waits: 594 / 1000 of it here.
    sentence = "Fed, this run would have taken 6m 46s instead of 16m 40s"
    expect(line).to_contain_text(sentence, timeout=15_000)
    expect(line).to_contain_text("(\u221259 %)")  # a minus sign
    figure = page.locator('[data-figure="lost_gpu"] dd')
    expect(figure).to_have_text("40 min · $1.98")
    expect(page.locator('[data-figure="wait"]')).to_have_class(re.compile(r"\bwait-high\b"))
    # The starved stretches' key names the server's threshold.
    key = page.locator(".starved-key")
    expect(key).to_have_attribute("title", "Stretches where input wait was ≥ 20 % of step time")
    page.screenshot(path=str(artifacts / "ui-cost-run.png"), full_page=True)


def test_cost_page_lists_projects_and_runs_by_lost_gpu_hours(
    priced_server: ServerProcess, runs: dict[str, Any], page: Any, artifacts: Path
) -> None:
    page.goto(f"{priced_server.url}/#/")
    page.get_by_test_id("cost-link").click()
    projects = page.get_by_test_id("cost-projects")
    project_row = projects.locator(f'tr[data-project="{runs["project"]}"]')
    expect(project_row).to_contain_text("40 min", timeout=15_000)  # 0.66 + 0.01375
    expect(project_row).to_contain_text("$2.02")
    run_rows = page.locator('[data-testid="cost-runs"] tbody tr')
    expect(run_rows.first).to_have_attribute("data-run-id", str(runs["starved"]))
    expect(run_rows.nth(1)).to_have_attribute("data-run-id", str(runs["fed"]))
    page.screenshot(path=str(artifacts / "ui-cost-page.png"), full_page=True)
    # A date after the runs: nothing was active since.
    page.get_by_test_id("cost-since").fill("2999-01-01")
    page.get_by_test_id("cost-since").dispatch_event("change")
    expect(page.get_by_test_id("cost-body")).to_contain_text("No run was active since then.")


def test_run_page_says_when_the_settings_cannot_be_read(
    priced_server: ServerProcess, runs: dict[str, Any], page: Any, artifacts: Path
) -> None:
    page.route("**/api/v1/settings/ui", lambda route: route.fulfill(
        status=500, content_type="application/json", body='{"detail": "boom"}'))  # fmt: skip
    page.goto(f"{priced_server.url}/#/runs/{runs['starved']}")
    expect(page.get_by_test_id("settings-error")).to_have_text(
        "Cannot load the server's settings (500 boom).", timeout=15_000
    )
    expect(page.locator('[data-figure="lost_gpu"] dd')).to_have_text("40 min")  # no price
    page.screenshot(path=str(artifacts / "ui-cost-settings-error.png"))
