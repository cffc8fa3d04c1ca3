"""The agents connected to each run, in one registry: what the server tells them goes here.

Every agent connection of a run (one per worker of a distributed job) is attached with its
rank and a way to send it a command. Two things use it, from the event loop only:

- whether a browser watches the run. An agent sends what it recorded every second while
  nobody watches its run, and every 50 ms while someone does: the server tells it with
  `{"type": "command", "name": "watch", "watched": true|false}` when the first browser
  subscribes to the run and when the last one leaves, and tells an agent that connects to
  a watched run at once. (Only browsers and agents connected to this process count; with
  several server processes a browser on another one sees the 1 s pace.)
- commands for every worker of the run, e.g. `profile` (issue 19): `send_all` reaches each
  connected agent and says which ranks received it.
"""

import asyncio
import contextlib
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from backend.ingest.protocol import WatchCommand

Send = Callable[[dict[str, Any]], Awaitable[None]]


@dataclass(eq=False)
class AgentLink:
    """One connected agent: its rank (from its hello) and how to send it a message."""

    rank: int
    send: Send
    run_key: str = ""


class ConnectedAgents:
    """The connected agents of each run, and which runs a browser watches."""

    def __init__(self) -> None:
        self._agents: dict[int, list[AgentLink]] = {}
        self._watched: set[int] = set()
        self._telling: set[asyncio.Task[None]] = set()

    # --- connections ------------------------------------------------------------------------
    def attach(self, run_id: int, agent: AgentLink) -> None:
        """An agent of `run_id` connected; it is told at once when the run is watched."""
        self._agents.setdefault(run_id, []).append(agent)
        if run_id in self._watched:
            self._tell(agent, True)

    def detach(self, run_id: int, agent: AgentLink) -> None:
        agents = self._agents.get(run_id)
        if agents is not None and agent in agents:
            agents.remove(agent)
            if not agents:
                del self._agents[run_id]

    def connected(self, run_id: int) -> bool:
        return bool(self._agents.get(run_id))

    def ranks(self, run_id: int) -> list[int]:
        """The ranks of the run's connected agents, ascending, each once."""
        return sorted({agent.rank for agent in self._agents.get(run_id, ())})

    async def send_all(
        self,
        run_id: int,
        command: Callable[[AgentLink], dict[str, Any]],
        ranks: set[int] | None = None,
    ) -> list[int]:
        """Send each connected agent of the run (of `ranks`, when given) `command(agent)` (a
        command may name the agent's rank); returns the ranks that received it, ascending."""
        reached: set[int] = set()
        for agent in list(self._agents.get(run_id, ())):
            if ranks is not None and agent.rank not in ranks:
                continue
            try:
                await agent.send({"type": "command", **command(agent)})
            except Exception:
                continue  # that agent went away
            reached.add(agent.rank)
        return sorted(reached)

    # --- watching ---------------------------------------------------------------------------
    def set_watched(self, run_id: int, watched: bool) -> None:
        """The first browser subscribed to the run (True) or the last one left (False)."""
        if (run_id in self._watched) == watched:
            return
        if watched:
            self._watched.add(run_id)
        else:
            self._watched.discard(run_id)
        for agent in self._agents.get(run_id, ()):
            self._tell(agent, watched)

    def is_watched(self, run_id: int) -> bool:
        return run_id in self._watched

    def _tell(self, agent: AgentLink, watched: bool) -> None:
        message = WatchCommand(watched=watched).to_json()
        task = asyncio.get_running_loop().create_task(_quietly(agent.send(message)))
        self._telling.add(task)
        task.add_done_callback(self._telling.discard)


async def _quietly(sending: Awaitable[None]) -> None:
    with contextlib.suppress(Exception):  # the agent went away: nothing to tell
        await sending
