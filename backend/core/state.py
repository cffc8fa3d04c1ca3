"""The server's long-lived parts, built once in the app's lifespan and typed for the routes."""

from dataclasses import dataclass, field

from sqlalchemy.engine import Engine
from starlette.requests import HTTPConnection

from backend.core.lifecycle import AgentConnections
from backend.core.settings import Settings
from backend.core.telemetry import Telemetry
from backend.diagnosis.detectors import Detectors
from backend.ingest.writer import Writer
from backend.live.commands import AgentCommands
from backend.live.hub import LiveHub
from backend.live.watch import WatchedRuns


@dataclass
class AppState:
    settings: Settings
    engine: Engine
    writer: Writer
    hub: LiveHub
    watched: WatchedRuns  # agents send live while a browser watches their run
    connections: AgentConnections
    telemetry: Telemetry
    detectors: Detectors
    commands: AgentCommands = field(default_factory=AgentCommands)  # e.g. profile


def app_settings(conn: HTTPConnection) -> Settings:
    """The settings, known from the app's creation (before its lifespan starts)."""
    return conn.app.state.settings


def app_state(conn: HTTPConnection) -> AppState:
    """The parts the lifespan built (set on `app.state.stoker`)."""
    return conn.app.state.stoker
