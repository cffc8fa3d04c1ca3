"""The server's long-lived parts, built once by `service.build.build_state` and typed for the
routes."""

from dataclasses import dataclass

from sqlalchemy.engine import Engine
from starlette.requests import HTTPConnection

from stoker_server.api.profile_captures import ProfileCaptures
from stoker_server.api.telemetry import Telemetry
from stoker_server.core.settings import Settings
from stoker_server.diagnosis.detectors import Detectors
from stoker_server.diagnosis.webhooks import WebhookSender
from stoker_server.ingest.writer import Writer
from stoker_server.live.agents import ConnectedAgents
from stoker_server.live.fanout import PgFanout, PgRelay
from stoker_server.live.hub import LiveHub


@dataclass(frozen=True)
class AppState:
    settings: Settings
    engine: Engine
    writer: Writer
    hub: LiveHub
    # The connected agents of each run: told whether a browser watches it, and sent commands.
    agents: ConnectedAgents
    telemetry: Telemetry
    detectors: Detectors
    # Alert deliveries to webhooks, queued by the detectors.
    webhooks: WebhookSender
    # Profiler captures: asked of the agents, stored, analysed (one analysis at a time each).
    profiles: ProfileCaptures
    # With PostgreSQL, live updates to and from the other servers sharing the database.
    relay: PgRelay | None = None
    fanout: PgFanout | None = None


def app_settings(conn: HTTPConnection) -> Settings:
    """The settings, known from the app's creation (before its lifespan starts)."""
    return conn.app.state.settings


def app_state(conn: HTTPConnection) -> AppState:
    """The parts the lifespan built (set on `app.state.stoker`)."""
    return conn.app.state.stoker
