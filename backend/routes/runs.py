"""REST reads: runs and their series."""

from typing import Annotated

from fastapi import APIRouter, Query

from backend.deps import SessionDep, ViewerAuth
from backend.models import RunPublic, RunsPublic, StepSeries
from backend.queries import get_run, list_runs, run_public, step_series

router = APIRouter(prefix="/api/v1", tags=["runs"], dependencies=[ViewerAuth])


@router.get("/runs")
def read_runs(
    session: SessionDep,
    limit: Annotated[int, Query(ge=1, le=1000)] = 100,
    offset: Annotated[int, Query(ge=0)] = 0,
) -> RunsPublic:
    return list_runs(session=session, limit=limit, offset=offset)


@router.get("/runs/{run_id}")
def read_run(run_id: int, session: SessionDep) -> RunPublic:
    return run_public(get_run(session=session, run_id=run_id))


@router.get("/runs/{run_id}/steps")
def read_steps(
    run_id: int,
    session: SessionDep,
    max_points: Annotated[int, Query(ge=2, le=200_000)] = 2000,
    after_step: Annotated[int | None, Query(ge=-1)] = None,
    rank: Annotated[int, Query(ge=0)] = 0,
) -> StepSeries:
    get_run(session=session, run_id=run_id)
    return step_series(
        session=session, run_id=run_id, max_points=max_points, after_step=after_step, rank=rank
    )
