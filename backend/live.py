"""Fan-out of live updates to browsers.

Each browser has a bounded queue. Publishing never waits: when a slow client's queue is
full its oldest message is dropped and the client is told to catch up over REST, so one
slow browser can never slow ingest or the other browsers. With PostgreSQL, what this process
publishes is also relayed to the other processes sharing the database (backend.fanout).
"""

import asyncio
import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

log = logging.getLogger(__name__)

Message = dict[str, Any]
Relay = Callable[..., None]


@dataclass(eq=False)
class LiveClient:
    queue: asyncio.Queue[Message]
    run_ids: set[int] = field(default_factory=set)
    dropped: int = 0

    def offer(self, message: Message) -> None:
        if self.queue.full():
            self.queue.get_nowait()
            self.dropped += 1
            if self.dropped == 1 or self.dropped % 1000 == 0:
                notice = {
                    "type": "notice",
                    "message": f"{self.dropped} live messages dropped: client too slow, "
                    "re-fetch the series to catch up",
                    "dropped": self.dropped,
                }
                self.queue.get_nowait()
                self.queue.put_nowait(notice)
        self.queue.put_nowait(message)


class LiveHub:
    """Registry of connected browsers. Used only from the event loop thread."""

    def __init__(self, queue_size: int) -> None:
        self._queue_size = max(queue_size, 4)
        self._clients: set[LiveClient] = set()
        self.relay: Relay | None = None  # set when other processes share the database

    def connect(self) -> LiveClient:
        client = LiveClient(queue=asyncio.Queue(maxsize=self._queue_size))
        self._clients.add(client)
        return client

    def disconnect(self, client: LiveClient) -> None:
        self._clients.discard(client)

    @property
    def client_count(self) -> int:
        return len(self._clients)

    def has_subscribers(self, run_id: int) -> bool:
        return any(run_id in client.run_ids for client in self._clients)

    def publish_run(self, run: Message, *, relay: bool = True) -> None:
        message = {"type": "run", "run": run}
        for client in self._clients:
            client.offer(message)
        if relay and self.relay is not None:
            self.relay("run", run["id"])

    def publish_steps(
        self, run_id: int, data: Message, *, rank: int = 0, relay: bool = True
    ) -> None:
        message = {"type": "steps", "run_id": run_id, "data": data}
        if rank:
            message["rank"] = rank
        for client in self._clients:
            if run_id in client.run_ids:
                client.offer(message)
        if relay and self.relay is not None and data["step"]:
            self.relay("steps", run_id, rank=rank, a=min(data["step"]) - 1, b=max(data["step"]))

    def publish_deleted(self, run_id: int, *, relay: bool = True) -> None:
        message = {"type": "run_deleted", "run_id": run_id}
        for client in self._clients:
            client.offer(message)
        if relay and self.relay is not None:
            self.relay("deleted", run_id)

    def publish_notice(self, text: str) -> None:
        for client in self._clients:
            client.offer({"type": "notice", "message": text})

    def broadcast(self, message: Message) -> None:
        """Send to every browser: verdicts, alerts and events are rare and concern everyone."""
        for client in self._clients:
            client.offer(message)
