"""Profiler captures from the browser: ask a run's agents for one, follow it, read
its analysis, download its traces. Every connected agent (worker) of the run is asked; each
reports its status and uploads its trace here too, tagged with its rank."""

import asyncio
import time
from collections.abc import Awaitable, Callable
from typing import Annotated, Any, Literal

from fastapi import APIRouter, Path, Query, Request
from fastapi.responses import FileResponse
from pydantic import BaseModel, Field
from sqlmodel import Session

from stoker_server.core.auth import AdminAuth, AgentAuth, ViewerAuth
from stoker_server.core.errors import BadRequest
from stoker_server.core.models import (
    MAX_INT64,
    ProfilePublic,
    ProfilesPublic,
    ProfileStatus,
    RunStatus,
)
from stoker_server.ingest import profiles as store
from stoker_server.ingest.profile_analysis import AnalysisFailed, AnalysisLimits, analyse
from stoker_server.live.agents import AgentLink
from stoker_server.live.messages import ProfileMessage
from stoker_server.service.deps import RunDep, RunId, SessionDep, StateDep
from stoker_server.service.state import AppState

ProfileId = Annotated[int, Path(ge=1, le=2**31 - 1)]
Rank = Annotated[int, Query(ge=0, le=100_000, description="the worker's rank (its hello's)")]
# A capture the agent has not reported on for its max duration and this long (the agent went
# away) no longer blocks a new one.
STALE_GRACE_S = 300.0
# A profile is ready once Stoker's own input share over its steps can be computed: the agent
# sends a step a moment after it ran (every ~1 s), so its steps may arrive after its trace. The
# analysis waits for them while the worker is connected, at most this long.
STEPS_GRACE_S = 30.0
STEPS_POLL_S = 0.1
router = APIRouter(prefix="/api/v1/runs/{run_id}/profiles", tags=["profiles"])


class ProfileRequest(BaseModel):
    steps: int = Field(default=20, ge=1)


class StatusReport(BaseModel):
    status: Literal["capturing", "uploading", "failed"]
    error: str | None = Field(default=None, max_length=2000)
    first_step: int | None = Field(default=None, ge=0, le=MAX_INT64)
    last_step: int | None = Field(default=None, ge=0, le=MAX_INT64)
    overhead: dict[str, float | int | None] | None = None
    bytes: int | None = Field(default=None, ge=0, le=MAX_INT64)


def _announce(state: AppState, profile: ProfilePublic) -> None:
    message = ProfileMessage(run_id=profile.run_id, profile=profile)
    state.hub.broadcast_relayed(message.model_dump(mode="json"))


@router.post("", status_code=202, dependencies=[AdminAuth])
async def request_profile(
    run_id: RunId, run: RunDep, body: ProfileRequest, state: StateDep
) -> ProfilePublic:
    settings = state.settings
    if body.steps > settings.profile_max_steps:
        raise BadRequest(f"steps: at most {settings.profile_max_steps} (the server's limit)")
    running = run.status == RunStatus.running
    return await start_capture(state, run_id, steps=body.steps, running=running)


async def start_capture(
    state: AppState, run_id: int, *, steps: int, running: bool, alert_id: int | None = None
) -> ProfilePublic:
    """Ask every connected agent of a live run for a capture of `steps` steps: a user's request,
    or an alert rule's action (`alert_id`). 409 when the run is not live or a capture
    of it is in progress."""
    settings = state.settings
    ranks = state.agents.ranks(run_id)
    if not running or not ranks:
        raise store.Conflict("the run has no connected agent: only a live run can be profiled")
    profile = await state.writer.run(
        store.create_profile, run_id=run_id, steps=steps, ranks=ranks,
        stale_after_s=settings.profile_max_s + STALE_GRACE_S, alert_id=alert_id,
    )  # fmt: skip

    def command(agent: AgentLink) -> dict[str, Any]:
        # The rank and run key tell the agent how to tag and where to spool its trace.
        return {
            "name": "profile", "id": profile.id, "steps": steps,
            "max_s": settings.profile_max_s, "rank": agent.rank, "run_key": agent.run_key,
        }  # fmt: skip

    reached = await state.agents.send_all(run_id, command, ranks=set(ranks))
    if missed := sorted(set(ranks) - set(reached)):
        failed = await state.writer.run(
            store.fail, pid=profile.id, error="profile failed: the agent went away", ranks=missed
        )
        profile = failed or profile
    _announce(state, profile)
    # A stale capture given up on just now (or one whose analysis a restart cut) that has
    # traces in: analyse what there is.
    for settled in await state.writer.run(store.awaiting_analysis, run_id=run_id):
        _start_analysis(state, settled)
    return profile


def alert_capture(state: AppState) -> Callable[[int, int, int], Awaitable[int]]:
    """An alert rule's action for the detectors: capture a live run's profile for an alert."""

    async def capture(run_id: int, steps: int, alert_id: int) -> int:
        steps = min(steps, state.settings.profile_max_steps)
        profile = await start_capture(state, run_id, steps=steps, running=True, alert_id=alert_id)
        return profile.id

    return capture


@router.get("", dependencies=[ViewerAuth])
def read_profiles(run_id: RunId, session: SessionDep) -> ProfilesPublic:
    return store.list_profiles(session=session, run_id=run_id)


@router.get("/{pid}", dependencies=[ViewerAuth])
def read_profile(run_id: RunId, pid: ProfileId, session: SessionDep) -> ProfilePublic:
    return store.public(store.get_profile(session=session, run_id=run_id, pid=pid), session)


@router.get("/{pid}/trace", dependencies=[ViewerAuth], response_class=FileResponse)
def download_trace(
    run_id: RunId,
    pid: ProfileId,
    session: SessionDep,
    state: StateDep,
    rank: Annotated[int | None, Query(ge=0, le=100_000)] = None,
) -> Any:
    """Worker `rank`'s trace; without `rank`, the lowest rank's that is stored."""
    profile = store.get_profile(session=session, run_id=run_id, pid=pid)
    stored = store.trace_paths(state.settings.data_dir, profile)
    path = stored.get(rank) if rank is not None else next(iter(stored.values()), None)
    if profile.trace_evicted or path is None:
        raise store.ProfileNotFound(f"profile {pid} has no stored trace ({profile.status})")
    suffix = "" if rank is None else f"-rank{rank}"
    name = f"run{run_id}-profile{pid}{suffix}.xplane.pb"
    return FileResponse(path, media_type="application/octet-stream", filename=name)


@router.post("/{pid}/status", dependencies=[AgentAuth])
async def report_status(
    run_id: RunId, pid: ProfileId, report: StatusReport, state: StateDep, rank: Rank = 0
) -> ProfilePublic:
    profile, complete = await state.writer.run(
        store.update_status, run_id=run_id, pid=pid, rank=rank, report=report.model_dump()
    )
    _announce(state, profile)
    if complete:  # the last worker to settle failed, the others' traces are in
        _start_analysis(state, pid)
    return profile


@router.post("/{pid}/trace", dependencies=[AgentAuth])
async def upload_trace(
    run_id: RunId,
    pid: ProfileId,
    request: Request,
    state: StateDep,
    offset: Annotated[int, Query(ge=0, le=MAX_INT64)],
    total: Annotated[int, Query(ge=1, le=MAX_INT64)],
    rank: Rank = 0,
) -> dict[str, Any]:
    settings = state.settings
    data = await request.body()
    try:
        complete, settled = await state.writer.run(
            store.store_chunk, data_dir=settings.data_dir, run_id=run_id, pid=pid, rank=rank,
            offset=offset, total=total, data=data, max_bytes=settings.profile_max_trace_bytes,
        )  # fmt: skip
    except store.Conflict as error:
        if total > settings.profile_max_trace_bytes:
            failed = await state.writer.run(store.fail, pid=pid, error=error.detail, ranks=[rank])
            if failed is not None:
                _announce(state, failed)
                if _all_settled(failed):  # the other workers' traces are in
                    _start_analysis(state, pid)
        raise
    if settled:
        _start_analysis(state, pid)
    return {"received": offset + len(data), "complete": complete}


def _all_settled(profile: ProfilePublic) -> bool:
    statuses = {worker.status for worker in profile.workers}
    settled = {ProfileStatus.ready, ProfileStatus.failed}
    return statuses <= settled and ProfileStatus.ready in statuses


def _start_analysis(state: AppState, pid: int) -> None:
    """Analyse the profile's stored traces (again after the one running, if one is)."""
    state.analyses.start(pid, lambda: _analyse(state, pid))


async def _analyse(state: AppState, pid: int) -> None:
    """Analyse off the event loop; mark the profile ready (or failed with xprof's error) once
    its analysis and Stoker's own shares over its steps are computed (`_await_steps`).

    The workers' traces are analysed together: xprof merges the hosts of one capture, but only
    its op and iterator tables sum them; its step table keeps the steps aligned across hosts,
    each row the first host's (the lowest rank's). So with several workers each trace is also
    analysed on its own, for each worker's step breakdown and input share."""
    settings = state.settings
    limits = AnalysisLimits(
        timeout_s=settings.profile_analysis_timeout_s,
        max_bytes=settings.profile_analysis_max_bytes,
    )
    try:
        # The quota first: traces over it are not analysed (nor kept).
        over = await state.writer.run(
            store.make_room, pid=pid, data_dir=settings.data_dir,
            quota_bytes=settings.profile_quota_bytes,
        )  # fmt: skip
        if over is not None:
            raise store.Conflict(over)
        paths = await state.writer.run(store.stored_traces, pid=pid, data_dir=settings.data_dir)
        async with state.analyses.one_at_a_time:
            merged = await asyncio.to_thread(analyse, list(paths.values()), limits)
            per_worker = dict.fromkeys(paths, merged)
            if len(paths) > 1:
                for rank, path in paths.items():
                    per_worker[rank] = await asyncio.to_thread(analyse, [path], limits)
        analysis, share, steps = merged
        await _await_steps(state, pid, steps, {rank: got[2] for rank, got in per_worker.items()})
        profile = await state.writer.run(
            store.finish, pid=pid, analysis=analysis, profiler_share=share, steps=steps,
            data_dir=settings.data_dir, quota_bytes=settings.profile_quota_bytes,
            per_worker=per_worker,
        )  # fmt: skip
    except Exception as error:
        fallback = await state.writer.run(store.fail, pid=pid, error=_failure(error))
        if fallback is None:
            return
        profile = fallback
    _announce(state, profile)


def _failure(error: Exception) -> str:
    """What a profile whose analysis did not come through says."""
    if isinstance(error, store.Conflict):  # not analysed: over the quota
        return f"profile failed: {error.detail}"
    if isinstance(error, AnalysisFailed):  # the child said why
        return f"profile failed: analysis: {error}"
    return f"profile failed: analysis: {type(error).__name__}: {error}"


async def _await_steps(
    state: AppState,
    pid: int,
    steps: tuple[int, int] | None,
    worker_steps: dict[int, tuple[int, int] | None],
) -> None:
    """Wait until the steps Stoker's shares are taken over are stored, so that the profile
    is ready with everything shown with it: while a worker whose steps are missing is still
    connected (one that left sends no more), for at most `STEPS_GRACE_S`. Reads on a session
    of its own, off the event loop; the writer is not held."""

    def awaited() -> tuple[int, set[int]]:
        with Session(state.engine) as session:
            return store.steps_awaited(
                session=session, pid=pid, steps=steps, worker_steps=worker_steps
            )

    deadline = time.monotonic() + STEPS_GRACE_S
    while True:
        run_id, missing = await asyncio.to_thread(awaited)
        if not missing & set(state.agents.ranks(run_id)) or time.monotonic() >= deadline:
            return
        await asyncio.sleep(STEPS_POLL_S)
