"""Profiler captures in headless Chromium: the run page's "Profile N steps" button, its progress and
its result (xprof's analysis beside Stoker's input wait), and a failure's message."""

import time
import uuid
from pathlib import Path
from typing import Any

import httpx
import pytest
from sqlmodel import Session

from stoker_server.core.db import make_engine
from stoker_server.core.settings import Settings
from stoker_server.ingest import profiles as store
from tests.fit.test_profile_capture import Training, small_dataset, steps_stored
from tests.harness.faults import fail_profile_start
from tests.harness.support import ServerProcess, wait_for


def _open_live_run(server: ServerProcess, page: Any, name: str, dataset: Any = None) -> Training:
    training = Training(server, small_dataset() if dataset is None else dataset, name)
    try:
        run_id = training.run_id()
        wait_for(lambda: steps_stored(server, run_id) >= 20, timeout_s=60, what="steps")
        page.goto(f"{server.url}/#/runs/{run_id}")
        page.get_by_test_id("profile-panel").wait_for()
    except BaseException:
        training.stop()  # no fit of this test outlives it
        raise
    return training


def _status(page: Any) -> str:
    result = page.get_by_test_id("profile-result")
    return result.get_attribute("data-status") if result.count() else ""


def test_failed_profile_shows_its_message(
    server: ServerProcess,
    page: Any,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    fail_profile_start(monkeypatch)
    training = _open_live_run(server, page, "ui-profile-fails")
    try:
        button = page.get_by_test_id("profile-button")
        wait_for(button.is_enabled, what="the button enabled for a live run")
        button.click()
        wait_for(lambda: _status(page) == "failed", timeout_s=60, what="the failure shown")
        assert training.thread.is_alive()
    finally:
        training.stop()
    status = page.get_by_test_id("profile-status").text_content()
    assert status.startswith("profile failed: InjectedFault")


# A capture of two workers of one distributed run, put in the server's store the way its
# agents' reports and uploads and its analysis put it there (no Keras, no xprof): rank 1's
# input is starved, rank 2's agent failed with a message full of markup.
HOSTILE = "profile failed: <img src=x onerror=window.__pwned=1>"


def _worker_steps(server: ServerProcess, run_key: str, rank: int, wait: float) -> int:
    n, t0 = 60, time.time() - 30
    batch = {
        "type": "batch", "seq": 1,
        "steps": {"step": list(range(n)), "t": [t0 + i * 0.1 for i in range(n)],
                  "dur": [0.1] * n, "wait": [wait] * n, "batch_size": [32] * n},
    }  # fmt: skip
    hello = {"type": "hello", "protocol": 1, "run_key": run_key, "name": "ui-profile-workers",
             "project": "ui-profile", "host": f"host{rank}", "rank": rank}  # fmt: skip
    body = {"hello": hello, "batches": [batch]}
    response = httpx.post(f"{server.url}/api/v1/ingest", json=body, timeout=30)
    assert response.status_code == 200, response.text
    return response.json()["run_id"]


def _analysis(input_ms: float, step_ms: float = 100.0) -> dict[str, Any]:
    return {
        "available": True,
        "conclusion": f"Your program is input-bound: {input_ms / step_ms:.0%} of the step time.",
        "step_ms_average": step_ms,
        "breakdown_ms": {"step_ms": step_ms, "input_ms": input_ms,
                         "host_compute_ms": step_ms - input_ms},
    }  # fmt: skip


def _two_worker_profile(server: ServerProcess, database: str) -> tuple[int, int]:
    run_key = uuid.uuid4().hex
    run_id = _worker_steps(server, run_key, 0, wait=0.01)
    assert _worker_steps(server, run_key, 1, wait=0.06) == run_id
    engine = make_engine(Settings(data_dir=server.data_dir, database_url=database),
                         migrate_schema=False)  # fmt: skip
    with Session(engine, expire_on_commit=False) as session:
        pid = store.create_profile(
            session=session, run_id=run_id, steps=20, stale_after_s=600, ranks=[0, 1, 2]
        ).id
        for rank in (0, 1):
            data = b"xplane of rank %d " % rank * 400
            store.update_status(
                session=session, run_id=run_id, pid=pid, rank=rank,
                report={"status": "uploading", "first_step": 10, "last_step": 29,
                        "bytes": len(data), "overhead": {"step_s_before": 0.1,
                        "step_s_during": 0.1 + 0.004 * (rank + 1), "ratio": 1 + 0.04 * (rank + 1),
                        "start_s": 0.3, "stop_s": 1.2}},
            )  # fmt: skip
            store.store_chunk(
                session=session, data_dir=server.data_dir, run_id=run_id, pid=pid, rank=rank,
                offset=0, total=len(data), data=data, max_bytes=2**20,
            )  # fmt: skip
        store.update_status(
            session=session, run_id=run_id, pid=pid, rank=2,
            report={"status": "failed", "error": HOSTILE},
        )  # fmt: skip
        store.finish(
            session=session, pid=pid, analysis=_analysis(12.0), profiler_share=0.12,
            steps=(11, 28), data_dir=server.data_dir, quota_bytes=2**30,
            per_worker={0: (_analysis(12.0), 0.12, (11, 28)),
                        1: (_analysis(58.0), 0.58, (11, 28))},
        )  # fmt: skip
    engine.dispose()
    return run_id, pid


def test_profile_of_several_workers_lists_them_and_marks_the_starving_one(
    server: ServerProcess, database: str, page: Any, artifacts: Path
) -> None:
    run_id, pid = _two_worker_profile(server, database)
    page.goto(f"{server.url}/#/runs/{run_id}")
    table = page.get_by_test_id("profile-workers")
    table.wait_for()
    rows = table.get_by_test_id("profile-worker")
    assert [rows.nth(i).get_attribute("data-rank") for i in range(3)] == ["0", "1", "2"]
    starving = table.locator('[data-starving="true"]')
    assert starving.count() == 1 and starving.get_attribute("data-rank") == "1"
    cells = rows.nth(1).locator("td").all_text_contents()
    # Stoker's wait of rank 1 over steps 11-28: 0.06 s of 0.1 s steps.
    en_dash, minus = "\u2013", "\u2212"  # as the UI writes ranges and negative differences
    assert cells[1:8] == [
        "ready", f"20 (10{en_dash}29)", "58.0 %", "60.0 %", f"{minus}2.0 pts", "+8.0%", "7 KiB",
    ]  # fmt: skip
    assert rows.nth(0).locator("td").all_text_contents()[3:6] == ["12.0 %", "10.0 %", "+2.0 pts"]
    assert "Rank 1 waits longest" in page.get_by_test_id("profile-starving-note").text_content()
    failed = rows.nth(2)
    assert failed.locator("td").nth(1).text_content() == "failed"
    assert failed.get_by_test_id("profile-worker-problem").text_content() == HOSTILE
    assert page.locator("[data-testid=profile-panel] img").count() == 0
    assert page.evaluate("window.__pwned") is None
    assert failed.get_by_test_id("profile-worker-download").count() == 0
    # The merged analysis, labelled as all the workers'; the single trace link gives way to
    # one per worker.
    assert "All 3 workers together" in page.get_by_test_id("profile-merged").text_content()
    assert "input-bound" in page.get_by_test_id("profile-conclusion").text_content()
    assert page.get_by_test_id("profile-download").count() == 0
    with page.expect_download() as download:
        rows.nth(1).get_by_test_id("profile-worker-download").click()
    assert download.value.suggested_filename == f"run{run_id}-profile{pid}-rank1.xplane.pb"
    assert Path(download.value.path()).read_bytes() == b"xplane of rank 1 " * 400
    panel = page.get_by_test_id("profile-panel")
    panel.screenshot(path=str(artifacts / "run-page-profile-workers.png"))


def test_profiles_that_cannot_be_read_say_so(server: ServerProcess, page: Any) -> None:
    run_id = _worker_steps(server, uuid.uuid4().hex, 0, wait=0.01)
    page.route(
        f"**/api/v1/runs/{run_id}/profiles",
        lambda route: route.fulfill(status=503, json={"detail": "database is locked"}),
    )
    page.goto(f"{server.url}/#/runs/{run_id}")
    error = page.get_by_test_id("profile-load-error")
    error.wait_for()
    message = error.text_content()
    assert message.startswith("Cannot load the run's profiles (503 database is locked)")
    assert page.get_by_test_id("profile-result").count() == 0


def _named_pipeline() -> Any:
    """zip(x, y).map(fast_normalize).map(slow_decode).batch(16): slow_decode calls Python."""
    import numpy as np
    import tensorflow as tf

    from tests.fit.test_profile_capture import FEATURES

    x = np.random.default_rng(0).random((256, FEATURES), dtype=np.float32)
    y = np.random.default_rng(1).random((256, 1), dtype=np.float32)

    def fast_normalize(a: Any, b: Any) -> Any:
        return a * 0.5, b

    def slow_decode(a: Any, b: Any) -> Any:
        out = tf.numpy_function(lambda v: (time.sleep(0.0005), v)[1], [a], a.dtype,
                                stateful=True)  # fmt: skip
        return tf.ensure_shape(out, a.shape), b

    pair = (tf.data.Dataset.from_tensor_slices(x), tf.data.Dataset.from_tensor_slices(y))
    return tf.data.Dataset.zip(pair).map(fast_normalize).map(slow_decode).batch(16)


# Last in the module: the only real capture here.
def test_profile_button_shows_progress_and_result(
    server: ServerProcess,
    page: Any,
    artifacts: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("STOKER_PIPELINE_INTERVAL_S", "0.5")  # the stages read before the capture
    training = _open_live_run(server, page, "ui-profile", _named_pipeline())
    try:
        page.get_by_test_id("profile-steps").fill("10")
        button = page.get_by_test_id("profile-button")
        assert button.text_content() == "Profile 10 steps"
        wait_for(button.is_enabled, what="the button enabled for a live run")
        button.click()
        seen = wait_for(lambda: _status(page), what="the profile's progress")
        assert seen in ("requested", "capturing", "uploading", "ready")
        wait_for(lambda: _status(page) == "ready", timeout_s=180, what="the profile ready")
        shares = page.get_by_test_id("profile-shares")
        wait_for(lambda: "waiting" not in shares.text_content(), what="Stoker's input share")
    finally:
        training.stop()
    assert "input" in page.get_by_test_id("profile-conclusion").text_content()
    assert "Difference" in shares.text_content()
    assert "Input" in page.get_by_test_id("profile-breakdown").text_content()
    # Issue 38: the tables speak the user's pipeline, styled, Stoker's stamp labelled.
    iterators = page.get_by_test_id("profile-iterator")
    stages = iterators.locator("td.stage").all_text_contents()
    assert any(text.endswith("map and batch 'slow_decode'") for text in stages), stages
    assert any(text.endswith("parallel map 'fast_normalize'") for text in stages), stages
    # `wrap` adds no stage to the pipeline now; a row of one (an earlier agent's) says so.
    stokers = page.locator("[data-testid=profile-iterator][data-owner=stoker] td.stage")
    assert all("Stoker" in label for label in stokers.all_text_contents())
    assert not any(text.startswith("Iterator::") for text in stages)
    ops = page.get_by_test_id("profile-op")
    python = [
        ops.nth(i).locator("td").nth(3).text_content()
        for i in range(ops.count())
        if ops.nth(i).locator("td").nth(1).text_content() == "PyFunc"
        and "StatefulPartitionedCall" not in ops.nth(i).locator("td").nth(2).text_content()
    ]
    assert python and python[0].startswith("in slow_decode (stage "), python
    header = page.get_by_test_id("profile-iterators").locator("thead th").first
    assert header.evaluate("e => getComputedStyle(e).backgroundColor") != "rgba(0, 0, 0, 0)"
    # A long name wraps between its parts, never inside a word.
    cell = page.get_by_test_id("profile-ops").locator("td.name").first
    assert cell.evaluate("e => getComputedStyle(e).overflowWrap") == "normal"
    assert cell.locator("wbr").count() >= 1 or "/" not in cell.text_content()
    assert "Capture overhead" in page.get_by_test_id("profile-overhead").text_content()
    with page.expect_download() as download:
        page.get_by_test_id("profile-download").click()
    assert download.value.suggested_filename.endswith(".xplane.pb")
    page.screenshot(path=str(artifacts / "run-page-profile.png"), full_page=True)
    page.get_by_test_id("profile-panel").screenshot(path=str(artifacts / "profile-panel.png"))
