"""Profiler captures, apart from their routes: ask a run's agents for one, tell the browsers
of each change, and analyse the traces once every worker settled.

Every connected agent (worker) of the run is asked; each reports its status and uploads its
trace to this process, tagged with its rank. A user's request (api/profiles.py) and an alert
rule's action (the detectors, through `for_alerts`) take the same path.
"""

import asyncio
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

from sqlalchemy.engine import Engine
from sqlmodel import Session

from stoker_server.core.models import ProfilePublic
from stoker_server.core.settings import Settings
from stoker_server.ingest import profiles as store
from stoker_server.ingest.profile_analysis import (
    AnalysisFailed,
    AnalysisLimits,
    AnalysisRuns,
    analyse,
)
from stoker_server.ingest.writer import Writer
from stoker_server.live.agents import AgentLink, ConnectedAgents
from stoker_server.live.hub import LiveHub
from stoker_server.live.messages import ProfileMessage

# A capture the agent has not reported on for its max duration and this long (the agent went
# away) no longer blocks a new one.
STALE_GRACE_S = 300.0
# A profile is ready once Stoker's own input share over its steps can be computed: the agent
# sends a step a moment after it ran (every ~1 s), so its steps may arrive after its trace. The
# analysis waits for them while the worker is connected, at most this long.
STEPS_GRACE_S = 30.0
STEPS_POLL_S = 0.1


@dataclass
class ProfileCaptures:
    """The captures of one app (built by service.build.build_state).

    Args:
        agents: Asked for captures; whether a worker is still connected.
        writer: Stores what the agents report.
        hub: Told of each change, here only: the agents upload to this process.
        analyses: The analyses running, one at a time per profile.
    """

    settings: Settings
    engine: Engine
    writer: Writer
    hub: LiveHub
    agents: ConnectedAgents
    analyses: AnalysisRuns = field(default_factory=AnalysisRuns)

    def announce(self, profile: ProfilePublic) -> None:
        message = ProfileMessage(run_id=profile.run_id, profile=profile)
        self.hub.broadcast_here(message.model_dump(mode="json"))

    async def start(
        self, run_id: int, *, steps: int, running: bool, alert_id: int | None = None
    ) -> ProfilePublic:
        """Ask every connected agent of a live run for a capture of `steps` steps: a user's
        request, or an alert rule's action (`alert_id`). 409 when the run is not live or a
        capture of it is in progress."""
        settings = self.settings
        ranks = self.agents.ranks(run_id)
        if not running or not ranks:
            raise store.Conflict("the run has no connected agent: only a live run can be profiled")
        profile = await self.writer.run(
            store.create_profile, run_id=run_id, steps=steps, ranks=ranks,
            stale_after_s=settings.profile_max_s + STALE_GRACE_S, alert_id=alert_id,
        )  # fmt: skip

        def command(agent: AgentLink) -> dict[str, Any]:
            # The rank and run key tell the agent how to tag and where to spool its trace.
            return {
                "name": "profile", "id": profile.id, "steps": steps,
                "max_s": settings.profile_max_s, "rank": agent.rank, "run_key": agent.run_key,
            }  # fmt: skip

        reached = await self.agents.send_all(run_id, command, ranks=set(ranks))
        if missed := sorted(set(ranks) - set(reached)):
            failed = await self.writer.run(
                store.fail,
                pid=profile.id,
                error="profile failed: the agent went away",
                ranks=missed,
            )
            profile = failed or profile
        self.announce(profile)
        # A stale capture given up on just now (or one whose analysis a restart cut) that has
        # traces in: analyse what there is.
        for settled in await self.writer.run(store.awaiting_analysis, run_id=run_id):
            self.start_analysis(settled)
        return profile

    def for_alerts(self) -> Callable[[int, int, int], Awaitable[int]]:
        """An alert rule's action for the detectors: capture a live run's profile for an
        alert; returns the profile's id."""

        async def capture(run_id: int, steps: int, alert_id: int) -> int:
            steps = min(steps, self.settings.profile_max_steps)
            profile = await self.start(run_id, steps=steps, running=True, alert_id=alert_id)
            return profile.id

        return capture

    def start_analysis(self, pid: int) -> None:
        """Analyse the profile's stored traces (again after the one running, if one is)."""
        self.analyses.start(pid, lambda: self._analyse(pid))

    async def _analyse(self, pid: int) -> None:
        """Analyse off the event loop; mark the profile ready (or failed with xprof's error)
        once its analysis and Stoker's own shares over its steps are computed (`_await_steps`).

        The workers' traces are analysed together: xprof merges the hosts of one capture, but
        only its op and iterator tables sum them; its step table keeps the steps aligned across
        hosts, each row the first host's (the lowest rank's). So with several workers each trace
        is also analysed on its own, for each worker's step breakdown and input share."""
        settings = self.settings
        limits = AnalysisLimits(
            timeout_s=settings.profile_analysis_timeout_s,
            max_bytes=settings.profile_analysis_max_bytes,
        )
        try:
            # The quota first: traces over it are not analysed (nor kept).
            over = await self.writer.run(
                store.make_room, pid=pid, data_dir=settings.data_dir,
                quota_bytes=settings.profile_quota_bytes,
            )  # fmt: skip
            if over is not None:
                raise store.Conflict(over)
            paths = await self.writer.run(store.stored_traces, pid=pid, data_dir=settings.data_dir)
            async with self.analyses.one_at_a_time:  # one child process at a time
                merged = await asyncio.to_thread(analyse, list(paths.values()), limits)
                per_worker = dict.fromkeys(paths, merged)
                if len(paths) > 1:
                    for rank, path in paths.items():
                        per_worker[rank] = await asyncio.to_thread(analyse, [path], limits)
            analysis, share, steps = merged
            await self._await_steps(pid, steps, {rank: got[2] for rank, got in per_worker.items()})
            profile = await self.writer.run(
                store.finish, pid=pid, analysis=analysis, profiler_share=share, steps=steps,
                data_dir=settings.data_dir, quota_bytes=settings.profile_quota_bytes,
                per_worker=per_worker,
            )  # fmt: skip
        except Exception as error:
            fallback = await self.writer.run(store.fail, pid=pid, error=_failure(error))
            if fallback is None:
                return
            profile = fallback
        self.announce(profile)

    async def _await_steps(
        self,
        pid: int,
        steps: tuple[int, int] | None,
        worker_steps: dict[int, tuple[int, int] | None],
    ) -> None:
        """Wait until the steps Stoker's shares are taken over are stored, so that the profile
        is ready with everything shown with it: while a worker whose steps are missing is still
        connected (one that left sends no more), for at most `STEPS_GRACE_S`. Reads on a
        session of its own, off the event loop; the writer is not held."""

        def awaited() -> tuple[int, set[int]]:
            with Session(self.engine) as session:
                return store.steps_awaited(
                    session=session, pid=pid, steps=steps, worker_steps=worker_steps
                )

        deadline = time.monotonic() + STEPS_GRACE_S
        while True:
            run_id, missing = await asyncio.to_thread(awaited)
            if not missing & set(self.agents.ranks(run_id)) or time.monotonic() >= deadline:
                return
            await asyncio.sleep(STEPS_POLL_S)


def _failure(error: Exception) -> str:
    """What a profile whose analysis did not come through says."""
    if isinstance(error, store.Conflict):  # not analysed: over the quota
        return f"profile failed: {error.detail}"
    if isinstance(error, AnalysisFailed):  # the child said why
        return f"profile failed: analysis: {error}"
    return f"profile failed: analysis: {type(error).__name__}: {error}"
