"""Profiler captures' routes: a browser asks for one, follows it, reads its analysis and
downloads its traces; the agents report their status and upload their traces here, tagged with
their rank. The captures themselves: api/profile_captures.py."""

from typing import Annotated, Any, Literal

from fastapi import APIRouter, Path, Query, Request
from fastapi.responses import FileResponse
from pydantic import BaseModel, Field

from stoker_server.api.deps import RunDep, RunId, SessionDep, StateDep
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

ProfileId = Annotated[int, Path(ge=1, le=2**31 - 1)]
Rank = Annotated[int, Query(ge=0, le=100_000, description="the worker's rank (its hello's)")]
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


@router.post("", status_code=202, dependencies=[AdminAuth])
async def request_profile(
    run_id: RunId, run: RunDep, body: ProfileRequest, state: StateDep
) -> ProfilePublic:
    settings = state.settings
    if body.steps > settings.profile_max_steps:
        raise BadRequest(f"steps: at most {settings.profile_max_steps} (the server's limit)")
    running = run.status == RunStatus.running
    return await state.profiles.start(run_id, steps=body.steps, running=running)


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
    captures = state.profiles
    profile, complete = await captures.writer.run(
        store.update_status, run_id=run_id, pid=pid, rank=rank, report=report.model_dump()
    )
    captures.announce(profile)
    if complete:  # the last worker to settle failed, the others' traces are in
        captures.start_analysis(pid)
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
    captures, settings = state.profiles, state.settings
    data = await request.body()
    try:
        complete, settled = await captures.writer.run(
            store.store_chunk, data_dir=settings.data_dir, run_id=run_id, pid=pid, rank=rank,
            offset=offset, total=total, data=data, max_bytes=settings.profile_max_trace_bytes,
        )  # fmt: skip
    except store.Conflict as error:
        if total > settings.profile_max_trace_bytes:
            failed = await captures.writer.run(
                store.fail, pid=pid, error=error.detail, ranks=[rank]
            )
            if failed is not None:
                captures.announce(failed)
                if _all_settled(failed):  # the other workers' traces are in
                    captures.start_analysis(pid)
        raise
    if settled:
        captures.start_analysis(pid)
    return {"received": offset + len(data), "complete": complete}


def _all_settled(profile: ProfilePublic) -> bool:
    statuses = {worker.status for worker in profile.workers}
    settled = {ProfileStatus.ready, ProfileStatus.failed}
    return statuses <= settled and ProfileStatus.ready in statuses
