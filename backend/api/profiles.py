"""Profiler captures from the browser (issue 19): ask a run's agent for one, follow it, read
its analysis, download its trace. The agent reports status and uploads the trace here too."""

import asyncio
from typing import Annotated, Any, Literal

from fastapi import APIRouter, Path, Query, Request
from fastapi.responses import FileResponse
from pydantic import BaseModel, Field

from backend.core.deps import AgentAuth, RunId, SessionDep, StateDep, ViewerAuth
from backend.core.errors import BadRequest, RunNotFound
from backend.core.models import MAX_INT64, ProfilePublic, ProfilesPublic, Run, RunStatus
from backend.core.state import AppState
from backend.ingest import profiles as store
from backend.ingest.profile_analysis import analyse

ProfileId = Annotated[int, Path(ge=1, le=2**31 - 1)]
# A capture the agent has not reported on for its max duration and this long (the agent went
# away) no longer blocks a new one.
STALE_GRACE_S = 300.0
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
    state.hub.broadcast_relayed(
        {"type": "profile", "run_id": profile.run_id, "profile": profile.model_dump(mode="json")}
    )


@router.post("", status_code=202, dependencies=[ViewerAuth])
async def request_profile(
    run_id: RunId, body: ProfileRequest, state: StateDep, session: SessionDep
) -> ProfilePublic:
    settings = state.settings
    run = session.get(Run, run_id)
    if run is None:
        raise RunNotFound(run_id)
    if body.steps > settings.profile_max_steps:
        raise BadRequest(f"steps: at most {settings.profile_max_steps} (the server's limit)")
    if run.status != RunStatus.running or not state.commands.connected(run_id):
        raise store.Conflict("the run has no connected agent: only a live run can be profiled")
    profile = await state.writer.run(
        store.create_profile, run_id=run_id, steps=body.steps,
        stale_after_s=settings.profile_max_s + STALE_GRACE_S,
    )  # fmt: skip
    command = {"name": "profile", "id": profile.id, "steps": body.steps,
               "max_s": settings.profile_max_s}  # fmt: skip
    if not await state.commands.send(run_id, command):
        profile = await state.writer.run(
            store.fail, pid=profile.id, error="profile failed: the agent went away"
        )
    _announce(state, profile)
    return profile


@router.get("", dependencies=[ViewerAuth])
def read_profiles(run_id: RunId, session: SessionDep) -> ProfilesPublic:
    return store.list_profiles(session=session, run_id=run_id)


@router.get("/{pid}", dependencies=[ViewerAuth])
def read_profile(run_id: RunId, pid: ProfileId, session: SessionDep) -> ProfilePublic:
    return store.public(store.get_profile(session=session, run_id=run_id, pid=pid), session)


@router.get("/{pid}/trace", dependencies=[ViewerAuth], response_class=FileResponse)
def download_trace(run_id: RunId, pid: ProfileId, session: SessionDep, state: StateDep) -> Any:
    profile = store.get_profile(session=session, run_id=run_id, pid=pid)
    path = store.trace_path(state.settings.data_dir, pid)
    if profile.trace_evicted or not path.exists():
        raise store.ProfileNotFound(f"profile {pid} has no stored trace ({profile.status})")
    name = f"run{run_id}-profile{pid}.xplane.pb"
    return FileResponse(path, media_type="application/octet-stream", filename=name)


@router.post("/{pid}/status", dependencies=[AgentAuth])
async def report_status(
    run_id: RunId, pid: ProfileId, report: StatusReport, state: StateDep
) -> ProfilePublic:
    profile = await state.writer.run(
        store.update_status, run_id=run_id, pid=pid, report=report.model_dump()
    )
    _announce(state, profile)
    return profile


@router.post("/{pid}/trace", dependencies=[AgentAuth])
async def upload_trace(
    run_id: RunId,
    pid: ProfileId,
    request: Request,
    state: StateDep,
    offset: Annotated[int, Query(ge=0, le=MAX_INT64)],
    total: Annotated[int, Query(ge=1, le=MAX_INT64)],
) -> dict[str, Any]:
    settings = state.settings
    data = await request.body()
    try:
        complete = await state.writer.run(
            store.store_chunk, data_dir=settings.data_dir, run_id=run_id, pid=pid,
            offset=offset, total=total, data=data, max_bytes=settings.profile_max_trace_bytes,
        )  # fmt: skip
    except store.Conflict as error:
        if total > settings.profile_max_trace_bytes:
            failed = await state.writer.run(store.fail, pid=pid, error=error.detail)
            if failed is not None:
                _announce(state, failed)
        raise
    if complete:
        asyncio.get_running_loop().create_task(_analyse(state, pid))
    return {"received": offset + len(data), "complete": complete}


async def _analyse(state: AppState, pid: int) -> None:
    """Analyse off the event loop; mark the profile ready (or failed with xprof's error)."""
    settings = state.settings
    path = store.trace_path(settings.data_dir, pid)
    try:
        analysis, share, steps = await asyncio.to_thread(analyse, path)
        profile = await state.writer.run(
            store.finish, pid=pid, analysis=analysis, profiler_share=share, steps=steps,
            data_dir=settings.data_dir, quota_bytes=settings.profile_quota_bytes,
        )  # fmt: skip
    except Exception as error:
        message = f"profile failed: analysis: {type(error).__name__}: {error}"
        fallback = await state.writer.run(store.fail, pid=pid, error=message)
        if fallback is None:
            return
        profile = fallback
    _announce(state, profile)
