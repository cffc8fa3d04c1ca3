"""The agent WebSocket against a real server: acks after commit, replay-safe, clear refusals."""

import json
import uuid
from typing import Any

import pytest
from websockets.exceptions import ConnectionClosed
from websockets.sync.client import connect

from tests.harness.support import ServerProcess


def hello(**overrides: Any) -> dict[str, Any]:
    message = {
        "type": "hello",
        "protocol": 1,
        "run_key": uuid.uuid4().hex,
        "name": "ws-run",
        "project": "tests",
        "host": "h1",
    }
    message.update(overrides)
    return message


def batch(seq: int, first_step: int, n: int = 10) -> dict[str, Any]:
    steps = list(range(first_step, first_step + n))
    return {
        "type": "batch",
        "seq": seq,
        "steps": {
            "step": steps,
            "t": [1_700_000_000.0 + s * 0.01 for s in steps],
            "dur": [0.01] * n,
            "wait": [0.002] * n,
            "batch_size": [32] * n,
        },
    }


def open_agent(db_server: ServerProcess, message: dict[str, Any]) -> tuple[Any, dict[str, Any]]:
    ws = connect(f"{db_server.ws_url}/api/v1/agent").__enter__()
    ws.send(json.dumps(message))
    return ws, json.loads(ws.recv(timeout=10))


def send(ws: Any, message: dict[str, Any]) -> dict[str, Any]:
    ws.send(json.dumps(message))
    return json.loads(ws.recv(timeout=10))


def test_ingest_batch_is_acked_and_stored(db_server: ServerProcess) -> None:
    ws, welcome = open_agent(db_server, hello())
    assert welcome["type"] == "welcome" and welcome["last_seq"] == 0
    assert send(ws, batch(1, 0)) == {"type": "ack", "seq": 1}
    ws.close()
    series = db_server.get(f"/api/v1/runs/{welcome['run_id']}/steps")
    assert series["step"] == list(range(10))
    assert series["wait"] == [0.002] * 10


def test_ingest_duplicate_seq_is_ignored(db_server: ServerProcess) -> None:
    message = hello()
    ws, welcome = open_agent(db_server, message)
    send(ws, batch(1, 0))
    assert send(ws, batch(1, 0)) == {"type": "ack", "seq": 1}
    ws.close()
    # A reconnect with the same run key resumes the run and reports the last stored seq.
    ws, again = open_agent(db_server, message)
    assert again["run_id"] == welcome["run_id"] and again["last_seq"] == 1
    send(ws, batch(1, 0))
    send(ws, batch(2, 10))
    ws.close()
    run = db_server.get(f"/api/v1/runs/{welcome['run_id']}")
    assert run["summary"]["steps"] == 20
    series = db_server.get(f"/api/v1/runs/{welcome['run_id']}/steps")
    assert series["step"] == list(range(20))


def test_ingest_bad_batch_gets_error_and_connection_survives(db_server: ServerProcess) -> None:
    ws, welcome = open_agent(db_server, hello())
    bad = batch(1, 0)
    bad["steps"]["dur"] = bad["steps"]["dur"][:-1]
    reply = send(ws, bad)
    assert reply["type"] == "error"
    assert "'dur' has 9 values" in reply["message"]
    assert send(ws, batch(1, 0)) == {"type": "ack", "seq": 1}
    ws.close()
    assert db_server.get(f"/api/v1/runs/{welcome['run_id']}")["summary"]["steps"] == 10


def test_ingest_nan_wait_is_stored_as_null(db_server: ServerProcess) -> None:
    ws, welcome = open_agent(db_server, hello())
    message = batch(1, 0, n=2)
    message["steps"]["wait"] = [float("nan"), 0.001]
    ws.send(json.dumps(message))  # json.dumps writes NaN, as Python agents do
    assert json.loads(ws.recv(timeout=10))["type"] == "ack"
    ws.close()
    assert db_server.get(f"/api/v1/runs/{welcome['run_id']}/steps")["wait"] == [None, 0.001]


def test_ingest_unknown_protocol_version_is_refused_with_reason(db_server: ServerProcess) -> None:
    ws = connect(f"{db_server.ws_url}/api/v1/agent").__enter__()
    ws.send(json.dumps(hello(protocol=99)))
    with pytest.raises(ConnectionClosed) as closed:
        ws.recv(timeout=10)
    assert closed.value.rcvd.code == 4400
    assert "unsupported protocol version 99" in closed.value.rcvd.reason


def test_ingest_binary_frame_is_refused(db_server: ServerProcess) -> None:
    ws, _ = open_agent(db_server, hello())
    ws.send(b"\x00\xffgarbage")
    with pytest.raises(ConnectionClosed) as closed:
        ws.recv(timeout=10)
    assert closed.value.rcvd.code == 1003


def test_ingest_end_marks_run_finished(db_server: ServerProcess) -> None:
    ws, welcome = open_agent(db_server, hello())
    send(ws, batch(1, 0))
    assert send(ws, {"type": "end", "status": "failed"}) == {"type": "ack", "end": True}
    ws.close()
    run = db_server.get(f"/api/v1/runs/{welcome['run_id']}")
    assert run["status"] == "failed" and run["ended_at"] is not None


def test_http_ingest_stores_all_batches_or_none(db_server: ServerProcess) -> None:
    import httpx

    project = uuid.uuid4().hex
    good = {
        "hello": hello(project=project),
        "batches": [batch(1, 0), batch(2, 10)],
        "end": {"type": "end"},
    }
    response = httpx.post(f"{db_server.url}/api/v1/ingest", json=good)
    assert response.status_code == 200, response.text
    assert response.json()["acked"] == [1, 2]
    run = db_server.get(f"/api/v1/runs/{response.json()['run_id']}")
    assert run["summary"]["steps"] == 20 and run["status"] == "finished"

    bad = {"hello": hello(project=project), "batches": [batch(1, 0), {"type": "batch", "seq": 0}]}
    response = httpx.post(f"{db_server.url}/api/v1/ingest", json=bad)
    assert response.status_code == 422
    assert "seq" in response.json()["detail"]
    assert db_server.get("/api/v1/runs", project=project)["count"] == 1


def test_ingest_all_sections_are_stored_and_summarized(db_server: ServerProcess) -> None:
    ws, welcome = open_agent(db_server, hello())
    message = batch(1, 0, n=3)
    message["metrics"] = {"step": [1, 2], "name": ["loss", "loss"], "value": [0.5, float("inf")]}
    message["device"] = {
        "t": [1.7e9, 1.7e9 + 1, 1.7e9],
        "gpu": [0, 0, 1],
        "util": [90.0, 30.0, None],
        "mem_used": [1e9, 2e9, 5e8],
        "throttle": [0, 4, None],
    }
    message["host"] = {"t": [1.7e9], "proc_cpu": [150.0], "rss": [3e9]}
    message["agent"] = {"dropped_rows": 7, "spooled_rows": 0}
    assert send(ws, message) == {"type": "ack", "seq": 1}
    ws.close()
    summary = db_server.get(f"/api/v1/runs/{welcome['run_id']}")["summary"]
    assert summary["gpu_util_mean"] == 60.0
    assert summary["peak_memory_bytes"] == 2e9
    assert summary["dropped_rows"] == 7
    assert summary["nonfinite_metrics"] == 1


def test_ingest_misaligned_device_section_is_refused_whole(db_server: ServerProcess) -> None:
    ws, welcome = open_agent(db_server, hello())
    message = batch(1, 0, n=3)
    message["device"] = {"t": [1.7e9, 1.7e9], "gpu": [0]}
    reply = send(ws, message)
    assert reply["type"] == "error" and reply["seq"] == 1
    assert "'gpu' has 1 values" in reply["message"]
    ws.close()
    assert db_server.get(f"/api/v1/runs/{welcome['run_id']}")["summary"]["steps"] == 0
