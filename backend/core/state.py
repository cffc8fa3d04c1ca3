"""The server's long-lived parts, built once in the app's lifespan and typed for the routes."""

from dataclasses import dataclass, field

from sqlalchemy.engine import Engine
from starlette.requests import HTTPConnection

from backend.core.lifecycle import AgentConnections
from backend.core.settings import Settings
from backend.core.telemetry import Telemetry
from backend.diagnosis.detectors import Detectors
from backend.ingest.profile_analysis import AnalysisRuns
from backend.ingest.writer import Writer
from backend.live.agents import ConnectedAgents
from backend.live.hub import LiveHub


@dataclass
class AppState:
    settings: Settings
    engine: Engine
    writer: Writer
    hub: LiveHub
    # The connected agents of each run: told whether a browser watches it, and sent commands.
    agents: ConnectedAgents
    connections: AgentConnections
    telemetry: Telemetry
    detectors: Detectors
    # Profiler traces being analysed: one analysis at a time per profile.
    analyses: AnalysisRuns = field(default_factory=AnalysisRuns)


def app_settings(conn: HTTPConnection) -> Settings:
    """The settings, known from the app's creation (before its lifespan starts)."""
    return conn.app.state.settings


def app_state(conn: HTTPConnection) -> AppState:
    """The parts the lifespan built (set on `app.state.stoker`)."""
    return conn.app.state.stoker
