"""REST reads for the diagnosis: the verdict, starvation marks, and the run's events."""

from typing import Annotated

from fastapi import APIRouter, Query
from starlette.concurrency import run_in_threadpool

from stoker_server.api.deps import (
    DetectorsDep,
    RunDep,
    RunExists,
    RunId,
    SessionDep,
    SettingsDep,
)
from stoker_server.api.pipeline import with_bottleneck
from stoker_server.core.auth import ViewerAuth
from stoker_server.core.levels import HIGHLY_INPUT_BOUND
from stoker_server.core.models import Run, RunEventsPublic, RunStatus
from stoker_server.diagnosis.advice import once
from stoker_server.diagnosis.alerts_and_events import list_events
from stoker_server.diagnosis.gpu_use import gpu_findings
from stoker_server.diagnosis.history import StarvedRanges, starved_ranges, window_from_db
from stoker_server.diagnosis.verdict import Diagnosis, Verdict

router = APIRouter(prefix="/api/v1", tags=["diagnosis"], dependencies=[ViewerAuth])


@router.get("/runs/{run_id}/diagnosis")
async def read_diagnosis(
    run_id: RunId,
    run: RunDep,
    session: SessionDep,
    settings: SettingsDep,
    detectors: DetectorsDep,
    window_s: Annotated[float | None, Query(gt=0, le=86_400)] = None,
) -> Diagnosis:
    """The verdict over the run's last `window_s` seconds (default: the server's window).

    A running run this server watches is judged on its live window, which holds every batch
    acknowledged so far. Otherwise, and when that window holds too few steps for a verdict
    (it may have begun after steps were stored, as after a restart), or with an explicit
    `window_s`, the verdict is judged on the stored steps: an ended run's answer is final,
    and its input-wait figure and verdict are the whole run's (`window_label` "whole run"),
    the figure its summary shows.
    """
    running = run.status == RunStatus.running
    if window_s is None and running:
        # Judged here, on the event loop that feeds the window, not in a worker thread.
        live = detectors.diagnose_now(run_id)
        if live is not None and live.verdict != Verdict.insufficient_data:
            diagnosis = await run_in_threadpool(with_bottleneck, live, session=session)
            return _with_gpu_findings(_said_once(diagnosis), run)
    window = await run_in_threadpool(
        window_from_db,
        session=session,
        run=run,
        window_s=window_s or settings.diagnosis_window_s,
        whole_run=window_s is None and not running,  # an explicit window is that window
    )
    diagnosis = detectors.diagnose_stored(window)
    diagnosis = await run_in_threadpool(with_bottleneck, diagnosis, session=session)
    return _with_gpu_findings(_said_once(diagnosis), run)


def _with_gpu_findings(diagnosis: Diagnosis, run: Run) -> Diagnosis:
    """The busy-but-under-used findings of the run so far."""
    findings = gpu_findings(run.summary or {}, run.environment or {})
    return diagnosis.model_copy(update={"gpu_findings": findings})


def _said_once(diagnosis: Diagnosis) -> Diagnosis:
    """The bottleneck's fix comes first; general advice that repeats it is left out."""
    return diagnosis.model_copy(update={"advice": once(diagnosis.advice)})


@router.get("/runs/{run_id}/starvation", dependencies=[RunExists])
def read_starvation(
    run_id: RunId,
    session: SessionDep,
    threshold: Annotated[float, Query(ge=0.001, le=1)] = HIGHLY_INPUT_BOUND,
    rank: Annotated[int, Query(ge=0, le=100_000)] = 0,
    max_gap: Annotated[int, Query(ge=0, le=10_000)] = 0,
) -> StarvedRanges:
    """Step ranges whose input wait is at least `threshold` of step time, for shading."""
    return starved_ranges(
        session=session, run_id=run_id, threshold=threshold, rank=rank, max_gap=max_gap
    )


@router.get("/runs/{run_id}/events", dependencies=[RunExists])
def read_events(
    run_id: RunId,
    session: SessionDep,
    kind: Annotated[str | None, Query(max_length=50)] = None,
    limit: Annotated[int, Query(ge=1, le=10_000)] = 500,
) -> RunEventsPublic:
    return list_events(session=session, run_id=run_id, kind=kind, limit=limit)
