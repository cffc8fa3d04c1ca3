"""FastAPI dependencies as `Annotated` aliases, shared by REST and WebSocket routes."""

from collections.abc import Iterator
from typing import Annotated

from fastapi import Depends, Path, Query
from sqlmodel import Session
from starlette.requests import HTTPConnection

from stoker_server.api.state import AppState, app_settings, app_state
from stoker_server.core.errors import RunNotFound
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
