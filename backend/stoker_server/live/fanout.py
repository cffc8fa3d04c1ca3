"""Live updates shared by several backend processes on one PostgreSQL (LISTEN/NOTIFY).

Every process publishes what its own agents send to its own browsers (stoker_server.live.hub). With
PostgreSQL, it also sends a small notification on the `stoker_live` channel after each commit:
which run changed, or which step range of which run was stored. The other processes listen on
that channel and, for runs their browsers are watching, read the new rows from the database
(committed before the notification was sent) and publish them to their browsers. Verdicts,
alerts and events are small and rare: their notification carries the message itself. A
notification names its origin, so a process ignores its own.
"""

import asyncio
import json
import logging
import uuid
from typing import Any

from sqlalchemy.engine import Engine
from sqlmodel import Session, col, select

from stoker_server.core.models import Run, Step
from stoker_server.ingest.summary import run_public
from stoker_server.live.hub import LiveHub
from stoker_server.live.messages import StepsData

log = logging.getLogger(__name__)
CHANNEL = "stoker_live"
MAX_NOTIFY_BYTES = 7900  # PostgreSQL caps a NOTIFY payload at 8000 bytes


def _conninfo(engine: Engine) -> str:
    return engine.url.set(drivername="postgresql").render_as_string(hide_password=False)


class PgFanout:
    """Relay of a process's live updates to the other processes sharing its PostgreSQL."""

    def __init__(self, engine: Engine, hub: LiveHub) -> None:
        self.engine = engine
        self.hub = hub
        self.origin = uuid.uuid4().hex[:12]
        self._outbox: asyncio.Queue[str] = asyncio.Queue(maxsize=10_000)
        self.dropped = 0

    # -- sending (event loop; never blocks the caller) -------------------------------------
    def relay(self, kind: str, run_id: int, **extra: Any) -> None:
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
            if message["o"] == self.origin:
                return
            kind, run_id = message["k"], int(message["r"])
        except (ValueError, KeyError, TypeError):
            log.warning("ignoring malformed live notification %r", payload[:200])
            return
        if kind == "deleted":
            self.hub.publish_deleted(run_id, relay=False)
        elif kind == "message" and isinstance(message.get("m"), dict):
            self.hub.broadcast_relayed(message["m"])
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

    def _load_run(self, run_id: int) -> dict[str, Any] | None:
        with Session(self.engine) as session:
            run = session.get(Run, run_id)
            return None if run is None else run_public(run).model_dump(mode="json")

    def _load_steps(self, run_id: int, rank: int, after: int, last: int) -> StepsData:
        with Session(self.engine) as session:
            rows = session.exec(
                select(Step.step, Step.t, Step.dur, Step.wait)
                .where(Step.run_id == run_id, Step.rank == rank)
                .where(Step.step > after, Step.step <= last)
                .order_by(col(Step.step))
            ).all()
        return StepsData.model_construct(
            step=[r[0] for r in rows],
            t=[r[1] for r in rows],
            dur=[r[2] for r in rows],
            wait=[r[3] for r in rows],
        )
