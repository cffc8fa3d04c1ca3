"""Live updates shared by several backend processes on one PostgreSQL (LISTEN/NOTIFY).

Every process publishes what its own agents send to its own browsers (stoker_server.live.hub). With
PostgreSQL, it also sends a small notification on the `stoker_live` channel after each commit:
which run changed, or which step range of which run was stored. The other processes listen on
that channel and, for runs their browsers are watching, read the new rows from the database
(committed before the notification was sent) and publish them to their browsers. Verdicts,
alerts and events are small and rare: their notification carries the message itself. A
notification names its origin, so a process ignores its own.

Watches cross too, so that an agent sends at the live pace whichever server its browsers are
on: a process notifies `watch` when a run gains its first or loses its last browser here, and
re-announces the runs its browsers watch (`watching`) every `watch_refresh_s`. Every process
keeps the other servers' watches (live.agents.ConnectedAgents) and tells its own agents. A
relayed watch expires unless renewed within `watch_expiry_s`, so a server that dies while its
browsers watch leaves no watch behind. A process that (re)starts listening asks the others to
announce theirs at once (`sync`): an agent connecting to it is then told it is watched.
"""

import asyncio
import json
import logging
import uuid
from typing import Any

from sqlalchemy.engine import Engine
from sqlmodel import Session

from stoker_server.core.models import Run
from stoker_server.core.step_chunks import read_steps
from stoker_server.ingest.summary import run_public
from stoker_server.live.agents import ConnectedAgents
from stoker_server.live.hub import LiveHub
from stoker_server.live.messages import StepsData

log = logging.getLogger(__name__)
CHANNEL = "stoker_live"
MAX_NOTIFY_BYTES = 7900  # PostgreSQL caps a NOTIFY payload at 8000 bytes
WATCHING_CHUNK = 500  # run ids per `watching` notification (well under MAX_NOTIFY_BYTES)


def _conninfo(engine: Engine) -> str:
    return engine.url.set(drivername="postgresql").render_as_string(hide_password=False)


class PgRelay:
    """The sending side: this process's live updates as notifications to the others.

    Built before the hub (whose `relay` it is) and needing nothing of it: `relay` only queues,
    the `stoker-pg-notify` task sends.
    """

    def __init__(self, engine: Engine) -> None:
        self.engine = engine
        self.origin = uuid.uuid4().hex[:12]
        self._outbox: asyncio.Queue[str] = asyncio.Queue(maxsize=10_000)
        self.dropped = 0

    def relay(self, kind: str, run_id: int, **extra: Any) -> None:
        """Queue one notification (event loop; never blocks the caller)."""
        payload = json.dumps({"o": self.origin, "k": kind, "r": run_id, **extra})
        if len(payload.encode()) > MAX_NOTIFY_BYTES:
            # PostgreSQL refuses larger notifications; the other servers' browsers get it on
            # their next fetch instead.
            self.dropped += 1
            log.warning("live %s update of run %s too large to relay (%d bytes)", kind, run_id,
                        len(payload))  # fmt: skip
            return
        try:
            self._outbox.put_nowait(payload)
        except asyncio.QueueFull:
            self.dropped += 1

    async def send_forever(self) -> None:
        """The `stoker-pg-notify` lifespan task."""
        import psycopg

        while True:
            try:
                async with await psycopg.AsyncConnection.connect(
                    _conninfo(self.engine), autocommit=True
                ) as connection:
                    while True:
                        payload = await self._outbox.get()
                        await connection.execute("SELECT pg_notify(%s, %s)", (CHANNEL, payload))
            except asyncio.CancelledError:
                raise
            except Exception:
                log.exception("sending live notifications failed; reconnecting")
                await asyncio.sleep(1.0)


class PgFanout:
    """The receiving side: the other processes' notifications, published to the browsers
    here, and their watches, told to the agents here.

    Args:
        relay: This process's sending side: its origin (its own notifications are ignored)
            and how it announces its watches.
        watch_refresh_s, watch_expiry_s: Settings.watch_refresh_s and .watch_expiry_s.
    """

    def __init__(
        self,
        engine: Engine,
        hub: LiveHub,
        agents: ConnectedAgents,
        relay: PgRelay,
        *,
        watch_refresh_s: float,
        watch_expiry_s: float,
    ) -> None:
        self.engine = engine
        self.hub = hub
        self.agents = agents
        self._relay = relay
        self.watch_refresh_s = watch_refresh_s
        self.watch_expiry_s = watch_expiry_s

    # -- receiving ------------------------------------------------------------------------
    async def listen_forever(self, ready: asyncio.Event | None = None) -> None:
        """The `stoker-pg-listen` lifespan task."""
        import psycopg

        while True:
            try:
                async with await psycopg.AsyncConnection.connect(
                    _conninfo(self.engine), autocommit=True
                ) as connection:
                    await connection.execute(f"LISTEN {CHANNEL}")
                    self._relay.relay(
                        "sync", 0
                    )  # what the others watch, missed while not listening
                    if ready is not None:
                        ready.set()
                    async for notify in connection.notifies():
                        await self._handle(notify.payload)
            except asyncio.CancelledError:
                raise
            except Exception:
                log.exception("listening for live notifications failed; reconnecting")
                self.hub.publish_notice("live updates from other servers were interrupted")
                await asyncio.sleep(1.0)

    async def _handle(self, payload: str) -> None:
        try:
            message = json.loads(payload)
            if message["o"] == self._relay.origin:
                return
            kind, run_id = message["k"], int(message["r"])
        except (ValueError, KeyError, TypeError):
            log.warning("ignoring malformed live notification %r", payload[:200])
            return
        if kind in ("watch", "watching", "sync"):
            self._handle_watch(message)
        elif kind == "deleted":
            self.hub.publish_deleted(run_id, relay=False)
        elif kind == "message" and isinstance(message.get("m"), dict):
            self.hub.broadcast_here(message["m"])
        elif kind == "run":
            run = await asyncio.to_thread(self._load_run, run_id)
            if run is not None:
                self.hub.publish_run(run, relay=False)
        elif kind == "steps" and self.hub.has_subscribers(run_id):
            data = await asyncio.to_thread(
                self._load_steps, run_id, int(message["rank"]), int(message["a"]), int(message["b"])
            )
            if data.step:
                self.hub.publish_steps(run_id, data)

    # -- watches ----------------------------------------------------------------------------
    def announce_watched(self) -> None:
        """Tell the other processes which runs this one's browsers watch (renewing them)."""
        runs = self.hub.watched_runs()
        for start in range(0, len(runs), WATCHING_CHUNK):
            self._relay.relay("watching", 0, runs=runs[start : start + WATCHING_CHUNK])

    async def watch_forever(self) -> None:
        """The `stoker-pg-watch` lifespan task: renew this process's watches, expire the
        others' that were not renewed."""
        while True:
            await asyncio.sleep(self.watch_refresh_s)
            self.announce_watched()
            self.agents.expire_remote()

    def _handle_watch(self, message: dict[str, Any]) -> None:
        kind, origin = message["k"], str(message["o"])
        if kind == "sync":
            self.announce_watched()
            return
        try:
            if kind == "watch":
                changes = [(int(message["r"]), bool(message["w"]))]
            else:
                changes = [(int(run_id), True) for run_id in message["runs"]]
        except (ValueError, KeyError, TypeError):
            log.warning("ignoring malformed watch notification %r", message)
            return
        for run_id, watched in changes:
            self.agents.set_remote_watched(origin, run_id, watched, expires_s=self.watch_expiry_s)

    def _load_run(self, run_id: int) -> dict[str, Any] | None:
        with Session(self.engine) as session:
            run = session.get(Run, run_id)
            return None if run is None else run_public(run).model_dump(mode="json")

    def _load_steps(self, run_id: int, rank: int, after: int, last: int) -> StepsData:
        with Session(self.engine) as session:
            steps = read_steps(
                session.connection(), run_id, rank=rank, first_step=after + 1, last_step=last
            )
        return StepsData.model_construct(
            step=steps.step.tolist(),
            t=steps.t.tolist(),
            dur=steps.dur.tolist(),
            wait=steps.wait_or_none(),
        )
