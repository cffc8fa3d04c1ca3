"""FastAPI dependencies as `Annotated` aliases, shared by REST and WebSocket routes."""

import hmac
from collections.abc import Iterator
from enum import StrEnum
from typing import Annotated

from fastapi import Depends, Path, Query, WebSocket
from fastapi.responses import JSONResponse
from sqlmodel import Session
from starlette.requests import HTTPConnection

from stoker_server.api.state import AppState, app_settings, app_state
from stoker_server.core.errors import Forbidden, RunNotFound, StokerError, Unauthorized
from stoker_server.core.models import Run
from stoker_server.core.settings import Settings
from stoker_server.diagnosis.detectors import Detectors
from stoker_server.ingest.writer import Writer
from stoker_server.live.hub import LiveHub


def get_session(conn: HTTPConnection) -> Iterator[Session]:
    with Session(app_state(conn).engine) as session:
        yield session


def get_writer(conn: HTTPConnection) -> Writer:
    return app_state(conn).writer


def get_hub(conn: HTTPConnection) -> LiveHub:
    return app_state(conn).hub


def get_detectors(conn: HTTPConnection) -> Detectors:
    return app_state(conn).detectors


# Row ids are 32-bit on PostgreSQL: a larger id is a 422, not an overflow in the database.
RunId = Annotated[int, Path(ge=1, le=2**31 - 1, description="the run's id")]
OptionalRunIdQuery = Annotated[int | None, Query(ge=1, le=2**31 - 1)]

SettingsDep = Annotated[Settings, Depends(app_settings)]
StateDep = Annotated[AppState, Depends(app_state)]
SessionDep = Annotated[Session, Depends(get_session)]
WriterDep = Annotated[Writer, Depends(get_writer)]
HubDep = Annotated[LiveHub, Depends(get_hub)]
DetectorsDep = Annotated[Detectors, Depends(get_detectors)]


def get_run(session: SessionDep, run_id: RunId) -> Run:
    """The run `run_id`, or a 404. The dependency behind `RunDep`, and a plain call."""
    run = session.get(Run, run_id)
    if run is None:
        raise RunNotFound(run_id)
    return run


# The path's run; a route that only needs it to exist (else 404) lists `RunExists`.
RunDep = Annotated[Run, Depends(get_run)]
RunExists = Depends(get_run)


def presented_token(conn: HTTPConnection) -> str | None:
    """The bearer token from the Authorization header, or the `token` query parameter
    (browsers cannot set headers on a WebSocket)."""
    header = conn.headers.get("authorization", "")
    if header.lower().startswith("bearer "):
        return header[7:].strip()
    return conn.query_params.get("token")


def token_matches(expected: str | None, presented: str | None) -> bool:
    if not expected:
        return True
    return presented is not None and hmac.compare_digest(
        expected.encode("utf-8"), presented.encode("utf-8")
    )


class TokenKind(StrEnum):
    agent = "agent"  # delivers: the agent WebSocket and POST /ingest (fallback, upload)
    viewer = "viewer"  # reads, and the UI's edits


_WRONG_KIND = {
    TokenKind.viewer: "the agent token only delivers runs; reading needs the viewer token",
    TokenKind.agent: "the viewer token cannot deliver runs; sending needs the agent token",
}


def check_token(conn: HTTPConnection, settings: Settings, needed: TokenKind) -> None:
    """Raise unless `conn` presents the `needed` token, or that token is not set (then this
    side is open to anyone, whichever token they present).

    The tokens grant disjoint rights: the agent token sits in every training job's
    environment, so it must not read what other runs hold. A valid token of the other kind
    is a 403, a missing or wrong one a 401.
    """
    expected, other = (
        (settings.agent_token, settings.view_token)
        if needed == TokenKind.agent
        else (settings.view_token, settings.agent_token)
    )
    presented = presented_token(conn)
    if token_matches(expected, presented):
        return
    if other and token_matches(other, presented):
        raise Forbidden(_WRONG_KIND[needed])
    raise Unauthorized(f"a valid {needed} token is required (Authorization: Bearer <token>)")


async def refuse_websocket(websocket: WebSocket, error: StokerError) -> None:
    """Refuse a WebSocket handshake as HTTP (401/403, `{"detail": ...}`) where the server
    supports denial responses; else a policy-violation close, which clients see as 403."""
    if "websocket.http.response" in websocket.scope.get("extensions", {}):
        body = JSONResponse({"detail": error.detail}, status_code=error.status_code)
        await websocket.send_denial_response(body)
    else:
        await websocket.close(code=1008, reason=error.detail)


def require_view_token(conn: HTTPConnection, settings: SettingsDep) -> None:
    check_token(conn, settings, TokenKind.viewer)


def require_agent_token(conn: HTTPConnection, settings: SettingsDep) -> None:
    check_token(conn, settings, TokenKind.agent)


ViewerAuth = Depends(require_view_token)
AgentAuth = Depends(require_agent_token)
