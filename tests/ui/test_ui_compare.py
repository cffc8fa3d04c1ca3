"""The compare view in real headless Chromium against a real `stoker serve`: the server is the one
source of the comparison (GET /compare), also when a saved link names runs that are gone.

- a link naming a deleted run and an unknown id compares the runs that remain and says which are
  not found; the browser reads no single run to rebuild the comparison;
- a link whose runs are all gone says so, with no empty tables;
- another failure of GET /compare is said as text;
- each run's GPU energy and what of it was burned while starved, from GET /runs/{id}/energy,
  in the runs list's words;
- a running run's figures follow it live, as in the runs list.

Screenshots go to test-artifacts/ui-compare-*.png.
"""

import time
import uuid
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.harness.detect_support import ScriptedAgent
from tests.harness.support import ServerProcess

expect = pytest.importorskip("playwright.sync_api").expect


def _run(server: ServerProcess, name: str, lr: float) -> int:
    """A finished run of 20 steps with `lr` in its config."""
    n, t0 = 20, time.time() - 60
    batch = {
        "type": "batch", "seq": 1,
        "steps": {"step": list(range(n)), "t": [t0 + i * 0.05 for i in range(n)],
                  "dur": [0.05] * n, "wait": [0.005] * n, "batch_size": [32] * n},
    }  # fmt: skip
    hello = {"type": "hello", "protocol": 1, "run_key": uuid.uuid4().hex, "name": name,
             "project": "ui-compare", "config": {"lr": lr}}  # fmt: skip
    body = {"hello": hello, "batches": [batch], "end": {"type": "end", "status": "finished"}}
    response = httpx.post(f"{server.url}/api/v1/ingest", json=body, timeout=30)
    assert response.status_code == 200, response.text
    return response.json()["run_id"]


def _gpu_run(server: ServerProcess, name: str, wait_s: float) -> int:
    """A finished run of 200 steps of 50 ms (`wait_s` of each waiting for input) over 10 s,
    with a GPU reading every second at 400 W (4 kJ in all)."""
    n, dur, rows, t0 = 200, 0.05, 11, time.time() - 60
    device = {"t": [t0 + i for i in range(rows)], "gpu": [0] * rows, "util": [90.0] * rows,
              "power_w": [400.0] * rows, "energy_j": [400.0 * i for i in range(rows)],
              "energy_integrated": [False] * rows}  # fmt: skip
    batch = {
        "type": "batch", "seq": 1,
        "steps": {"step": list(range(n)), "t": [t0 + i * dur for i in range(n)],
                  "dur": [dur] * n, "wait": [wait_s] * n, "batch_size": [32] * n},
        "device": device,
    }  # fmt: skip
    hello = {"type": "hello", "protocol": 1, "run_key": uuid.uuid4().hex, "name": name,
             "project": "ui-compare"}  # fmt: skip
    body = {"hello": hello, "batches": [batch], "end": {"type": "end", "status": "finished"}}
    response = httpx.post(f"{server.url}/api/v1/ingest", json=body, timeout=30)
    assert response.status_code == 200, response.text
    return response.json()["run_id"]


def _delete(server: ServerProcess, run_id: int) -> None:
    assert httpx.delete(f"{server.url}/api/v1/runs/{run_id}", timeout=30).status_code == 204


def test_a_link_naming_a_deleted_run_compares_the_rest_and_says_which_are_gone(
    shared_server: ServerProcess, page: Any, artifacts: Path
) -> None:
    a = _run(shared_server, "kept-a", 0.1)
    gone = _run(shared_server, "deleted", 0.5)
    b = _run(shared_server, "kept-b", 0.2)
    _delete(shared_server, gone)
    unknown = 2**31 - 1
    single_run_reads: list[str] = []
    page.on(
        "request",
        lambda r: single_run_reads.append(r.url) if f"/api/v1/runs/{gone}" in r.url else None,
    )

    page.goto(f"{shared_server.url}/#/compare?runs={a},{gone},{b},{unknown}")
    missing = page.get_by_test_id("compare-missing")
    expect(missing).to_have_text(f"Not found: #{gone}, #{unknown}", timeout=15_000)
    table = page.get_by_test_id("compare-table")
    header_ids = table.locator("thead th[data-run-id]").evaluate_all(
        "ths => ths.map(th => Number(th.getAttribute('data-run-id')))"
    )
    assert header_ids == [a, b]
    config = page.get_by_test_id("config-diff")
    expect(config).to_have_attribute("data-rows", "1")
    expect(config.locator('tr[data-key="lr"] td')).to_have_text(["0.1", "0.2"])
    expect(page.get_by_test_id("compare-chart")).to_have_attribute(
        "data-points", "20", timeout=15_000
    )
    assert single_run_reads == []  # nothing rebuilt in the browser
    page.screenshot(path=str(artifacts / "ui-compare-deleted-run.png"), full_page=True)


def test_a_link_whose_runs_are_all_gone_says_so(shared_server: ServerProcess, page: Any) -> None:
    first, second = _run(shared_server, "gone-1", 0.1), _run(shared_server, "gone-2", 0.2)
    _delete(shared_server, first)
    _delete(shared_server, second)
    page.goto(f"{shared_server.url}/#/compare?runs={first},{second}")
    expect(page.get_by_test_id("compare-missing")).to_have_text(
        f"Not found: #{first}, #{second}", timeout=15_000
    )
    expect(page.get_by_test_id("compare-none")).to_contain_text("None of these runs exists")
    expect(page.get_by_test_id("compare-table")).to_have_count(0)
    expect(page.get_by_test_id("compare-chart")).to_have_count(0)


def test_a_failed_compare_is_said_as_text(
    shared_server: ServerProcess, page: Any, artifacts: Path
) -> None:
    a, b = _run(shared_server, "err-a", 0.1), _run(shared_server, "err-b", 0.2)
    page.route(
        "**/api/v1/compare?*",
        lambda route: route.fulfill(
            status=503, content_type="application/json", body='{"detail": "database busy <b>"}'
        ),
    )
    page.goto(f"{shared_server.url}/#/compare?runs={a},{b}")
    view = page.get_by_test_id("compare-view")
    expect(view.get_by_test_id("compare-error")).to_have_text(
        "Cannot compare runs: 503 database busy <b>", timeout=15_000
    )
    expect(view.locator("b")).to_have_count(0)  # the server's words as text
    expect(view.get_by_test_id("compare-table")).to_have_count(0)
    view.screenshot(path=str(artifacts / "ui-compare-error.png"))


def test_energy_and_energy_burned_while_starved_per_run(
    shared_server: ServerProcess, page: Any, artifacts: Path
) -> None:
    starved, fed = _gpu_run(shared_server, "starved", 0.03), _gpu_run(shared_server, "fed", 0.0)
    assert shared_server.get(f"/api/v1/runs/{starved}/energy")["starved_j"] == pytest.approx(
        2400.0, rel=0.01
    )  # 30 of each 50 ms waited, over the 10 s of readings
    page.goto(f"{shared_server.url}/#/compare?runs={starved},{fed}")
    table = page.get_by_test_id("compare-table")
    # No star: energy is no metric the user gave a direction (stars are for those only).
    expect(table.locator('tr[data-metric="energy_starved"] td')).to_have_text(
        ["2.4 kJ (60 %)", "0 J (0 %)"], timeout=15_000
    )
    expect(table.locator('tr[data-metric="energy"] td')).to_have_text(["4.0 kJ", "4.0 kJ"])
    page.screenshot(path=str(artifacts / "ui-compare-energy.png"), full_page=True)


def test_compare_follows_a_running_run_as_the_runs_list_does(
    shared_server: ServerProcess, page: Any, artifacts: Path
) -> None:
    # Compare once kept the figures it read when opened while the run page moved on (issue 38:
    # "Lost GPU / device time 1.0 min" beside the run page's 2.8 min).
    finished = _run(shared_server, "ended-neighbour", 0.1)
    live = ScriptedAgent(shared_server, name="still-running", project="ui-compare")
    try:
        live.steps(30, dur=0.1, wait=0.05)
        page.goto(f"{shared_server.url}/#/compare?runs={finished},{live.run_id}")
        table = page.get_by_test_id("compare-diagnosis")
        steps = table.locator('tr[data-metric="steps"] td').nth(1)
        lost = table.locator('tr[data-metric="lost_gpu"] td').nth(1)
        expect(steps).to_have_text("30", timeout=15_000)
        expect(lost).to_have_text("1.5 s")  # 29 timed steps waiting 50 ms
        live.steps(61, dur=0.1, wait=0.05)
        expect(steps).to_have_text("91", timeout=15_000)
        expect(lost).to_have_text("4.5 s")  # 90 timed steps
    finally:
        live.close()
