"""The run page's input pipeline view in real headless Chromium against a real
`stoker serve`, with runs fed through the HTTP ingest as an agent sends them (a `pipeline`
section per read of tf.data's model):

- a starved run lists its stages from the source to the model and highlights the slow map
  (the bottleneck) with its fix; its function name is shown as text, never as markup;
- a fed run shows the stages and no bottleneck;
- a run whose model was unavailable says so;
- a failed read is said, and read again at the next poll while the run is live.

Screenshot: test-artifacts/ui-pipeline-starved.png.
"""

import time
import uuid
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.harness.support import ServerProcess

expect = pytest.importorskip("playwright.sync_api").expect

HOSTILE = "decode<img src=x onerror=window.__pwned=1>"


def _stages(function: str) -> list[dict[str, Any]]:
    def stage(position, kind, ms, elements, **more):
        return {"position": position, "kind": kind, "name": kind, "ms_per_element": ms,
                "elements": elements, "parallelism": 1.0, "buffered": 0,
                "bytes_per_element": 64.0, **more}  # fmt: skip

    return [
        stage(0, "tensor_slices", 0.002, 3200, name="TensorSlice"),
        stage(1, "parallel_map", 0.05, 3200, parallelism=4.0, buffer_size=4.0, buffered=4,
              function="normalize", name="ParallelMapV2"),
        stage(2, "map", 3.0, 3200, function=function, name="MapDataset"),
        stage(3, "batch", 0.05, 100, name="BatchV2"),
        stage(4, "prefetch", 0.01, 100, buffer_size=2.0, name="Prefetch"),
    ]  # fmt: skip


def _run(
    server: ServerProcess, name: str, wait: float, pipeline: dict[str, Any], *, end: bool = True
) -> int:
    n, t0 = 100, time.time() - 30
    batch = {
        "type": "batch", "seq": 1,
        "steps": {"step": list(range(n)), "t": [t0 + i * 0.1 for i in range(n)],
                  "dur": [0.1] * n, "wait": [wait] * n, "batch_size": [32] * n},
        "pipeline": pipeline,
    }  # fmt: skip
    hello = {"type": "hello", "protocol": 1, "run_key": uuid.uuid4().hex, "name": name,
             "project": "ui-pipeline"}  # fmt: skip
    body: dict[str, Any] = {"hello": hello, "batches": [batch]}
    if end:
        body["end"] = {"type": "end", "status": "finished"}
    response = httpx.post(f"{server.url}/api/v1/ingest", json=body, timeout=30)
    assert response.status_code == 200, response.text
    return response.json()["run_id"]


def _read(stages: list[dict[str, Any]], source: str = "autotune_model") -> dict[str, Any]:
    return {"t": [time.time() - 5], "source": [source], "stages": [stages], "read_us": [300.0]}


def test_starved_run_highlights_the_slow_stage(
    shared_server: ServerProcess, page: Any, artifacts: Path
) -> None:
    run_id = _run(shared_server, "pipeline-starved", 0.08, _read(_stages(HOSTILE)))
    page.goto(f"{shared_server.url}/#/runs/{run_id}")
    view = page.get_by_test_id("pipeline-view")
    expect(view).to_be_visible(timeout=15_000)
    stages = view.get_by_test_id("pipeline-stage")
    expect(stages).to_have_count(5)
    slow = view.locator('[data-testid="pipeline-stage"][data-bottleneck="true"]')
    expect(slow).to_have_count(1)
    expect(slow).to_have_attribute("data-position", "2")
    expect(slow).to_contain_text(HOSTILE)  # shown as text
    expect(view.locator("img")).to_have_count(0)  # not as markup
    note = view.get_by_test_id("pipeline-bottleneck")
    expect(note).to_contain_text("num_parallel_calls")
    expect(note).to_contain_text("Bottleneck: stage 2")
    assert page.evaluate("window.__pwned") is None
    view.scroll_into_view_if_needed()
    page.screenshot(path=str(artifacts / "ui-pipeline-starved.png"), full_page=True)
    view.screenshot(path=str(artifacts / "ui-pipeline-view.png"))


def test_fed_run_has_stages_and_no_highlight(shared_server: ServerProcess, page: Any) -> None:
    run_id = _run(shared_server, "pipeline-fed", 0.0, _read(_stages("decode")))
    page.goto(f"{shared_server.url}/#/runs/{run_id}")
    view = page.get_by_test_id("pipeline-view")
    expect(view.get_by_test_id("pipeline-stage")).to_have_count(5, timeout=15_000)
    expect(view.locator('[data-bottleneck="true"]')).to_have_count(0)
    expect(view.get_by_test_id("pipeline-bottleneck")).to_have_count(0)


def test_unavailable_model_is_said(shared_server: ServerProcess, page: Any) -> None:
    run_id = _run(shared_server, "pipeline-unavailable", 0.05, _read([], "unavailable"))
    page.goto(f"{shared_server.url}/#/runs/{run_id}")
    expect(page.get_by_test_id("pipeline-unavailable")).to_contain_text(
        "autotune model is unavailable", timeout=15_000
    )


def test_a_failed_read_is_said_and_read_again_while_live(
    shared_server: ServerProcess, page: Any, artifacts: Path
) -> None:
    run_id = _run(shared_server, "pipeline-flaky", 0.08, _read(_stages("decode")), end=False)
    failed: list[str] = []

    def fail_once(route: Any) -> None:
        if failed:
            route.continue_()
        else:
            failed.append(route.request.url)
            route.fulfill(status=503, content_type="application/json",
                          body='{"detail": "database busy <b>"}')  # fmt: skip

    page.route(f"**/api/v1/runs/{run_id}/pipeline", fail_once)
    page.goto(f"{shared_server.url}/#/runs/{run_id}")
    view = page.get_by_test_id("pipeline-view")
    error = view.get_by_test_id("pipeline-error")
    expect(error).to_have_text(
        "Cannot load the input pipeline (503 database busy <b>); retrying…", timeout=15_000
    )
    expect(view.locator("b")).to_have_count(0)  # the server's words as text
    view.screenshot(path=str(artifacts / "ui-pipeline-error.png"))
    # The next poll (every 4 s while live) reads it again.
    expect(view.get_by_test_id("pipeline-stage")).to_have_count(5, timeout=15_000)
    expect(error).to_be_hidden()
    assert len(failed) == 1
