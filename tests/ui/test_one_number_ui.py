"""One number for one thing on every surface (issue 38), on the demo's own runs: `stoker demo`
trains its fed and its starved run (real Keras, the real agent) against a real `stoker serve`,
and every surface then gives each quantity of the starved run one name and one value: the
API's summary and diagnosis, the runs list, the run page, compare, the cost page and the
alerts page (real headless Chromium, 1440 px), `stoker top` and the demo's own report. The
quantities: steps, the median step time, input wait (a percent, its window named), the lost
device time and the verdict's words. Expected texts come from the summary written by
trainer_agent/figures.py, which writes each quantity as the UI does
(tests/unit/test_figures.py).

STOKER_ONE_NUMBER_SERVER=http://HOST:PORT runs the same checks on the newest demo runs a
server there already holds (e.g. a full `stoker demo`, its starved run live for minutes)
instead of training them here. Screenshots: test-artifacts/one-number-*.png.
"""

import os
import re
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.conftest import ARTIFACTS
from tests.harness.support import REPO, ServerProcess, wait_for
from trainer_agent.figures import count_text, lost_time_text, ms_text, share_text

expect = pytest.importorskip("playwright.sync_api").expect

DEMO_PROJECT = "stoker-demo"
EXTERNAL = os.environ.get("STOKER_ONE_NUMBER_SERVER", "").rstrip("/")


@dataclass(frozen=True)
class Figures:
    """The starved run's figures as its summary gives them, written as every surface must."""

    run: dict[str, Any]
    fed_id: int
    steps: str
    median: str
    wait: str
    lost: str
    words: str

    @property
    def id(self) -> int:
        return int(self.run["id"])

    @classmethod
    def of(cls, run: dict[str, Any], fed_id: int) -> "Figures":
        s = run["summary"]
        return cls(
            run=run, fed_id=fed_id, steps=count_text(s["steps"]),
            median=ms_text(s["step_time_ms_median"] / 1000), wait=share_text(s["input_wait_share"]),
            lost=lost_time_text(s["lost_gpu_s"]), words=s.get("verdict_label") or "(none)",
        )  # fmt: skip


def _get(url: str, path: str, **params: Any) -> Any:
    response = httpx.get(f"{url}/api/v1{path}", params=params, timeout=30)
    response.raise_for_status()
    return response.json()


def _newest(url: str, name: str) -> dict[str, Any] | None:
    runs = _get(url, "/runs", project=DEMO_PROJECT, limit=1000)["data"]
    return max((r for r in runs if r["name"] == name), key=lambda r: r["id"], default=None)


def _demo(url: str, tmp: Path) -> str:
    """`stoker demo` against the server at `url`: one epoch fed, then the starved run live for
    30 s: long enough for the demo's alert rule (input-bound for 5 s, once 20 steps are
    measured) to fire even on a loaded machine."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("STOKER_")}
    env.update(STOKER_SPOOL_DIR=str(tmp / "spool"), TF_CPP_MIN_LOG_LEVEL="2")
    command = [
        sys.executable, "-m", "stoker_server.cli", "demo", "--server", url,
        "--epochs", "1", "--live-minutes", "0.5",
    ]  # fmt: skip
    log = tmp / "demo.log"
    with log.open("wb") as out:
        demo = subprocess.Popen(command, cwd=REPO, env=env, stdout=out, stderr=subprocess.STDOUT)
    try:
        code: int | None = demo.wait(timeout=240)
    except subprocess.TimeoutExpired:
        code = None
        stacks = _stacks(demo.pid)
        (ARTIFACTS / "one-number-demo-stacks.txt").write_text(stacks)
        demo.kill()
        demo.wait()
    text = log.read_text(errors="replace")
    done = code == 0 and "Demo training finished" in text
    assert done, f"stoker demo ended {code}:\n{text[-6000:]}"
    return text


def _stacks(pid: int) -> str:
    """Where a process that does not end is (py-spy, a dev dependency, where installed)."""
    spy = Path(sys.executable).parent / "py-spy"
    if not spy.exists():
        return "(no py-spy)"
    dump = subprocess.run([str(spy), "dump", "--native", "--pid", str(pid)], capture_output=True,
                          text=True, timeout=120, check=False)  # fmt: skip
    return dump.stdout + dump.stderr


# What `stoker demo` printed, when this module ran it.
DEMO_OUTPUT: list[str] = []


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    if EXTERNAL:
        yield EXTERNAL
        return
    tmp = tmp_path_factory.mktemp("one-number")
    ARTIFACTS.mkdir(exist_ok=True)
    server = ServerProcess(data_dir=tmp / "server").start()
    try:
        DEMO_OUTPUT.append(_demo(server.url, tmp))
        yield server.url
    finally:
        server.stop()


@pytest.fixture(scope="module")
def figures(served: str) -> Figures:
    def ended() -> dict[str, Any] | None:
        run = _newest(served, "starved-pipeline")
        return run if run is not None and run["status"] != "running" else None

    starved = wait_for(ended, timeout_s=120, what="the demo's starved run ended")
    ARTIFACTS.mkdir(exist_ok=True)
    fed = _newest(served, "fed-pipeline")
    assert fed is not None
    return Figures.of(starved, fed["id"])


@pytest.fixture
def page_1440(browser: Any) -> Iterator[Any]:
    context = browser.new_context(viewport={"width": 1440, "height": 900})
    yield context.new_page()
    context.close()


def test_the_api_summary_and_diagnosis_give_one_figure_per_quantity(
    served: str, figures: Figures
) -> None:
    summary = figures.run["summary"]
    diagnosis = _get(served, f"/runs/{figures.id}/diagnosis")
    assert diagnosis["window_label"] == "whole run"
    assert diagnosis["input_wait_share"] == summary["input_wait_share"]
    assert diagnosis["verdict"] == summary["verdict"] == "highly_input_bound"
    assert diagnosis["verdict_label"] == figures.words == "highly input-bound"
    assert diagnosis["steps_in_window"] == summary["steps"]
    evidence = {e["key"]: e["text"] for e in diagnosis["evidence"]}
    assert evidence["input_wait_share"] == (
        f"input wait is {figures.wait} of step time over the whole run ({figures.steps} steps)"
    )
    assert evidence["median_step_ms"] == f"median step time {figures.median} over the whole run"
    assert "mean_step_ms" not in evidence  # one statistic beside the summary's median
    for text in evidence.values():
        # Shares as percents with one decimal, never a raw fraction nor "93%".
        assert not re.search(r"\b0\.\d{3,}\b|\d%", text), text


def test_the_runs_list_shows_the_summarys_figures(
    served: str, figures: Figures, page_1440: Any
) -> None:
    page = page_1440
    page.goto(f"{served}/#/")
    row = page.locator(f'[data-testid="run-row"][data-run-id="{figures.id}"]')
    expect(row.get_by_test_id("verdict-badge")).to_have_text(figures.words, timeout=15_000)
    expect(row.locator('[data-col="steps"]')).to_have_text(figures.steps)
    expect(row.locator('[data-col="median"]')).to_have_text(figures.median)
    expect(row.get_by_test_id("input-wait")).to_have_text(figures.wait)
    expect(row.get_by_test_id("lost-gpu")).to_have_text(re.compile(rf"^{re.escape(figures.lost)}"))
    headers = page.locator("table.runs-table thead")
    expect(headers).to_contain_text("Input wait · whole run")
    expect(headers).to_contain_text("Lost device time")
    page.screenshot(path=str(ARTIFACTS / "one-number-list.png"), full_page=True)


def test_the_run_page_shows_the_same_figures_in_its_banner_evidence_and_cards(
    served: str, figures: Figures, page_1440: Any
) -> None:
    page = page_1440
    page.goto(f"{served}/#/runs/{figures.id}")
    banner = page.get_by_test_id("verdict-banner")
    expect(banner).to_have_attribute("data-window", "whole run", timeout=15_000)
    expect(page.get_by_test_id("verdict-words")).to_have_text(figures.words)
    expect(page.get_by_test_id("verdict-wait")).to_have_text(figures.wait)
    expect(banner.locator(".verdict-meta")).to_contain_text(
        f"over the whole run ({figures.steps} steps)"
    )
    evidence = page.get_by_test_id("verdict-evidence")
    expect(evidence).to_contain_text(f"input wait is {figures.wait} of step time")
    expect(evidence).to_contain_text(f"median step time {figures.median} over the whole run")

    def card(key: str) -> Any:
        return page.locator(f'[data-figure="{key}"]')

    expect(card("steps").locator("dd")).to_have_text(figures.steps)
    expect(card("median").locator("dt")).to_have_text("Step time median")
    expect(card("median").locator("dd")).to_have_text(figures.median)
    expect(card("wait").locator("dt")).to_have_text("Input wait · whole run")
    expect(card("wait").locator("dd")).to_have_text(figures.wait)
    expect(card("lost_gpu").locator("dt")).to_have_text("Lost device time")
    expect(card("lost_gpu").locator("dd")).to_have_text(re.compile(rf"^{re.escape(figures.lost)}"))
    page.screenshot(path=str(ARTIFACTS / "one-number-run.png"), full_page=True)


def test_compare_puts_the_same_figures_first_and_stars_only_metrics_with_a_direction(
    served: str, figures: Figures, page_1440: Any
) -> None:
    page = page_1440
    page.goto(f"{served}/#/compare?runs={figures.fed_id},{figures.id}")
    table = page.get_by_test_id("compare-diagnosis")

    def cell(key: str) -> Any:
        return table.locator(f'tr[data-metric="{key}"] td').nth(1)  # the starved run's

    expect(cell("verdict")).to_have_text(figures.words, timeout=15_000)
    expect(cell("wait")).to_have_text(figures.wait)
    expect(cell("lost_gpu")).to_have_text(re.compile(rf"^{re.escape(figures.lost)}"))
    expect(cell("median")).to_have_text(figures.median)
    expect(cell("steps")).to_have_text(figures.steps)
    expect(table.locator('tr[data-metric="lost_gpu"] th')).to_have_text("Lost device time")
    expect(table.locator("[data-best]")).to_have_count(0)  # figures, not metrics: no star
    chart = page.get_by_test_id("compare-chart")
    assert table.bounding_box()["y"] < chart.bounding_box()["y"]  # the figures come first
    summary = page.get_by_test_id("compare-table")
    expect(summary.locator('tr[data-metric="epoch:val_loss"] th')).to_contain_text("↓")
    # A value without a direction (the learning rate) is shown, never starred nor arrowed.
    learning_rate = summary.locator('tr[data-metric="epoch:learning_rate"]')
    expect(learning_rate.locator("th")).to_have_text("Last learning_rate")
    expect(learning_rate.locator("[data-best]")).to_have_count(0)
    for row in summary.locator("tr[data-metric]").all():
        if row.locator('[data-best="true"]').count():  # a star only where a direction is
            expect(row.locator("th")).to_contain_text(re.compile("[↓↑]"))
    page.screenshot(path=str(ARTIFACTS / "one-number-compare.png"), full_page=True)


def test_the_cost_page_shows_the_same_lost_time_and_input_wait(
    served: str, figures: Figures, page_1440: Any
) -> None:
    page = page_1440
    page.goto(f"{served}/#/cost")
    row = page.locator(f'[data-testid="cost-runs"] tr[data-run-id="{figures.id}"]')
    expect(row.get_by_test_id("cost-lost")).to_have_text(figures.lost, timeout=15_000)
    expect(row.get_by_test_id("cost-wait")).to_have_text(figures.wait)
    expect(page.locator('[data-testid="cost-runs"] thead')).to_contain_text("Lost device time")
    page.screenshot(path=str(ARTIFACTS / "one-number-cost.png"), full_page=True)


def test_alerts_write_the_value_as_the_ui_and_say_why_they_resolved(
    served: str, figures: Figures, page_1440: Any
) -> None:
    def resolved() -> list[dict[str, Any]] | None:
        alerts = _get(served, "/alerts", run_id=figures.id)["data"]
        demo = [a for a in alerts if a["rule_name"].startswith("Demo:") and a["fired_at"]]
        return demo if demo and all(a["state"] == "resolved" for a in demo) else None

    alerts = wait_for(resolved, timeout_s=60, what="the demo's alert resolved")
    events = _get(served, f"/runs/{figures.id}/events", kind="alert")["data"]
    reasons = {
        "run_ended": "the run ended",
        "steps_stopped": "steps stopped at ",  # the run's end came later than its last step
    }
    for alert in alerts:
        last = f"input wait {share_text(alert['value'])} of step time over the last 30 s"
        mine = [e for e in events if e["data"]["alert_id"] == alert["id"]]
        fired = next(e for e in mine if e["data"]["state"] == "firing")
        assert fired["message"].endswith(
            " of step time over the last 30 s (rule: ≥ 20.0 % for 5 s)"
        )
        end = mine[-1]
        assert end["data"]["state"] == "resolved" and end["message"] == alert["message"]
        why = reasons[end["data"]["reason"]]
        assert re.fullmatch(
            rf"\[resolved\] Demo: input-bound for 5 s on run 'starved-pipeline': "
            rf"{re.escape(why)}.*; last reading: {re.escape(last)}",
            alert["message"],
        ), alert["message"]
    for printed in DEMO_OUTPUT:  # the demo's own report says the same, once resolved
        assert all(f"  Alert: {alert['message']}" in printed for alert in alerts), printed[-3000:]
    page = page_1440
    page.goto(f"{served}/#/alerts")
    listed = page.get_by_test_id("alerts-view")
    for alert in alerts:
        expect(listed).to_contain_text(alert["message"], timeout=15_000)
    page.screenshot(path=str(ARTIFACTS / "one-number-alerts.png"), full_page=True)


def test_stoker_top_shows_the_same_figures_each_with_its_window(
    served: str, figures: Figures
) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("STOKER_")}
    env.update(NO_COLOR="1", COLUMNS="100", LINES="40")
    done = subprocess.run(
        [sys.executable, "-m", "trainer_agent.cli", "top", "--once", "--server", served,
         "--run", str(figures.id)],
        cwd=REPO, env=env, capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    frame = done.stdout
    (ARTIFACTS / "one-number-top.txt").write_text(frame)
    lines = frame.splitlines()
    assert f"· step {figures.steps}" in lines[0]
    assert re.match(rf"step time\s+{re.escape(figures.median)}\s", lines[1]), lines[1]
    assert re.match(rf"input wait\s+{re.escape(figures.wait)}!!", lines[2]), lines[2]
    assert "step time: median, whole run; input wait: whole run" in frame
    assert f"verdict    {figures.words} (whole run)" in frame
    assert "workers, whole run" in frame
    worker = next(line for line in lines if re.match(r"\s*0\s", line))
    assert re.search(
        rf"\s{re.escape(figures.steps)}\s+{re.escape(figures.median)}\s+{re.escape(figures.wait)}\s",
        worker,
    ), worker
