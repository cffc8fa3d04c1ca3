"""Fan-out of live updates to browsers.

Each browser has a bounded queue of encoded messages. Publishing never waits: when a
slow client's queue is full its oldest message is dropped, and before the next message it
does receive, the client is told how many it missed so it can catch up over REST. One
slow browser can never slow ingest or the other browsers. A message is encoded once,
whatever the number of clients.
"""

import asyncio
import json
from dataclasses import dataclass, field
from typing import Any

Message = dict[str, Any]


@dataclass(eq=False)
class LiveClient:
    queue: asyncio.Queue[str]
    run_ids: set[int] = field(default_factory=set)
    dropped: int = 0
    unreported_drops: int = 0

    def offer(self, encoded: str) -> None:
        if self.queue.full():
            self.queue.get_nowait()
            self.dropped += 1
            self.unreported_drops += 1
        self.queue.put_nowait(encoded)

    def offer_message(self, message: Message) -> None:
        self.offer(json.dumps(message))

    def take_notice(self) -> str | None:
        """The drop notice owed to this client, once per stretch of drops."""
        if not self.unreported_drops:
            return None
        missed, self.unreported_drops = self.unreported_drops, 0
        return json.dumps(
            {
                "type": "notice",
                "message": f"{missed} live messages dropped because this client reads too "
                "slowly: re-fetch the series to catch up",
                "dropped": missed,
            }
        )


class LiveHub:
    """Registry of connected browsers. Used only from the event loop thread."""

    def __init__(self, queue_size: int) -> None:
        self._queue_size = max(queue_size, 2)
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
        if not self._clients:
            return
        encoded = json.dumps({"type": "run", "run": run})
        for client in self._clients:
            client.offer(encoded)

    def publish_steps(self, run_id: int, data: Message) -> None:
        watchers = [client for client in self._clients if run_id in client.run_ids]
        if not watchers:
            return
        encoded = json.dumps({"type": "steps", "run_id": run_id, "data": data})
        for client in watchers:
            client.offer(encoded)
