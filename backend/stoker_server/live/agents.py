"""The agents connected to each run, in one registry: what the server tells them goes here.

Every agent connection of a run (one per worker of a distributed job) is attached with its
rank and a way to send it a command, from its welcome until its last frame is answered. The
registry also says which runs have an agent connected to this process (the reaper keeps those
alive, a run that ends without one died) and how many are. Two things use the links, from the
event loop only:

- whether a browser watches the run. An agent sends what it recorded every second while
  nobody watches its run, and every 50 ms while someone does: the server tells it with
  `{"type": "command", "name": "watch", "watched": true|false}` when the first browser
  subscribes to the run and when the last one leaves, and tells an agent that connects to
  a watched run at once. With several server processes on one PostgreSQL, browsers on the
  other servers count too: each server relays its own watches (stoker_server.live.fanout),
  and a run is watched while a browser here or a relayed watch, not yet expired, says so.
- commands for every worker of the run, e.g. `profile`: `send_all` reaches each
  connected agent and says which ranks received it.

Every send is bounded (`send_timeout_s`): an agent whose socket does not take a message in
time (stalled, or gone without a close) counts as not reached, and holds up neither the
request that sends the command nor the other agents, which are sent theirs concurrently.
"""

import asyncio
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from stoker_server.ingest.protocol import WatchCommand

Send = Callable[[dict[str, Any]], Awaitable[None]]
SEND_TIMEOUT_S = 5.0  # how long an agent's socket may take to accept one message


@dataclass(eq=False)
class AgentLink:
    """One connected agent: its rank (from its hello) and how to send it a message."""

    rank: int
    send: Send
    run_key: str = ""


class ConnectedAgents:
    """The connected agents of each run, and which runs a browser watches."""

    def __init__(self, send_timeout_s: float = SEND_TIMEOUT_S) -> None:
        self.send_timeout_s = send_timeout_s
        self._agents: dict[int, list[AgentLink]] = {}
        self._watched: set[int] = set()  # by a browser connected here
        # Watched from other servers: run -> server (its relay origin) -> when that expires
        # (time.monotonic()), unless that server says so again.
        self._remote: dict[int, dict[str, float]] = {}
        self._telling: set[asyncio.Task[bool]] = set()

    # --- connections ------------------------------------------------------------------------
    def attach(self, run_id: int, agent: AgentLink) -> None:
        """An agent of `run_id` connected; it is told at once when the run is watched."""
        self._agents.setdefault(run_id, []).append(agent)
        if self.is_watched(run_id):
            self._tell(agent, True)

    def detach(self, run_id: int, agent: AgentLink) -> None:
        agents = self._agents.get(run_id)
        if agents is not None and agent in agents:
            agents.remove(agent)
            if not agents:
                del self._agents[run_id]

    def run_ids(self) -> set[int]:
        """The runs with at least one agent connected here."""
        return set(self._agents)

    @property
    def total(self) -> int:
        """Agent connections open here."""
        return sum(len(agents) for agents in self._agents.values())

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
        command may name the agent's rank), all at once, each within `send_timeout_s`;
        returns the ranks that received it, ascending."""
        agents = [
            agent for agent in self._agents.get(run_id, ()) if ranks is None or agent.rank in ranks
        ]
        sent = await asyncio.gather(
            *(self._send(agent, {"type": "command", **command(agent)}) for agent in agents)
        )
        return sorted({agent.rank for agent, ok in zip(agents, sent, strict=True) if ok})

    async def _send(self, agent: AgentLink, message: dict[str, Any]) -> bool:
        """Whether the agent took the message within `send_timeout_s`."""
        try:
            await asyncio.wait_for(agent.send(message), self.send_timeout_s)
        except Exception:  # that agent went away, or its socket stalls
            return False
        return True

    # --- watching ---------------------------------------------------------------------------
    def set_watched(self, run_id: int, watched: bool) -> None:
        """The first browser here subscribed to the run (True) or the last one left (False)."""
        was = self.is_watched(run_id)
        if watched:
            self._watched.add(run_id)
        else:
            self._watched.discard(run_id)
        self._changed(run_id, was)

    def set_remote_watched(
        self, origin: str, run_id: int, watched: bool, *, expires_s: float = 0.0
    ) -> None:
        """Server `origin` watches the run for the next `expires_s` seconds (True), or no
        longer (False)."""
        was = self.is_watched(run_id)
        servers = self._remote.setdefault(run_id, {})
        if watched:
            servers[origin] = time.monotonic() + expires_s
        else:
            servers.pop(origin, None)
        if not servers:
            del self._remote[run_id]
        self._changed(run_id, was)

    def expire_remote(self) -> None:
        """Drop the other servers' watches they did not renew in time (a server that died)."""
        now = time.monotonic()
        for run_id, servers in list(self._remote.items()):
            for origin, until in list(servers.items()):
                if until <= now:
                    self.set_remote_watched(origin, run_id, False)

    def is_watched(self, run_id: int) -> bool:
        return run_id in self._watched or run_id in self._remote

    def _changed(self, run_id: int, was: bool) -> None:
        watched = self.is_watched(run_id)
        if watched != was:
            for agent in self._agents.get(run_id, ()):
                self._tell(agent, watched)

    def _tell(self, agent: AgentLink, watched: bool) -> None:
        message = WatchCommand(watched=watched).to_json()
        task = asyncio.get_running_loop().create_task(self._send(agent, message))
        self._telling.add(task)
        task.add_done_callback(self._telling.discard)
