"""Fan-out of live updates to browsers.

Each browser has a bounded queue. Publishing never waits: when a slow client's queue is
full its oldest message is dropped and the client is told to catch up over REST, so one
slow browser can never slow ingest or the other browsers.
"""

import asyncio
import logging
from dataclasses import dataclass, field
from typing import Any

log = logging.getLogger(__name__)

Message = dict[str, Any]


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

    def connect(self) -> LiveClient:
        client = LiveClient(queue=asyncio.Queue(maxsize=self._queue_size))
        self._clients.add(client)
        return client

    def disconnect(self, client: LiveClient) -> None:
        self._clients.discard(client)

    @property
    def client_count(self) -> int:
        return len(self._clients)

    def publish_run(self, run: Message) -> None:
        message = {"type": "run", "run": run}
        for client in self._clients:
            client.offer(message)

    def publish_steps(self, run_id: int, data: Message) -> None:
        message = {"type": "steps", "run_id": run_id, "data": data}
        for client in self._clients:
            if run_id in client.run_ids:
                client.offer(message)

    def publish_deleted(self, run_id: int) -> None:
        message = {"type": "run_deleted", "run_id": run_id}
        for client in self._clients:
            client.offer(message)

    def broadcast(self, message: Message) -> None:
        """Send to every browser: verdicts, alerts and events are rare and concern everyone."""
        for client in self._clients:
            client.offer(message)
