"""Fan-out of live updates to browsers.

Each browser has a queue of encoded messages bounded in count and in bytes. Publishing never
waits: when a slow client's queue is full its oldest messages are dropped, and before the next
message it does receive, the client is told how many it missed so it can catch up over REST.
One slow browser can never slow ingest or the other browsers, nor hold more than its byte
budget of the server's memory. A message is encoded once, whatever the number of clients.
Run messages carry no config or environment (each up to the server's limit, read over REST
where shown), so a run's progress costs every browser a few hundred bytes. With PostgreSQL,
what this process publishes is also relayed to the other processes sharing the database
(stoker_server.live.fanout).
"""

import asyncio
import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import orjson

from stoker_server.core.models import AlertPublic, RunEventPublic
from stoker_server.diagnosis.verdict import Diagnosis
from stoker_server.live.messages import (
    AlertMessage,
    Broadcast,
    EventMessage,
    LiveMessage,
    NoticeMessage,
    RunDeletedMessage,
    RunMessage,
    StepsData,
    StepsMessage,
    VerdictMessage,
)

Relay = Callable[..., None]
RunJson = dict[str, Any]  # a RunPublic as JSON


def encode(message: LiveMessage) -> str:
    """JSON text of a live message (pydantic-core's encoder: as fast as orjson on step columns)."""
    return message.model_dump_json()


# What a run message leaves out: read over REST (GET /runs/{id}) where it is shown.
LIVE_RUN_OMITS = ("config", "environment")


def live_run(run: RunJson) -> RunJson:
    """A run as pushed live: without its config and environment."""
    return {key: value for key, value in run.items() if key not in LIVE_RUN_OMITS}


@dataclass(eq=False)
class LiveClient:
    queue: asyncio.Queue[str]
    max_bytes: int = 8 * 2**20
    run_ids: set[int] = field(default_factory=set)
    dropped: int = 0
    unreported_drops: int = 0
    queued_bytes: int = 0

    def offer(self, encoded: str) -> None:
        size = len(encoded)
        while not self.queue.empty() and (
            self.queue.full() or self.queued_bytes + size > self.max_bytes
        ):
            self.queued_bytes -= len(self.queue.get_nowait())
            self.dropped += 1
            self.unreported_drops += 1
        if size > self.max_bytes:  # alone over the budget: never queued
            self.dropped += 1
            self.unreported_drops += 1
            return
        self.queue.put_nowait(encoded)
        self.queued_bytes += size

    async def next_message(self) -> str:
        encoded = await self.queue.get()
        self.queued_bytes -= len(encoded)
        return encoded

    def offer_message(self, message: LiveMessage) -> None:
        self.offer(encode(message))

    def take_notice(self) -> str | None:
        """The drop notice owed to this client, once per stretch of drops."""
        if not self.unreported_drops:
            return None
        missed, self.unreported_drops = self.unreported_drops, 0
        return encode(
            NoticeMessage(
                message=f"{missed} live messages dropped because this client reads too "
                "slowly: re-fetch the series to catch up",
                dropped=missed,
            )
        )


class LiveHub:
    """Registry of connected browsers. Used only from the event loop thread.

    Args:
        queue_size: Messages a browser may fall behind by before its oldest are dropped.
        run_interval_s: A run's progress reaches browsers at most this often.
        on_watch: Called when a run gains its first watching browser (True) or loses its
            last; the change is relayed too (`watch`), so an agent on another server learns it.
        relay: Sends what this process publishes to the other processes sharing its
            database (live.fanout.PgRelay); None when there are none.
        client_max_bytes: What one browser's queue holds at most, in bytes.
        max_clients: Browsers served at once (`full` beyond).
        max_subscriptions: Runs one browser may subscribe to at once.
    """

    def __init__(
        self,
        queue_size: int,
        run_interval_s: float = 1.0,
        *,
        on_watch: Callable[[int, bool], None] | None = None,
        relay: Relay | None = None,
        client_max_bytes: int = 8 * 2**20,
        max_clients: int = 256,
        max_subscriptions: int = 64,
    ) -> None:
        self._queue_size = max(queue_size, 2)
        self._client_max_bytes = client_max_bytes
        self.max_clients = max_clients
        self.max_subscriptions = max_subscriptions
        self._clients: set[LiveClient] = set()
        self._relay = relay
        self._run_interval_s = run_interval_s
        # When each run was last pushed, while that still delays its next push: older entries
        # are swept (`_forget_old_pushes`), so this holds the runs of the last interval only.
        self._last_run_push: dict[int, float] = {}
        self._swept_at = -math.inf
        self._pending_runs: dict[int, Callable[[], RunJson]] = {}
        self._on_watch = on_watch
        self._watched: set[int] = set()

    @property
    def full(self) -> bool:
        """Whether another live client would pass `max_clients`."""
        return len(self._clients) >= self.max_clients

    def connect(self) -> LiveClient:
        client = LiveClient(
            queue=asyncio.Queue(maxsize=self._queue_size), max_bytes=self._client_max_bytes
        )
        self._clients.add(client)
        return client

    def disconnect(self, client: LiveClient) -> None:
        self._clients.discard(client)
        for run_id in client.run_ids:
            self._watch_changed(run_id)

    def subscribe(self, client: LiveClient, run_id: int) -> bool:
        """Subscribe `client` to the run's steps; False (nothing changed) at its
        `max_subscriptions`."""
        if run_id not in client.run_ids and len(client.run_ids) >= self.max_subscriptions:
            return False
        client.run_ids.add(run_id)
        self._watch_changed(run_id)
        return True

    def unsubscribe(self, client: LiveClient, run_id: int) -> None:
        client.run_ids.discard(run_id)
        self._watch_changed(run_id)

    def _watch_changed(self, run_id: int) -> None:
        watched = self.has_subscribers(run_id)
        if watched == (run_id in self._watched):
            return
        if watched:
            self._watched.add(run_id)
        else:
            self._watched.discard(run_id)
        if self._on_watch is not None:
            self._on_watch(run_id, watched)
        if self._relay is not None:
            self._relay("watch", run_id, w=watched)

    def watched_runs(self) -> list[int]:
        """The runs a browser connected here watches, ascending."""
        return sorted(self._watched)

    @property
    def client_count(self) -> int:
        return len(self._clients)

    def has_subscribers(self, run_id: int) -> bool:
        return any(run_id in client.run_ids for client in self._clients)

    def _offer_all(self, message: LiveMessage) -> None:
        if self._clients:
            self._offer_all_encoded(encode(message))

    def _offer_all_encoded(self, encoded: str) -> None:
        for client in self._clients:
            client.offer(encoded)

    def publish_run(self, run: RunJson, *, relay: bool = True) -> None:
        """Push a run now: it started, ended or was edited."""
        self._pending_runs.pop(run["id"], None)  # older than this one: never send it after
        now = asyncio.get_running_loop().time()
        self._forget_old_pushes(now)
        self._last_run_push[run["id"]] = now
        self._offer_all(RunMessage(run=live_run(run)))
        if relay and self._relay is not None:
            self._relay("run", run["id"])

    def publish_run_progress(self, run_id: int, snapshot: Callable[[], RunJson]) -> None:
        """A stored batch changed the run's summary.

        Pushed at most once per `run_interval_s` per run, the latest state winning: every
        browser receives every run's updates, and 32 agents flushing ten times a second would
        otherwise send each of them 320 messages a second. `snapshot` is called only when the
        push happens.
        """
        loop = asyncio.get_running_loop()
        if run_id in self._pending_runs:  # a push is already scheduled: it will send this
            self._pending_runs[run_id] = snapshot
            return
        due = self._last_run_push.get(run_id, -math.inf) + self._run_interval_s
        now = loop.time()
        if now >= due:
            self.publish_run(snapshot())
            return
        self._pending_runs[run_id] = snapshot
        loop.call_later(due - now, self._push_pending_run, run_id)

    def _forget_old_pushes(self, now: float) -> None:
        """Drop the push times that no longer delay anything (older than one interval), at
        most once per interval: what is kept is bounded by the runs pushed in one interval."""
        if now - self._swept_at < self._run_interval_s:
            return
        self._swept_at = now
        cutoff = now - self._run_interval_s
        for run_id in [r for r, at in self._last_run_push.items() if at <= cutoff]:
            del self._last_run_push[run_id]

    @property
    def remembered_pushes(self) -> int:
        """How many runs' push times are held (bounded, see `_forget_old_pushes`)."""
        return len(self._last_run_push)

    def _push_pending_run(self, run_id: int) -> None:
        snapshot = self._pending_runs.pop(run_id, None)
        if snapshot is not None:
            self.publish_run(snapshot())

    def publish_steps(self, run_id: int, data: StepsData, *, rank: int = 0) -> None:
        """Steps to the browsers watching the run (other processes: see `relay_steps`)."""
        watchers = [client for client in self._clients if run_id in client.run_ids]
        if not watchers:
            return
        encoded = encode(StepsMessage(run_id=run_id, data=data, rank=rank or None))
        for client in watchers:
            client.offer(encoded)

    def relay_steps(self, run_id: int, steps: list[int], *, rank: int = 0) -> None:
        """Tell the other processes sharing the database that these steps are committed."""
        if self._relay is not None and steps:
            self._relay("steps", run_id, rank=rank, a=min(steps) - 1, b=max(steps))

    def publish_deleted(self, run_id: int, *, relay: bool = True) -> None:
        self._pending_runs.pop(run_id, None)
        self._last_run_push.pop(run_id, None)
        self._offer_all(RunDeletedMessage(run_id=run_id))
        if relay and self._relay is not None:
            self._relay("deleted", run_id)

    def publish_notice(self, text: str) -> None:
        self._offer_all(NoticeMessage(message=text))

    def broadcast(self, message: Broadcast) -> None:
        """Send to every browser: verdicts, alerts and events are rare and concern everyone."""
        self._offer_all(message)
        if self._relay is not None:
            run_id = getattr(message, "run_id", 0)
            self._relay("message", run_id, m=message.model_dump(mode="json"))

    def publish_verdict(self, diagnosis: Diagnosis) -> None:
        self.broadcast(VerdictMessage(run_id=diagnosis.run_id, diagnosis=diagnosis))

    def publish_event(self, run_id: int, event: RunEventPublic) -> None:
        self.broadcast(EventMessage(run_id=run_id, event=event))

    def publish_alert(self, alert: AlertPublic) -> None:
        self.broadcast(AlertMessage(alert=alert))

    def broadcast_here(self, message: dict[str, Any]) -> None:
        """Send a message (as JSON) to every browser connected to this process only, never
        relayed: a broadcast another process relayed, sent on as it came, or news only this
        process has (a profile's progress: its agents upload here)."""
        if self._clients:
            self._offer_all_encoded(orjson.dumps(message).decode())
