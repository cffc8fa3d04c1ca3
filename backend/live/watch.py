"""Which runs a browser is watching, told to those runs' agents so they send live.

An agent sends what it recorded every second while nobody watches its run, and every 50 ms
while someone does: the server tells it with `{"type": "command", "name": "watch",
"watched": true|false}` when the first browser subscribes to the run and when the last one
leaves. So a watched run's steps reach the browser within ~100 ms, and an unwatched run
costs the server no more than before. (Only browsers and agents connected to this process
count; with several server processes a browser on another one sees the 1 s pace.)
"""

import asyncio
import contextlib
from collections.abc import Awaitable, Callable

Tell = Callable[[bool], Awaitable[None]]


class WatchedRuns:
    """The agents of each run and whether a browser watches it. Used only from the event loop."""

    def __init__(self) -> None:
        self._agents: dict[int, set[Tell]] = {}
        self._watched: set[int] = set()
        self._telling: set[asyncio.Task[None]] = set()

    def attach(self, run_id: int, tell: Tell) -> None:
        """An agent of `run_id` connected; `tell(watched)` sends it the watch command."""
        self._agents.setdefault(run_id, set()).add(tell)
        if run_id in self._watched:
            self._send(tell, True)

    def detach(self, run_id: int, tell: Tell) -> None:
        agents = self._agents.get(run_id)
        if agents is not None:
            agents.discard(tell)
            if not agents:
                del self._agents[run_id]

    def set_watched(self, run_id: int, watched: bool) -> None:
        """The first browser subscribed to the run (True) or the last one left (False)."""
        if (run_id in self._watched) == watched:
            return
        if watched:
            self._watched.add(run_id)
        else:
            self._watched.discard(run_id)
        for tell in self._agents.get(run_id, ()):
            self._send(tell, watched)

    def is_watched(self, run_id: int) -> bool:
        return run_id in self._watched

    def _send(self, tell: Tell, watched: bool) -> None:
        task = asyncio.get_running_loop().create_task(_quietly(tell(watched)))
        self._telling.add(task)
        task.add_done_callback(self._telling.discard)


async def _quietly(sending: Awaitable[None]) -> None:
    with contextlib.suppress(Exception):  # the agent went away: nothing to tell
        await sending
