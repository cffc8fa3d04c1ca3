"""FastAPI dependencies as `Annotated` aliases, shared by REST and WebSocket routes."""

import hmac
from collections.abc import Iterator
from typing import Annotated

from fastapi import Depends, Path, Query
from sqlmodel import Session
from starlette.requests import HTTPConnection

from backend.errors import Unauthorized
from backend.live import LiveHub
from backend.settings import Settings
from backend.writer import Writer


def get_app_settings(conn: HTTPConnection) -> Settings:
    return conn.app.state.settings


def get_session(conn: HTTPConnection) -> Iterator[Session]:
    with Session(conn.app.state.engine) as session:
        yield session


def get_writer(conn: HTTPConnection) -> Writer:
    return conn.app.state.writer


def get_hub(conn: HTTPConnection) -> LiveHub:
    return conn.app.state.hub


# Row ids are 32-bit on PostgreSQL: a larger id is a 422, not an overflow in the database.
RunId = Annotated[int, Path(ge=1, le=2**31 - 1, description="the run's id")]
OptionalRunIdQuery = Annotated[int | None, Query(ge=1, le=2**31 - 1)]

SettingsDep = Annotated[Settings, Depends(get_app_settings)]
SessionDep = Annotated[Session, Depends(get_session)]
WriterDep = Annotated[Writer, Depends(get_writer)]
HubDep = Annotated[LiveHub, Depends(get_hub)]


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


def require_view_token(conn: HTTPConnection, settings: SettingsDep) -> None:
    # An agent token also grants reading: an agent may need to look up its own run.
    presented = presented_token(conn)
    if token_matches(settings.view_token, presented):
        return
    if settings.agent_token and token_matches(settings.agent_token, presented):
        return
    raise Unauthorized("a valid viewer token is required (Authorization: Bearer <token>)")


def require_agent_token(conn: HTTPConnection, settings: SettingsDep) -> None:
    if not token_matches(settings.agent_token, presented_token(conn)):
        raise Unauthorized("a valid agent token is required (Authorization: Bearer <token>)")


ViewerAuth = Depends(require_view_token)
AgentAuth = Depends(require_agent_token)
