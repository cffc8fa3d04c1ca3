"""Which agents are connected for each run, so the server can send them commands.

`WatchedRuns` tells agents one thing (whether a browser watches); this registry sends any
command (e.g. `profile`, issue 19) to the run's connected agents. Used only from the event loop.
"""

from collections.abc import Awaitable, Callable
from typing import Any

Send = Callable[[dict[str, Any]], Awaitable[None]]


class AgentCommands:
    def __init__(self) -> None:
        self._agents: dict[int, list[Send]] = {}

    def attach(self, run_id: int, send: Send) -> None:
        self._agents.setdefault(run_id, []).append(send)

    def detach(self, run_id: int, send: Send) -> None:
        agents = self._agents.get(run_id)
        if agents is not None and send in agents:
            agents.remove(send)
            if not agents:
                del self._agents[run_id]

    def connected(self, run_id: int) -> bool:
        return bool(self._agents.get(run_id))

    async def send(self, run_id: int, command: dict[str, Any]) -> int:
        """Send `command` to the run's first connected agent (rank order of connection);
        returns how many received it (0 or 1)."""
        for send in list(self._agents.get(run_id, ())):
            try:
                await send({"type": "command", **command})
                return 1
            except Exception:
                continue  # that agent went away: try the next
        return 0
