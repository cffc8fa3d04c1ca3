"""Bad input gets a clear 4xx (or WebSocket close code) with a reason, and nothing half stored."""

import contextlib
import json
import os
import socket
import sqlite3
import uuid
from typing import Any

import httpx
import pytest
from websockets.exceptions import ConnectionClosed
from websockets.sync.client import connect

from tests.harness.support import ServerProcess


def _hello(**overrides: Any) -> dict[str, Any]:
    message = {"type": "hello", "protocol": 1, "run_key": uuid.uuid4().hex, "name": "bad"}
    message.update(overrides)
    return message


def _steps_batch(**steps: Any) -> dict[str, Any]:
    columns = {"step": [1, 2], "t": [1.7e9, 1.7e9 + 1], "dur": [0.1, 0.1]}
    columns.update(steps)
    return {"type": "batch", "seq": 1, "steps": columns}


DEEP = '{"a":' * 50_000 + "1" + "}" * 50_000

BAD_HTTP_BODIES: dict[str, tuple[bytes, str]] = {
    "malformed json": (b'{"hello": ', "Invalid JSON"),
    "empty body": (b"", "Invalid JSON"),
    "not an object": (b"[]", "object"),
    "deep nesting": (
        (
            '{"hello": {"type": "hello", "protocol": 1, "run_key": "k'
            + "x" * 20
            + '", "config": '
            + DEEP
            + "}}"
        ).encode(),
        "recursion limit",
    ),
    "wrong type": (json.dumps({"hello": _hello(name=5)}).encode(), "hello.name"),
    "unknown field": (json.dumps({"hello": _hello(colour="red")}).encode(), "hello.colour"),
    "unknown protocol": (json.dumps({"hello": _hello(protocol=2)}).encode(), "protocol version"),
    "a million tags": (json.dumps({"hello": _hello(tags=["t"] * 1_000_000)}).encode(), "tags"),
    "negative step": (
        json.dumps({"hello": _hello(), "batches": [_steps_batch(step=[-1, 2])]}).encode(),
        "greater than or equal to 0",
    ),
    "out-of-order steps": (
        json.dumps({"hello": _hello(), "batches": [_steps_batch(step=[5, 4])]}).encode(),
        "increase strictly",
    ),
    "NaN timestamp": (
        json.dumps({"hello": _hello(), "batches": [_steps_batch(t=[float("nan"), 1.0])]}).encode(),
        "finite",
    ),
    "Inf duration": (
        json.dumps(
            {"hello": _hello(), "batches": [_steps_batch(dur=[float("inf"), 1.0])]}
        ).encode(),
        "finite",
    ),
    "huge array over the size limit": (
        json.dumps(
            {"hello": _hello(), "batches": [_steps_batch(step=list(range(2_000_000)))]}
        ).encode(),
        "bytes",
    ),
}


@pytest.mark.parametrize("case", list(BAD_HTTP_BODIES))
def test_bad_http_ingest_is_refused_with_reason_and_stores_nothing(
    shared_server: ServerProcess, case: str
) -> None:
    server = shared_server
    runs_before = server.get("/api/v1/runs")["count"]
    body, expected = BAD_HTTP_BODIES[case]
    response = httpx.post(
        f"{server.url}/api/v1/ingest",
        content=body,
        headers={"content-type": "application/json"},
        timeout=60,
    )
    assert 400 <= response.status_code < 500, response.text[:300]
    assert expected in response.json()["detail"]
    assert server.get("/api/v1/runs")["count"] == runs_before


def test_stored_data_failing_its_model_is_a_500_with_json_not_a_422(
    shared_server: ServerProcess,
) -> None:
    """Only bad requests are 4xx: the server's own data failing validation is its error."""
    server = shared_server
    response = httpx.post(f"{server.url}/api/v1/ingest", json={"hello": _hello()}, timeout=60)
    run_id = response.json()["run_id"]
    with contextlib.closing(sqlite3.connect(server.data_dir / "stoker.db", timeout=10)) as db:
        db.execute("UPDATE run SET summary = ? WHERE id = ?", ('{"steps": "many"}', run_id))
        db.commit()
    response = httpx.get(f"{server.url}/api/v1/runs/{run_id}", timeout=60)
    assert response.status_code == 500
    assert "stored data failed validation" in response.json()["detail"]
    assert "a server-side model failed validation" in server.log_text()


def test_unicode_names_are_stored_exactly(shared_server: ServerProcess) -> None:
    server = shared_server
    name = "训练 🚀 \u202eevil\u202c ü"
    body = {"hello": _hello(name=name, tags=["ß", "🏷"], project="проект")}
    response = httpx.post(f"{server.url}/api/v1/ingest", json=body)
    assert response.status_code == 200
    run = server.get(f"/api/v1/runs/{response.json()['run_id']}")
    assert (run["name"], run["tags"], run["project"]) == (name, ["ß", "🏷"], "проект")


def _agent(server: ServerProcess) -> Any:
    ws = connect(f"{server.ws_url}/api/v1/agent", max_size=None).__enter__()
    ws.send(json.dumps(_hello()))
    assert json.loads(ws.recv(timeout=10))["type"] == "welcome"
    return ws


@pytest.mark.parametrize(
    ("frame", "expected"),
    [
        ("{not json", "Invalid JSON"),
        (json.dumps({"type": "batch"}), "seq"),
        (json.dumps({"type": "teleport", "seq": 1}), "type"),
        (json.dumps({**_steps_batch(), "extra": 1}), "extra"),
        (json.dumps(_steps_batch(dur=["slow", 0.1])), "dur"),
    ],
)
def test_bad_websocket_frame_gets_error_and_socket_stays_usable(
    shared_server: ServerProcess, frame: str, expected: str
) -> None:
    ws = _agent(shared_server)
    ws.send(frame)
    reply = json.loads(ws.recv(timeout=10))
    assert reply["type"] == "error" and expected in reply["message"]
    ws.send(json.dumps(_steps_batch()))
    assert json.loads(ws.recv(timeout=10)) == {"type": "ack", "seq": 1}
    ws.close()


def _masked_frame(payload: bytes, *, declared_length: int | None = None) -> bytes:
    """A client text frame (RFC 6455 5.2) whose header may claim more than it carries."""
    length = len(payload) if declared_length is None else declared_length
    if length < 126:
        head = bytes([0x81, 0x80 | length])
    elif length < 2**16:
        head = bytes([0x81, 0x80 | 126]) + length.to_bytes(2, "big")
    else:
        head = bytes([0x81, 0x80 | 127]) + length.to_bytes(8, "big")
    mask = os.urandom(4)
    return head + mask + bytes(b ^ mask[i % 4] for i, b in enumerate(payload))


def _read_frame(stream: Any) -> tuple[int, bytes]:
    first, second = stream.read(2)
    length = second & 0x7F
    if length == 126:
        length = int.from_bytes(stream.read(2), "big")
    elif length == 127:
        length = int.from_bytes(stream.read(8), "big")
    return first & 0x0F, stream.read(length)


def test_oversize_websocket_frame_closes_with_1009(shared_server: ServerProcess) -> None:
    # Raw socket: the frame's header announces 20 MB; the server must refuse it from the
    # header alone, with close code 1009, without reading (or buffering) the payload.
    with socket.create_connection(("127.0.0.1", shared_server.port), timeout=30) as sock:
        sock.sendall(
            b"GET /api/v1/agent HTTP/1.1\r\nHost: 127.0.0.1\r\nUpgrade: websocket\r\n"
            b"Connection: Upgrade\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n"
            b"Sec-WebSocket-Version: 13\r\n\r\n"
        )
        stream = sock.makefile("rb")
        assert b" 101 " in stream.readline()
        while stream.readline() not in (b"\r\n", b""):
            pass
        sock.sendall(_masked_frame(json.dumps(_hello()).encode()))
        opcode, welcome = _read_frame(stream)
        assert opcode == 1 and json.loads(welcome)["type"] == "welcome"
        sock.sendall(_masked_frame(b"x" * 65536, declared_length=20 * 2**20))
        opcode, payload = _read_frame(stream)
    assert opcode == 8  # close
    assert int.from_bytes(payload[:2], "big") == 1009


def test_garbage_before_hello_closes_with_reason(shared_server: ServerProcess) -> None:
    ws = connect(f"{shared_server.ws_url}/api/v1/agent").__enter__()
    ws.send("hello?")
    with pytest.raises(ConnectionClosed) as closed:
        ws.recv(timeout=10)
    assert closed.value.rcvd.code == 4400 and "bad hello" in closed.value.rcvd.reason
