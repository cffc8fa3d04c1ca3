"""Tokens on every HTTP route of the OpenAPI document and on both WebSockets; CORS off by
default; request and frame size limits."""

import json
import re
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from fastapi.routing import APIRoute, APIWebSocketRoute
from websockets.exceptions import ConnectionClosed, InvalidStatus
from websockets.sync.client import connect

from stoker_server.core.settings import Settings
from stoker_server.service.app import create_app
from tests.harness.support import ServerProcess
from tests.server.test_ingest_websocket import hello

AGENT, VIEW = "agent-secret-1", "view-secret-2"
PUBLIC = {"/healthz"}  # liveness for container healthchecks: no data, no token
WEBSOCKETS = {"/api/v1/agent", "/api/v1/live"}
# Routes an agent token is required for; every other route takes the view token.
AGENT_ONLY = {
    ("post", "/api/v1/ingest"),
    ("post", "/api/v1/runs/1/profiles/1/status"),  # the agent reports its profiler capture
    ("post", "/api/v1/runs/1/profiles/1/trace"),
    ("post", "/api/v1/tune-groups"),  # `stoker tune` stores its group
}


@pytest.fixture(scope="module")
def locked_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    env = {
        "STOKER_AGENT_TOKEN": AGENT,
        "STOKER_VIEW_TOKEN": VIEW,
        "STOKER_MAX_REQUEST_BYTES": "20000",
        "STOKER_MAX_FRAME_BYTES": "20000",
    }
    process = ServerProcess(data_dir=tmp_path_factory.mktemp("locked"), env=env).start()
    yield process
    process.stop()


def _operations(server: ServerProcess) -> list[tuple[str, str]]:
    schema = httpx.get(f"{server.url}/openapi.json").json()
    return [
        (method, re.sub(r"\{[^}]+\}", "1", path))
        for path, item in schema["paths"].items()
        for method in item
        if path not in PUBLIC
    ]


def _walk(routes: list) -> Iterator:
    for route in routes:
        included = getattr(route, "original_router", None)  # FastAPI's included routers
        yield from _walk(included.routes) if included is not None else [route]


def test_every_route_is_in_the_openapi_document_or_known(tmp_path: Path) -> None:
    """The token test below walks the OpenAPI document: no HTTP route may be missing there."""
    app = create_app(Settings(data_dir=tmp_path))
    routes = list(_walk(app.routes))
    hidden = {r.path for r in routes if isinstance(r, APIRoute) and not r.include_in_schema}
    sockets = {r.path for r in routes if isinstance(r, APIWebSocketRoute)}
    assert sockets == WEBSOCKETS
    assert hidden <= {"/"}  # the "UI not built" page
    documented = set(app.openapi()["paths"])
    assert {r.path for r in routes if isinstance(r, APIRoute) and r.include_in_schema} == documented
    assert {"/metrics", "/api/v1/runs", "/api/v1/compare"} <= documented


def test_every_http_route_refuses_missing_and_wrong_tokens(locked_server: ServerProcess) -> None:
    operations = _operations(locked_server)
    assert len(operations) >= 10
    for method, path in operations:
        url = f"{locked_server.url}{path}"
        for headers in ({}, {"Authorization": "Bearer wrong"}, {"Authorization": "Basic x"}):
            response = httpx.request(method, url, headers=headers, json={})
            assert response.status_code == 401, (method, path, headers)
            assert "token" in response.json()["detail"]
        right = AGENT if (method, path) in AGENT_ONLY else VIEW
        response = httpx.request(method, url, headers={"Authorization": f"Bearer {right}"}, json={})
        assert response.status_code != 401, (method, path)


def _refused_as_wrong_kind(response: httpx.Response, needed: str) -> bool:
    """403 with a JSON message naming the token that is needed."""
    return response.status_code == 403 and f"{needed} token" in response.json()["detail"]


def test_agent_token_is_refused_on_every_read_route(locked_server: ServerProcess) -> None:
    """The agent token sits in every training job's environment: it must not read."""
    reads = [op for op in _operations(locked_server) if op not in AGENT_ONLY]
    assert ("get", "/api/v1/runs") in reads and ("get", "/metrics") in reads
    for method, path in reads:
        for auth in (
            {"headers": {"Authorization": f"Bearer {AGENT}"}},
            {"params": {"token": AGENT}},
        ):
            response = httpx.request(method, f"{locked_server.url}{path}", json={}, **auth)
            assert _refused_as_wrong_kind(response, "viewer"), (method, path, response.text)


def test_view_token_is_refused_on_ingest_and_stores_nothing(locked_server: ServerProcess) -> None:
    view = {"Authorization": f"Bearer {VIEW}"}
    run = hello(name="sent-with-the-view-token")
    response = httpx.post(f"{locked_server.url}/api/v1/ingest", json={"hello": run}, headers=view)
    assert _refused_as_wrong_kind(response, "agent")
    with pytest.raises(InvalidStatus) as refused:
        connect(f"{locked_server.ws_url}/api/v1/agent?token={VIEW}")
    assert refused.value.response.status_code == 403
    assert "agent token" in json.loads(refused.value.response.body)["detail"]
    runs = httpx.get(f"{locked_server.url}/api/v1/runs", params={"q": run["name"]}, headers=view)
    assert runs.status_code == 200 and runs.json()["count"] == 0


def test_live_socket_refuses_the_agent_token_with_a_json_403(locked_server: ServerProcess) -> None:
    with pytest.raises(InvalidStatus) as refused:
        connect(f"{locked_server.ws_url}/api/v1/live?token={AGENT}")
    assert refused.value.response.status_code == 403
    assert "viewer token" in json.loads(refused.value.response.body)["detail"]
    with pytest.raises(InvalidStatus) as refused:
        connect(f"{locked_server.ws_url}/api/v1/live?token=wrong")
    assert refused.value.response.status_code == 401


def test_each_token_works_where_it_belongs(locked_server: ServerProcess) -> None:
    """The agent token delivers over both paths; the viewer token reads what it delivered."""
    name = "delivered-with-the-agent-token"
    agent = {"Authorization": f"Bearer {AGENT}"}
    batch = {"type": "batch", "seq": 1, "steps": {"step": [0], "t": [1.7e9], "dur": [0.1]}}
    response = httpx.post(
        f"{locked_server.url}/api/v1/ingest",
        json={"hello": hello(name=name), "batches": [batch], "end": {"type": "end"}},
        headers=agent,
    )
    assert response.status_code == 200 and response.json()["acked"] == [1]
    with connect(f"{locked_server.ws_url}/api/v1/agent", additional_headers=agent) as ws:
        ws.send(json.dumps(hello(name=name)))
        assert json.loads(ws.recv(timeout=10))["type"] == "welcome"
        ws.send(json.dumps({**batch, "steps": {**batch["steps"], "t": [1.7e9 + 1]}}))
        assert json.loads(ws.recv(timeout=10)) == {"type": "ack", "seq": 1}
    view = {"Authorization": f"Bearer {VIEW}"}
    runs = httpx.get(f"{locked_server.url}/api/v1/runs", params={"q": name}, headers=view)
    assert runs.status_code == 200 and runs.json()["count"] == 2
    with connect(f"{locked_server.ws_url}/api/v1/live?token={VIEW}") as ws:
        assert json.loads(ws.recv(timeout=10))["type"] in ("run", "notice")


def test_token_in_query_parameter_is_accepted(locked_server: ServerProcess) -> None:
    ok = httpx.get(f"{locked_server.url}/api/v1/runs", params={"token": VIEW})
    assert ok.status_code == 200
    assert httpx.get(f"{locked_server.url}/healthz").status_code == 200


@pytest.mark.parametrize("path", sorted(WEBSOCKETS))
def test_websockets_refuse_missing_and_wrong_tokens(
    locked_server: ServerProcess, path: str
) -> None:
    other_kind = VIEW if path.endswith("agent") else AGENT
    for suffix in ("", "?token=wrong", f"?token={other_kind}"):
        with (
            pytest.raises((InvalidStatus, ConnectionClosed)),
            connect(f"{locked_server.ws_url}{path}{suffix}") as ws,
        ):
            ws.send(json.dumps(hello()))
            ws.recv(timeout=10)
    right = AGENT if path.endswith("agent") else VIEW
    with connect(f"{locked_server.ws_url}{path}?token={right}") as ws:
        if path.endswith("agent"):
            ws.send(json.dumps(hello()))
        assert json.loads(ws.recv(timeout=10))["type"] in ("welcome", "run", "notice")


def test_cors_is_off_by_default(locked_server: ServerProcess) -> None:
    response = httpx.options(
        f"{locked_server.url}/api/v1/runs",
        headers={"Origin": "http://elsewhere.example", "Access-Control-Request-Method": "GET"},
    )
    assert "access-control-allow-origin" not in response.headers
    response = httpx.get(
        f"{locked_server.url}/api/v1/runs",
        headers={"Origin": "http://elsewhere.example", "Authorization": f"Bearer {VIEW}"},
    )
    assert "access-control-allow-origin" not in response.headers


def test_oversize_request_bodies_are_refused_with_413(locked_server: ServerProcess) -> None:
    url = f"{locked_server.url}/api/v1/ingest"
    headers = {"Authorization": f"Bearer {AGENT}", "Content-Type": "application/json"}
    body = json.dumps({"hello": hello(config={"pad": "x" * 30_000})}).encode()
    response = httpx.post(url, content=body, headers=headers)
    assert response.status_code == 413 and "20000 bytes" in response.json()["detail"]

    def chunked() -> Iterator[bytes]:  # no Content-Length: counted as it arrives
        for i in range(0, len(body), 4096):
            yield body[i : i + 4096]

    response = httpx.post(url, content=chunked(), headers=headers)
    assert response.status_code == 413
    runs = httpx.get(
        f"{locked_server.url}/api/v1/runs", headers={"Authorization": f"Bearer {VIEW}"}
    )
    assert runs.json()["count"] == 0 or all(
        r["config"].get("pad") is None for r in runs.json()["data"]
    )


def test_oversize_websocket_frame_closes_with_1009(locked_server: ServerProcess) -> None:
    with connect(f"{locked_server.ws_url}/api/v1/agent?token={AGENT}", max_size=None) as ws:
        ws.send(json.dumps(hello()))
        json.loads(ws.recv(timeout=10))
        ws.send(json.dumps({"type": "batch", "seq": 1, "pad": "x" * 30_000}))
        with pytest.raises(ConnectionClosed) as closed:
            ws.recv(timeout=10)
    assert closed.value.rcvd is not None and closed.value.rcvd.code == 1009


@pytest.mark.parametrize("only", ["agent", "view"])
def test_with_one_token_set_only_its_side_is_locked(tmp_path: Path, only: str) -> None:
    """STOKER_AGENT_TOKEN alone locks delivery and leaves reading open; STOKER_VIEW_TOKEN
    alone locks reading and leaves delivery open (docs/api.md, "Authentication")."""
    token = AGENT if only == "agent" else VIEW
    env = {"STOKER_AGENT_TOKEN" if only == "agent" else "STOKER_VIEW_TOKEN": token}
    server = ServerProcess(data_dir=tmp_path / "server", env=env).start()
    try:
        bearer = {"Authorization": f"Bearer {token}"}
        ingest = f"{server.url}/api/v1/ingest"
        runs = f"{server.url}/api/v1/runs"
        open_ingest = httpx.post(ingest, json={"hello": hello()})
        if only == "agent":
            assert open_ingest.status_code == 401 and "agent token" in open_ingest.json()["detail"]
            assert httpx.post(ingest, json={"hello": hello()}, headers=bearer).status_code == 200
            open_read = httpx.get(runs)
            assert open_read.status_code == 200 and open_read.json()["count"] == 1
            with connect(f"{server.ws_url}/api/v1/live") as ws:
                assert json.loads(ws.recv(timeout=10))["type"] in ("run", "notice")
        else:
            assert open_ingest.status_code == 200
            with connect(f"{server.ws_url}/api/v1/agent") as ws:
                ws.send(json.dumps(hello()))
                assert json.loads(ws.recv(timeout=10))["type"] == "welcome"
            open_read = httpx.get(runs)
            assert open_read.status_code == 401 and "viewer token" in open_read.json()["detail"]
            assert httpx.get(runs, headers=bearer).json()["count"] == 2
    finally:
        server.stop()
