"""Who may do what (docs/security.md): every route's role, walked against a real server; the
server bound beyond loopback never open; web pages kept out (Host, Origin, simple writes);
request and frame size limits."""

import hashlib
import json
import os
import re
import socket
import stat
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from fastapi.routing import APIRoute, APIWebSocketRoute
from websockets.exceptions import ConnectionClosed, InvalidStatus
from websockets.sync.client import connect

from stoker_server.core.auth import ROLE_OF_DEPENDENCY
from stoker_server.core.settings import Settings
from stoker_server.service.app import create_app
from tests.harness.support import REPO, ServerProcess, wait_for
from tests.server.test_ingest_websocket import hello

AGENT, VIEW, ADMIN = "agent-secret-1", "view-secret-2", "admin-secret-3"
TOKENS = {"agent": AGENT, "viewer": VIEW, "admin": ADMIN}
PUBLIC = {("get", "/healthz"), ("get", "/api/v1/access")}  # no data: liveness, who am I
# Every route that is not a read: its role, named here (a new write route must be added).
WRITES = {
    ("post", "/api/v1/ingest"): "agent",
    ("post", "/api/v1/runs/{run_id}/profiles/{pid}/status"): "agent",  # the agent's reports
    ("post", "/api/v1/runs/{run_id}/profiles/{pid}/trace"): "agent",
    ("patch", "/api/v1/runs/{run_id}"): "admin",
    ("delete", "/api/v1/runs/{run_id}"): "admin",
    ("post", "/api/v1/runs/{run_id}/profiles"): "admin",
    ("post", "/api/v1/alert-rules"): "admin",
    ("patch", "/api/v1/alert-rules/{rule_id}"): "admin",
    ("delete", "/api/v1/alert-rules/{rule_id}"): "admin",
    ("post", "/api/v1/tune-groups"): "agent",  # `stoker tune` stores its group
    ("delete", "/api/v1/tune-groups/{group_id}"): "admin",
}
WEBSOCKETS = {"/api/v1/agent": "agent", "/api/v1/live": "viewer"}
# Which tokens each role's routes take: the admin token reads too; the agent's reads nothing.
TAKES = {"agent": {"agent"}, "viewer": {"viewer", "admin"}, "admin": {"admin"}}


def _walk(routes: list) -> Iterator:
    for route in routes:
        included = getattr(route, "original_router", None)  # FastAPI's included routers
        yield from _walk(included.routes) if included is not None else [route]


def _declared_role(route: APIRoute) -> str | None:
    """The strongest role among the route's dependencies (router-level ones included)."""
    roles = set()
    stack = [route.dependant]
    while stack:
        dependant = stack.pop()
        if dependant.call in ROLE_OF_DEPENDENCY:
            roles.add(ROLE_OF_DEPENDENCY[dependant.call].value)
        stack.extend(dependant.dependencies)
    for role in ("agent", "admin", "viewer"):
        if role in roles:
            return role
    return None


def _expected_role(method: str, path: str) -> str:
    if (method, path) in PUBLIC:
        return "public"
    if method != "get":
        assert (method, path) in WRITES, f"{method} {path}: a write with no role named here"
        return WRITES[(method, path)]
    return "viewer"


def test_every_route_declares_the_role_it_needs(tmp_path: Path) -> None:
    """Each HTTP route carries one of ViewerAuth / AdminAuth / AgentAuth, and it is the one
    named here: reads are the viewer's, every write is named in WRITES. A new route without a
    role, or a write left to viewers, fails here."""
    app = create_app(Settings(data_dir=tmp_path))
    routes = list(_walk(app.routes))
    sockets = {r.path for r in routes if isinstance(r, APIWebSocketRoute)}
    assert sockets == set(WEBSOCKETS)
    hidden = {r.path for r in routes if isinstance(r, APIRoute) and not r.include_in_schema}
    assert hidden <= {"/"}  # the "UI not built" page
    http = [r for r in routes if isinstance(r, APIRoute) and r.include_in_schema]
    assert {r.path for r in http} == set(app.openapi()["paths"])
    seen_writes = set()
    for route in http:
        for method in route.methods - {"HEAD"}:
            key = (method.lower(), route.path)
            expected = _expected_role(*key)
            declared = _declared_role(route)
            assert declared == (None if expected == "public" else expected), (key, declared)
            seen_writes |= {key} if key in WRITES else set()
    assert seen_writes == set(WRITES)


@pytest.fixture(scope="module")
def locked_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    admin_hash = "sha256:" + hashlib.sha256(ADMIN.encode()).hexdigest()  # held as a hash
    env = {
        "STOKER_AGENT_TOKEN": AGENT,
        "STOKER_VIEW_TOKEN": VIEW,
        "STOKER_ADMIN_TOKEN": admin_hash,
        "STOKER_MAX_REQUEST_BYTES": "20000",
        "STOKER_MAX_FRAME_BYTES": "20000",
    }
    process = ServerProcess(data_dir=tmp_path_factory.mktemp("locked"), env=env).start()
    yield process
    process.stop()


def _operations(server: ServerProcess) -> list[tuple[str, str, str]]:
    """(method, path with ids filled in, role) of every documented operation."""
    schema = httpx.get(f"{server.url}/openapi.json").json()
    return [
        (method, re.sub(r"\{[^}]+\}", "1", path), _expected_role(method, path))
        for path, item in schema["paths"].items()
        for method in item
    ]


def _bearer(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


def test_every_http_route_takes_exactly_its_roles_tokens(locked_server: ServerProcess) -> None:
    """Walked against the running server: no token or a wrong one is a 401; a valid token of
    a role the route does not take is a 403 naming the token it needs; its own passes. The
    token in the URL is not read on HTTP routes."""
    operations = _operations(locked_server)
    assert len(operations) >= 20
    for method, path, role in operations:
        url = f"{locked_server.url}{path}"
        if role == "public":
            assert httpx.request(method, url).status_code == 200, path
            continue
        for headers in ({}, _bearer("wrong"), {"Authorization": "Basic x"}):
            response = httpx.request(method, url, headers=headers, json={})
            assert response.status_code == 401, (method, path, headers)
            assert "token" in response.json()["detail"]
        in_url = httpx.request(method, url, params={"token": TOKENS[role]}, json={})
        assert in_url.status_code == 401, (method, path, "?token= on an HTTP route")
        for kind, token in TOKENS.items():
            response = httpx.request(method, url, headers=_bearer(token), json={})
            if kind in TAKES[role]:
                assert response.status_code not in (401, 403), (method, path, kind, response.text)
            else:
                assert response.status_code == 403, (method, path, kind, response.text)
                assert "token" in response.json()["detail"]


@pytest.mark.parametrize("path", sorted(WEBSOCKETS))
def test_websockets_take_exactly_their_roles_tokens(
    locked_server: ServerProcess, path: str
) -> None:
    """`?token=` is read on the WebSocket routes (browsers cannot set headers there)."""
    role = WEBSOCKETS[path]
    for suffix in ("", "?token=wrong"):
        with pytest.raises(InvalidStatus) as refused:
            connect(f"{locked_server.ws_url}{path}{suffix}")
        assert refused.value.response.status_code == 401
    for kind, token in TOKENS.items():
        for how in ("query", "header"):
            options: dict[str, Any] = {}
            url = f"{locked_server.ws_url}{path}"
            if how == "query":
                url += f"?token={token}"
            else:
                options["additional_headers"] = _bearer(token)
            if kind not in TAKES[role]:
                with pytest.raises(InvalidStatus) as refused:
                    connect(url, **options)
                assert refused.value.response.status_code == 403
                assert "token" in json.loads(refused.value.response.body)["detail"]
                continue
            with connect(url, **options) as ws:
                if role == "agent":
                    ws.send(json.dumps(hello()))
                assert json.loads(ws.recv(timeout=10))["type"] in ("welcome", "run", "notice")


def test_viewer_token_cannot_delete_create_rules_or_profile(locked_server: ServerProcess) -> None:
    """The probes of issue 39: with the viewer token, deleting a run, creating an alert rule
    with a webhook, and starting a profile are refused, and nothing changes."""
    base = f"{locked_server.url}/api/v1"
    ended = {"hello": hello(name="kept"), "end": {"type": "end"}}
    stored = httpx.post(f"{base}/ingest", json=ended, headers=_bearer(AGENT)).json()
    run_id = stored["run_id"]
    view = _bearer(VIEW)
    assert httpx.delete(f"{base}/runs/{run_id}", headers=view).status_code == 403
    rule = {"name": "r", "metric": "gpu_util", "comparison": "<", "threshold": 70,
            "channels": [{"type": "webhook", "url": "https://hooks.example.com/x"}]}  # fmt: skip
    assert httpx.post(f"{base}/alert-rules", json=rule, headers=view).status_code == 403
    profile = httpx.post(f"{base}/runs/{run_id}/profiles", json={"steps": 5}, headers=view)
    assert profile.status_code == 403 and "admin token" in profile.json()["detail"]
    assert httpx.get(f"{base}/runs/{run_id}", headers=view).status_code == 200
    rules = httpx.get(f"{base}/alert-rules", headers=view).json()["data"]
    assert all(r["name"] != "r" for r in rules)
    scrape = httpx.get(f"{locked_server.url}/metrics", headers=view)
    assert scrape.status_code == 200  # Prometheus scrapes with the viewer token...
    assert httpx.delete(f"{base}/runs/{run_id}", headers=view).status_code == 403  # ...harmless
    access = httpx.get(f"{base}/access", headers=view).json()
    assert access == {"roles": ["viewer"], "token_required": True, "admin_available": True}
    admin = httpx.get(f"{base}/access", headers=_bearer(ADMIN)).json()
    assert admin["roles"] == ["viewer", "admin"]  # the admin token, held as a hash, works
    assert httpx.delete(f"{base}/runs/{run_id}", headers=_bearer(ADMIN)).status_code == 204


@pytest.mark.parametrize("only", ["agent", "view"])
def test_on_loopback_a_role_without_a_token_is_open_but_admin_never_beyond_viewer(
    tmp_path: Path, only: str
) -> None:
    """On loopback, STOKER_AGENT_TOKEN alone locks delivery and leaves reading (and editing)
    to the local user; STOKER_VIEW_TOKEN alone locks reading, and with no admin token the
    admin actions are off for everyone (403 naming STOKER_ADMIN_TOKEN)."""
    token = AGENT if only == "agent" else VIEW
    env = {"STOKER_AGENT_TOKEN" if only == "agent" else "STOKER_VIEW_TOKEN": token}
    server = ServerProcess(data_dir=tmp_path / "server", env=env).start()
    try:
        ingest, runs = f"{server.url}/api/v1/ingest", f"{server.url}/api/v1/runs"
        open_ingest = httpx.post(ingest, json={"hello": hello()})
        if only == "agent":
            assert open_ingest.status_code == 401 and "agent token" in open_ingest.json()["detail"]
            ended = {"hello": hello(), "end": {"type": "end"}}
            stored = httpx.post(ingest, json=ended, headers=_bearer(token)).json()
            open_read = httpx.get(runs)
            assert open_read.status_code == 200 and open_read.json()["count"] == 1
            with connect(f"{server.ws_url}/api/v1/live") as ws:
                assert json.loads(ws.recv(timeout=10))["type"] in ("run", "notice")
            assert httpx.delete(f"{runs}/{stored['run_id']}").status_code == 204
        else:
            assert open_ingest.status_code == 200
            with connect(f"{server.ws_url}/api/v1/agent") as ws:
                ws.send(json.dumps(hello()))
                assert json.loads(ws.recv(timeout=10))["type"] == "welcome"
            open_read = httpx.get(runs)
            assert open_read.status_code == 401 and "viewer token" in open_read.json()["detail"]
            assert httpx.get(runs, headers=_bearer(token)).json()["count"] == 2
            run_id = open_ingest.json()["run_id"]
            refused = httpx.delete(f"{runs}/{run_id}", headers=_bearer(token))
            assert refused.status_code == 403 and "STOKER_ADMIN_TOKEN" in refused.json()["detail"]
            access = httpx.get(f"{server.url}/api/v1/access", headers=_bearer(token)).json()
            assert access["admin_available"] is False
    finally:
        server.stop()


# --- fail closed -----------------------------------------------------------------------------


def _printed_url(server: ServerProcess) -> str:
    found = wait_for(
        lambda: re.search(r"Stoker UI: (\S+)", server.log_text()), what="the printed URL"
    )
    return found[1]


def test_bound_beyond_loopback_without_tokens_it_makes_them_and_prints_the_url(
    tmp_path: Path,
) -> None:
    """As Jupyter: tokens made on first start, kept 0600 in the data directory, the URL
    printed with the viewer token; nothing is served without one. (Bound to every address;
    the test talks to 127.0.0.1 only.)"""
    server = ServerProcess(data_dir=tmp_path, extra_args=["--host", "0.0.0.0"]).start()
    try:
        url = _printed_url(server)
        token_file = tmp_path / "tokens.json"
        assert stat.S_IMODE(token_file.stat().st_mode) == 0o600
        tokens = json.loads(token_file.read_text())
        assert set(tokens) == {"viewer", "admin", "agent"} and len(set(tokens.values())) == 3
        assert url == f"http://127.0.0.1:{server.port}/?token={tokens['viewer']}"
        assert str(token_file) in server.log_text()
        runs = f"{server.url}/api/v1/runs"
        assert httpx.get(runs).status_code == 401
        assert httpx.post(f"{server.url}/api/v1/ingest", json={"hello": hello()}).status_code == 401
        with pytest.raises(InvalidStatus):
            connect(f"{server.ws_url}/api/v1/live")
        assert httpx.get(runs, headers=_bearer(tokens["viewer"])).status_code == 200
        assert httpx.get(server.url + "/").status_code == 200  # the UI's files hold no data
    finally:
        server.stop()
    again = ServerProcess(data_dir=tmp_path, extra_args=["--host", "0.0.0.0"]).start()
    try:  # the next start keeps them: agents' settings and bookmarks stay valid
        assert _printed_url(again).endswith(f"?token={tokens['viewer']}")
        assert json.loads(token_file.read_text()) == tokens
    finally:
        again.stop()


def test_the_docker_image_and_compose_file_are_not_open(tmp_path: Path) -> None:
    """The image's environment (STOKER_HOST=0.0.0.0) with what compose passes (the three
    tokens, empty unless set): tokens are made, nothing is served without one."""
    dockerfile = (REPO / "Dockerfile").read_text()
    assert re.search(r"^ENV STOKER_HOST=0\.0\.0\.0 ", dockerfile, re.M)
    compose = (REPO / "docker-compose.yml").read_text()
    for name in ("STOKER_AGENT_TOKEN", "STOKER_VIEW_TOKEN", "STOKER_ADMIN_TOKEN"):
        assert f"{name}: ${{{name}:-}}" in compose
    env = {"STOKER_HOST": "0.0.0.0", "STOKER_AGENT_TOKEN": "", "STOKER_VIEW_TOKEN": "",
           "STOKER_ADMIN_TOKEN": ""}  # fmt: skip
    server = ServerProcess(data_dir=tmp_path, env=env).start()
    try:
        assert "?token=" in _printed_url(server)
        assert httpx.get(f"{server.url}/api/v1/runs").status_code == 401
        assert httpx.get(f"{server.url}/healthz").status_code == 200  # the healthcheck
    finally:
        server.stop()


def test_no_auth_is_the_explicit_and_logged_way_out(tmp_path: Path) -> None:
    server = ServerProcess(data_dir=tmp_path, extra_args=["--host", "0.0.0.0", "--no-auth"])
    server.start()
    try:
        assert httpx.get(f"{server.url}/api/v1/runs").status_code == 200
        assert not (tmp_path / "tokens.json").exists()
        assert "--no-auth: serving 0.0.0.0 without tokens" in server.log_text()
        assert "?token=" not in _printed_url(server)
    finally:
        server.stop()


def test_a_malformed_token_hash_stops_the_start_with_one_line(tmp_path: Path) -> None:
    import subprocess
    import sys

    result = subprocess.run(
        [sys.executable, "-m", "stoker_server.cli", "serve", "--port", "0", "--data-dir",
         str(tmp_path)],
        env={**os.environ, "STOKER_ADMIN_TOKEN": "sha256:abc"}, capture_output=True, text=True,
        timeout=60,
    )  # fmt: skip
    assert result.returncode == 1
    assert "STOKER_ADMIN_TOKEN starts with 'sha256:'" in result.stderr
    assert "Traceback" not in result.stderr


# --- web pages kept out ------------------------------------------------------------------------


@pytest.fixture(scope="module")
def open_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    """Loopback, no token: the demo's and the harness's server. Open to the local user only."""
    env = {"STOKER_ALLOWED_ORIGINS": "https://dash.example.com"}
    process = ServerProcess(data_dir=tmp_path_factory.mktemp("open"), env=env).start()
    yield process
    process.stop()


@pytest.mark.parametrize("path", sorted(WEBSOCKETS))
def test_websockets_refuse_another_sites_origin(open_server: ServerProcess, path: str) -> None:
    """A page on another site cannot open either socket (it would read every run's name and
    config, or write runs); the server's own page, a listed origin and a client that sends no
    Origin (not a browser) can."""
    url = f"{open_server.ws_url}{path}"
    for origin in ("http://evil.example", "null", f"http://127.0.0.1:{open_server.port + 1}"):
        with pytest.raises(InvalidStatus) as refused:
            connect(url, origin=origin)  # type: ignore[arg-type]
        assert refused.value.response.status_code == 403
        assert "Origin" in json.loads(refused.value.response.body)["detail"]
    for origin in (f"http://127.0.0.1:{open_server.port}", "https://dash.example.com", None):
        with connect(url, origin=origin) as ws:  # type: ignore[arg-type]
            if path.endswith("agent"):
                ws.send(json.dumps(hello()))
            assert json.loads(ws.recv(timeout=10))["type"] in ("welcome", "run", "notice")


def test_only_loopback_host_names_are_answered_on_loopback(open_server: ServerProcess) -> None:
    """DNS rebinding: a page on evil.example re-pointed to 127.0.0.1 sends its own Host."""
    runs = f"{open_server.url}/api/v1/runs"
    refused = httpx.get(runs, headers={"Host": f"evil.example:{open_server.port}"})
    assert refused.status_code == 403 and "STOKER_ALLOWED_HOSTS" in refused.json()["detail"]
    rebound = socket.create_connection(("127.0.0.1", open_server.port))  # evil.example's "IP"
    with pytest.raises(InvalidStatus) as socket_refused:
        connect(f"ws://evil.example:{open_server.port}/api/v1/live", sock=rebound)
    assert socket_refused.value.response.status_code == 403
    for host in (f"localhost:{open_server.port}", "127.0.0.1", f"[::1]:{open_server.port}"):
        assert httpx.get(runs, headers={"Host": host}).status_code == 200, host


def test_writes_from_another_site_or_as_simple_requests_are_refused(
    open_server: ServerProcess,
) -> None:
    """POST /ingest as text/plain (a 'simple' cross-site request, no preflight) is a 415, and
    any write whose Origin is another site a 403; nothing is stored."""
    base = f"{open_server.url}/api/v1"
    name = "sent-cross-site"
    body = json.dumps({"hello": hello(name=name)})
    for content_type in ("text/plain", "application/x-www-form-urlencoded", None):
        headers = {"Content-Type": content_type} if content_type else {}
        response = httpx.post(f"{base}/ingest", content=body, headers=headers)
        assert response.status_code == 415, (content_type, response.text)
        assert "application/json" in response.json()["detail"]
    cross = httpx.post(
        f"{base}/ingest",
        content=body,
        headers={"Content-Type": "application/json", "Origin": "http://evil.example"},
    )
    assert cross.status_code == 403
    deleted = httpx.delete(f"{base}/runs/1", headers={"Origin": "http://evil.example"})
    assert deleted.status_code == 403
    assert httpx.get(f"{base}/runs", params={"q": name}).json()["count"] == 0
    own = {"Content-Type": "application/json", "Origin": f"http://127.0.0.1:{open_server.port}"}
    assert httpx.post(f"{base}/ingest", content=body, headers=own).status_code == 200


def test_the_ui_is_served_with_csp_no_framing_and_nosniff(open_server: ServerProcess) -> None:
    for path in ("/", "/api/v1/runs"):
        headers = httpx.get(f"{open_server.url}{path}").headers
        assert headers["x-frame-options"] == "DENY"
        assert headers["x-content-type-options"] == "nosniff"
        assert headers["referrer-policy"] == "no-referrer"
        policy = headers["content-security-policy"]
        assert "frame-ancestors 'none'" in policy and "script-src 'self'" in policy
        assert "connect-src 'self'" in policy
    docs = httpx.get(f"{open_server.url}/docs").headers  # Swagger UI: its CDN scripts load
    assert "content-security-policy" not in docs and docs["x-frame-options"] == "DENY"


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


# --- bounded by bytes --------------------------------------------------------------------------


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
    assert all(r["config"].get("pad") is None for r in runs.json()["data"])


def test_oversize_websocket_frame_closes_with_1009(locked_server: ServerProcess) -> None:
    with connect(f"{locked_server.ws_url}/api/v1/agent?token={AGENT}", max_size=None) as ws:
        ws.send(json.dumps(hello()))
        json.loads(ws.recv(timeout=10))
        ws.send(json.dumps({"type": "batch", "seq": 1, "pad": "x" * 30_000}))
        with pytest.raises(ConnectionClosed) as closed:
            ws.recv(timeout=10)
    assert closed.value.rcvd is not None and closed.value.rcvd.code == 1009
