"""The server's long-lived parts, built once in the app's lifespan and typed for the routes."""

from dataclasses import dataclass, field

from sqlalchemy.engine import Engine
from starlette.requests import HTTPConnection

from stoker_server.core.settings import Settings
from stoker_server.diagnosis.detectors import Detectors
from stoker_server.ingest.profile_analysis import AnalysisRuns
from stoker_server.ingest.writer import Writer
from stoker_server.live.agents import ConnectedAgents
from stoker_server.live.hub import LiveHub
from stoker_server.service.lifecycle import AgentConnections
from stoker_server.service.telemetry import Telemetry


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
