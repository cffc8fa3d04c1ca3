"""One figure, one word, in real headless Chromium against a real `stoker serve`: a
finished run's input wait reads the same on the run page's banner and card, in the runs list
and on the compare page, each saying it covers the whole run, with the same verdict words, as
the API's diagnosis and summary give them. The run has no GPU: the page speaks of the device.

Screenshots go to test-artifacts/ui-one-figure-*.png.
"""

import time
import uuid
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.harness.support import ServerProcess

expect = pytest.importorskip("playwright.sync_api").expect


def _finished_run(server: ServerProcess, name: str, wait_s: float) -> int:
    """A finished CPU-only run of 200 steps of 10 ms, each waiting `wait_s`."""
    n, t0 = 200, time.time() - 60
    batch = {
        "type": "batch", "seq": 1,
        "steps": {"step": list(range(n)), "t": [t0 + i * 0.01 for i in range(n)],
                  "dur": [0.01] * n, "wait": [wait_s] * n, "batch_size": [32] * n},
    }  # fmt: skip
    hello = {"type": "hello", "protocol": 1, "run_key": uuid.uuid4().hex, "name": name,
             "project": "one-figure", "environment": {"cpu_count": 2}}  # fmt: skip
    body = {"hello": hello, "batches": [batch], "end": {"type": "end", "status": "finished"}}
    response = httpx.post(f"{server.url}/api/v1/ingest", json=body, timeout=30)
    assert response.status_code == 200, response.text
    return response.json()["run_id"]


def test_a_runs_input_wait_and_verdict_read_the_same_on_every_surface(
    shared_server: ServerProcess, page: Any, artifacts: Path
) -> None:
    # 0.496 ms of 10 ms: 4.96 %, shown as 5.0 % and moderately input-bound everywhere (the
    # issue's run showed "4.7 %", "5 %" and "not input-bound" side by side).
    run_id = _finished_run(shared_server, "edge-of-moderate", 0.000496)
    other = _finished_run(shared_server, "fed-neighbour", 0.0001)
    diagnosis = shared_server.get(f"/api/v1/runs/{run_id}/diagnosis")
    summary = shared_server.get(f"/api/v1/runs/{run_id}")["summary"]
    assert diagnosis["input_wait_share"] == summary["input_wait_share"] == 0.05
    assert diagnosis["verdict"] == summary["verdict"] == "moderately_input_bound"
    assert diagnosis["window_label"] == "whole run"
    words, figure = diagnosis["verdict_label"], "5.0 %"
    assert words == "moderately input-bound"
    evidence = next(e["text"] for e in diagnosis["evidence"] if e["key"] == "input_wait_share")
    assert f"{figure} of step time over the whole run" in evidence

    page.goto(f"{shared_server.url}/#/runs/{run_id}")
    banner = page.get_by_test_id("verdict-banner")
    expect(banner).to_have_attribute("data-window", "whole run", timeout=15_000)
    expect(page.get_by_test_id("verdict-wait")).to_have_text(figure)
    expect(page.get_by_test_id("verdict-words")).to_have_text(words)
    expect(banner.locator(".verdict-meta")).to_contain_text("over the whole run")
    expect(page.get_by_test_id("verdict-evidence")).to_contain_text(figure)
    card = page.locator('[data-figure="wait"]')
    expect(card.locator("dd")).to_have_text(figure)
    expect(card.locator("dt")).to_have_text("Input wait · whole run")
    # No GPU: device time, and small costs in seconds, not "<0.01 GPU·h".
    lost = page.locator('[data-figure="lost_gpu"]')
    expect(lost.locator("dt")).to_have_text("Lost device time")
    expect(lost.locator("dd")).to_have_text("0.1 s")
    page.screenshot(path=str(artifacts / "ui-one-figure-run.png"), full_page=True)

    page.goto(f"{shared_server.url}/#/")
    row = page.locator(f'[data-testid="run-row"][data-run-id="{run_id}"]')
    expect(row.get_by_test_id("input-wait")).to_have_text(figure, timeout=15_000)
    expect(row.get_by_test_id("input-wait")).to_have_attribute("title", f"whole run: {words}")
    expect(row.get_by_test_id("verdict-badge")).to_have_text(words)
    page.screenshot(path=str(artifacts / "ui-one-figure-list.png"), full_page=True)

    page.goto(f"{shared_server.url}/#/compare?runs={run_id},{other}")
    table = page.get_by_test_id("compare-diagnosis")
    wait_row = table.locator('tr[data-metric="wait"]')
    expect(wait_row.locator("td").first).to_have_text(figure, timeout=15_000)
    expect(wait_row.locator("th")).to_contain_text("whole run")
    expect(table.locator('tr[data-metric="verdict"] td').first).to_have_text(words)
    expect(table.locator('tr[data-metric="verdict"] td').nth(1)).to_contain_text("not input-bound")
    page.screenshot(path=str(artifacts / "ui-one-figure-compare.png"), full_page=True)
