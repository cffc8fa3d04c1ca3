"""The diagnosis is judged on what is stored.

Once a batch is acknowledged, `GET /runs/{id}/diagnosis` must not answer from a verdict the
detectors computed before that batch arrived, nor from an in-memory window that missed steps
stored earlier. Each test first makes sure a detector tick has judged the run while it held
too few steps (an alert rule scoped to the run fires on that tick), then stores enough steps
and reads the diagnosis at once.

The detector tick is slowed to 1 s so that a read right after the ack lands before the next
tick: that is the gap in which the old code answered `insufficient_data`. What the tests
assert holds at any speed; the slow tick only makes the old race show every time.
"""

import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.conftest import DATABASES
from tests.harness.detect_support import ScriptedAgent
from tests.harness.support import ServerProcess, wait_for

pytestmark = pytest.mark.parametrize("database", DATABASES, indirect=True)

MIN_STEPS = 20  # the server's default diagnosis_min_steps
ROUNDS = 3  # runs per test, each read right after its steps were acknowledged
SLOW_TICK = {"STOKER_DETECTOR_TICK_S": "1", "STOKER_DIAGNOSIS_WINDOW_S": "30"}


@pytest.fixture
def server(tmp_path: Path, database: str) -> Iterator[ServerProcess]:
    process = ServerProcess(
        data_dir=tmp_path / "server", env={**SLOW_TICK, "STOKER_DATABASE_URL": database}
    ).start()
    yield process
    process.stop()


def _steps(first: int, n: int, *, t0: float, dur: float = 0.05, wait: float = 0.0005) -> dict:
    """`n` fed steps (1 % of each step waits for input) from step `first`, agent clock `t0`."""
    return {
        "step": list(range(first, first + n)),
        "t": [t0 + (first + i) * dur for i in range(n)],
        "dur": [dur] * n,
        "wait": [wait] * n,
        "batch_size": [32] * n,
    }


def _post(server: ServerProcess, run_key: str, batches: list[dict[str, Any]]) -> int:
    """The HTTP fallback path: a hello and its batches in one request; returns the run id."""
    hello = {"type": "hello", "protocol": 1, "run_key": run_key, "name": "http-fed"}
    response = httpx.post(
        f"{server.url}/api/v1/ingest", json={"hello": hello, "batches": batches}, timeout=30
    )
    assert response.status_code == 200, response.text
    return response.json()["run_id"]


def _wait_for_a_tick_on(server: ServerProcess, run_id: int) -> None:
    """Block until a detector tick has judged the run as it is now.

    A rule that holds for any watched run (`no_data >= 0`) is scoped to this run; its alert
    is stored by the first tick that evaluates the run after the rule was loaded."""
    rule = {
        "name": f"tick probe {run_id}", "metric": "no_data", "comparison": ">=",
        "threshold": 0, "scope": "run", "run_id": run_id,
    }  # fmt: skip
    response = httpx.post(f"{server.url}/api/v1/alert-rules", json=rule, timeout=10)
    assert response.status_code in (200, 201), response.text
    wait_for(
        lambda: server.get("/api/v1/alerts", run_id=run_id)["data"],
        what=f"a detector tick on run {run_id}",
    )


def _assert_judged_on_stored_steps(server: ServerProcess, run_id: int, stored: int) -> None:
    summary = server.get(f"/api/v1/runs/{run_id}")["summary"]
    assert summary["steps"] == stored
    diagnosis = server.get(f"/api/v1/runs/{run_id}/diagnosis")
    assert diagnosis["verdict"] == "not_input_bound", diagnosis
    assert diagnosis["source"] == "measured"
    assert diagnosis["steps_in_window"] >= MIN_STEPS
    assert diagnosis["input_wait_share"] == pytest.approx(0.01, rel=1e-3)


def test_diagnosis_read_right_after_websocket_acks_is_judged_on_the_stored_steps(
    server: ServerProcess,
) -> None:
    for _ in range(ROUNDS):
        agent = ScriptedAgent(server, name="ws-fed")
        try:
            t0 = agent.t
            agent.send(steps=_steps(0, 5, t0=t0))  # too few for a verdict
            _wait_for_a_tick_on(server, agent.run_id)
            agent.send(steps=_steps(5, 40, t0=t0))  # acknowledged: stored
            _assert_judged_on_stored_steps(server, agent.run_id, stored=45)
        finally:
            agent.close()


def test_diagnosis_read_right_after_an_http_batch_is_judged_on_the_stored_steps(
    server: ServerProcess,
) -> None:
    for _ in range(ROUNDS):
        run_key, t0 = uuid.uuid4().hex, 1.7e9
        run_id = _post(server, run_key, [{"type": "batch", "seq": 1, "steps": _steps(0, 5, t0=t0)}])
        _wait_for_a_tick_on(server, run_id)
        _post(server, run_key, [{"type": "batch", "seq": 2, "steps": _steps(5, 40, t0=t0)}])
        _assert_judged_on_stored_steps(server, run_id, stored=45)


def test_diagnosis_after_a_server_restart_counts_the_steps_stored_before_it(
    server: ServerProcess,
) -> None:
    """The restarted server's in-memory window holds only what came after the restart."""
    run_key, t0 = uuid.uuid4().hex, 1.7e9
    run_id = _post(server, run_key, [{"type": "batch", "seq": 1, "steps": _steps(0, 40, t0=t0)}])
    server.stop()
    server.start()
    agent = ScriptedAgent(server, name="http-fed", run_key=run_key)
    try:
        assert agent.run_id == run_id
        agent.seq = 1
        agent.send(steps=_steps(40, 5, t0=t0))  # the new window: 5 steps; the store: 45
        _wait_for_a_tick_on(server, run_id)
        _assert_judged_on_stored_steps(server, run_id, stored=45)
    finally:
        agent.close()


def test_diagnosis_of_an_ended_run_is_computed_from_the_store(server: ServerProcess) -> None:
    agent = ScriptedAgent(server, name="ended")
    try:
        t0 = agent.t
        agent.send(steps=_steps(0, 5, t0=t0))
        _wait_for_a_tick_on(server, agent.run_id)
        agent.send(steps=_steps(5, 40, t0=t0))
        agent.end()
        assert server.get(f"/api/v1/runs/{agent.run_id}")["status"] == "finished"
        _assert_judged_on_stored_steps(server, agent.run_id, stored=45)
        # An ended run's answer is judged on the whole run as stored: its summary's figure.
        ended = server.get(f"/api/v1/runs/{agent.run_id}/diagnosis")
        summary = server.get(f"/api/v1/runs/{agent.run_id}")["summary"]
        assert ended["window_label"] == "whole run"
        assert ended["input_wait_share"] == summary["input_wait_share"]
        assert ended == server.get(f"/api/v1/runs/{agent.run_id}/diagnosis")  # final
    finally:
        agent.close()
