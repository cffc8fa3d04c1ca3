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

from backend.app import create_app
from backend.settings import Settings
from tests.support import ServerProcess
from tests.test_ingest_websocket import hello

AGENT, VIEW = "agent-secret-1", "view-secret-2"
PUBLIC = {"/healthz"}  # liveness for container healthchecks: no data, no token
WEBSOCKETS = {"/api/v1/agent", "/api/v1/live"}
# Routes an agent token is required for; every other route takes the view token.
AGENT_ONLY = {("post", "/api/v1/ingest")}


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
        if (method, path) in AGENT_ONLY:
            response = httpx.request(
                method, url, headers={"Authorization": f"Bearer {VIEW}"}, json={}
            )
            assert response.status_code == 401, (method, path)


def test_token_in_query_parameter_is_accepted(locked_server: ServerProcess) -> None:
    ok = httpx.get(f"{locked_server.url}/api/v1/runs", params={"token": VIEW})
    assert ok.status_code == 200
    assert httpx.get(f"{locked_server.url}/healthz").status_code == 200


@pytest.mark.parametrize("path", sorted(WEBSOCKETS))
def test_websockets_refuse_missing_and_wrong_tokens(
    locked_server: ServerProcess, path: str
) -> None:
    for suffix in ("", "?token=wrong", f"?token={VIEW if path.endswith('agent') else 'x'}"):
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
