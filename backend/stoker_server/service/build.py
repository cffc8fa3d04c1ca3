"""The server assembled once: `build_state` passes every part what it needs when it is built,
and `start_loops` starts the long-running loops, all in one place."""

import asyncio
import contextlib
import logging

from sqlalchemy.engine import Engine

from stoker_server.api.profile_captures import ProfileCaptures
from stoker_server.api.publish import publish_run_ended
from stoker_server.api.state import AppState
from stoker_server.api.telemetry import Telemetry
from stoker_server.core.models import Run
from stoker_server.core.settings import Settings
from stoker_server.diagnosis.detectors import Detectors
from stoker_server.diagnosis.effects import DiagnosisEffects, delivery_recorder
from stoker_server.diagnosis.webhooks import WebhookSender
from stoker_server.ingest.retention import DiskUsage, retention_loop
from stoker_server.ingest.writer import Writer
from stoker_server.live.agents import ConnectedAgents
from stoker_server.live.fanout import PgFanout, PgRelay
from stoker_server.live.hub import LiveHub
from stoker_server.service.lifecycle import reaper_loop

log = logging.getLogger(__name__)
# How long the server waits, at start, to be listening to the other servers' live updates.
LISTEN_READY_S = 10.0


def build_state(settings: Settings, engine: Engine) -> AppState:
    """Every long-lived part of one app, each given its dependencies as it is built.

    `engine` is the database, opened and migrated. Nothing is started: `start_loops` does.
    """
    writer = Writer(engine)
    disk = DiskUsage()
    agents = ConnectedAgents()
    # With PostgreSQL, what this process publishes reaches the others sharing the database.
    relay = PgRelay(engine) if engine.dialect.name == "postgresql" else None
    hub = LiveHub(
        settings.live_queue_size,
        settings.live_run_interval_s,
        on_watch=agents.set_watched,
        relay=relay.relay if relay is not None else None,
        client_max_bytes=settings.live_client_max_bytes,
        max_clients=settings.live_max_clients,
        max_subscriptions=settings.live_max_subscriptions,
    )
    fanout = None
    if relay is not None:
        fanout = PgFanout(
            engine,
            hub,
            agents,
            relay,
            watch_refresh_s=settings.watch_refresh_s,
            watch_expiry_s=settings.watch_expiry_s,
        )
    profiles = ProfileCaptures(
        settings=settings, engine=engine, writer=writer, hub=hub, agents=agents
    )
    webhooks = WebhookSender(
        record=delivery_recorder(writer, hub),
        timeout_s=settings.webhook_timeout_s,
        attempts=settings.webhook_attempts,
        backoff_s=settings.webhook_backoff_s,
        queue_size=settings.webhook_queue_size,
        deadline_s=settings.webhook_deadline_s,
        max_response_bytes=settings.webhook_max_response_bytes,
        allowed_hosts=settings.webhook_allowed_hosts,
    )
    # Diagnosis and alerts (verdicts, stalls, alert rules); an alert rule's action "capture N
    # steps of profile" takes the user's path.
    effects = DiagnosisEffects(
        writer=writer,
        publisher=hub,
        submit_delivery=webhooks.submit,
        capture_profile=profiles.for_alerts(),
    )
    detectors = Detectors(
        settings=settings, writer=writer, effects=effects, connected=agents.run_ids, disk=disk
    )
    return AppState(
        settings=settings,
        engine=engine,
        writer=writer,
        hub=hub,
        agents=agents,
        telemetry=Telemetry(agents=agents, hub=hub, writer=writer, disk=disk),
        detectors=detectors,
        webhooks=webhooks,
        profiles=profiles,
        relay=relay,
        fanout=fanout,
    )


async def start_loops(state: AppState) -> list[asyncio.Task[None]]:
    """Seed the default alert rules, then start the named long-running loops; the app's
    lifespan cancels them at shutdown. With PostgreSQL, returns once listening to the other
    servers, so that no update they commit after the start is missed."""
    settings = state.settings
    await state.detectors.start()

    def interrupted(run: Run) -> None:
        publish_run_ended(state, run)

    tasks: list[asyncio.Task[None]] = []
    if state.relay is not None and state.fanout is not None:
        listening = asyncio.Event()
        tasks += [
            asyncio.create_task(state.fanout.listen_forever(listening), name="stoker-pg-listen"),
            asyncio.create_task(state.relay.send_forever(), name="stoker-pg-notify"),
            asyncio.create_task(state.fanout.watch_forever(), name="stoker-pg-watch"),
        ]
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(listening.wait(), timeout=LISTEN_READY_S)
    tasks += [
        asyncio.create_task(
            reaper_loop(
                writer=state.writer,
                connected=state.agents.run_ids,
                timeout_s=settings.heartbeat_timeout_s,
                on_interrupted=interrupted,
            ),
            name="stoker-run-reaper",
        ),
        asyncio.create_task(state.detectors.run_forever(), name="stoker-detectors"),
        asyncio.create_task(
            retention_loop(
                writer=state.writer,
                engine=state.engine,
                settings=settings,
                usage=state.telemetry.disk,
            ),
            name="stoker-retention",
        ),
        asyncio.create_task(state.webhooks.run_forever(), name="stoker-webhooks"),
    ]
    return tasks


async def stop_loops(tasks: list[asyncio.Task[None]]) -> None:
    for task in tasks:
        task.cancel()
    for task in tasks:
        with contextlib.suppress(asyncio.CancelledError, Exception):
            await task
