"""Run lifecycle: an agent that vanishes without `end` leaves an interrupted run; the same
run key resumes it."""

import json
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from websockets.sync.client import connect

from tests.harness.support import ServerProcess, wait_for
from tests.server.test_ingest_websocket import batch, hello, open_agent, send


@pytest.fixture
def quick_server(tmp_path: Path, database: str) -> Iterator[ServerProcess]:
    env = {"STOKER_DATABASE_URL": database, "STOKER_HEARTBEAT_TIMEOUT_S": "1"}
    process = ServerProcess(data_dir=tmp_path / "server", env=env).start()
    yield process
    process.stop()


def _status(server: ServerProcess, run_id: int) -> str:
    return server.get(f"/api/v1/runs/{run_id}")["status"]


@pytest.mark.parametrize("database", ["sqlite", "postgres"], indirect=True)
def test_vanished_agent_run_is_interrupted_and_resumes(quick_server: ServerProcess) -> None:
    key = uuid.uuid4().hex
    ws, welcome = open_agent(quick_server, hello(run_key=key))
    run_id = welcome["run_id"]
    send(ws, batch(1, 0))
    # A second run whose agent stays connected but silent must stay running throughout.
    idle, idle_welcome = open_agent(quick_server, hello())
    ws.close()  # no `end`: the process was killed
    wait_for(lambda: _status(quick_server, run_id) == "interrupted", what="interrupted run")
    run = quick_server.get(f"/api/v1/runs/{run_id}")
    assert run["ended_at"] is not None
    assert _status(quick_server, idle_welcome["run_id"]) == "running"

    ws, again = open_agent(quick_server, hello(run_key=key))
    assert again["run_id"] == run_id and again["last_seq"] == 1
    assert _status(quick_server, run_id) == "running"
    assert send(ws, batch(2, 10)) == {"type": "ack", "seq": 2}
    assert send(ws, {"type": "end"}) == {"type": "ack", "end": True}
    ws.close()
    idle.close()
    run = quick_server.get(f"/api/v1/runs/{run_id}")
    assert run["status"] == "finished" and run["summary"]["steps"] == 20


def test_finished_run_is_never_interrupted(quick_server: ServerProcess) -> None:
    ws, welcome = open_agent(quick_server, hello())
    send(ws, {"type": "end"})
    ws.close()
    # Wait until a vanished run is interrupted: the reaper has passed since.
    with connect(f"{quick_server.ws_url}/api/v1/agent") as other:
        other.send(json.dumps(hello()))
        other_id = json.loads(other.recv(timeout=10))["run_id"]
    wait_for(lambda: _status(quick_server, other_id) == "interrupted", what="reaper pass")
    assert _status(quick_server, welcome["run_id"]) == "finished"
