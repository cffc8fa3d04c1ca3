"""Reads for the REST API: runs and server-side downsampled series."""

from sqlalchemy import func
from sqlmodel import Session, col, select

from backend.errors import RunNotFound
from backend.models import Run, RunPublic, RunsPublic, Step, StepSeries
from backend.summary import summarize


def run_public(run: Run) -> RunPublic:
    assert run.id is not None
    return RunPublic(
        id=run.id,
        name=run.name,
        project=run.project,
        tags=run.tags,
        notes=run.notes,
        status=run.status,
        started_at=run.started_at,
        ended_at=run.ended_at,
        last_seen_at=run.last_seen_at,
        config=run.config,
        environment=run.environment,
        summary=summarize(run.stats),
    )


def list_runs(*, session: Session, limit: int = 100, offset: int = 0) -> RunsPublic:
    """Runs, newest first."""
    count = session.exec(select(func.count()).select_from(Run)).one()
    runs = session.exec(
        select(Run)
        .order_by(col(Run.started_at).desc(), col(Run.id).desc())
        .offset(offset)
        .limit(limit)
    ).all()
    return RunsPublic(data=[run_public(r) for r in runs], count=count)


def get_run(*, session: Session, run_id: int) -> Run:
    run = session.get(Run, run_id)
    if run is None:
        raise RunNotFound(run_id)
    return run


def step_series(
    *, session: Session, run_id: int, max_points: int, after_step: int | None = None, rank: int = 0
) -> StepSeries:
    """Steps of one rank in step order, downsampled to at most `max_points` buckets.

    A bucket keeps the mean step time and its min and max, so a single slow step stays
    visible however far the series is zoomed out.
    """
    where = [Step.run_id == run_id, Step.rank == rank]
    if after_step is not None:
        where.append(Step.step > after_step)
    total, first_step, last_step = session.exec(
        select(func.count(), func.min(Step.step), func.max(Step.step)).where(*where)
    ).one()
    if total <= max_points:
        rows = session.exec(
            select(Step.step, Step.t, Step.dur, Step.wait).where(*where).order_by(col(Step.step))
        ).all()
        return StepSeries(
            run_id=run_id,
            total=total,
            downsampled=False,
            step=[r[0] for r in rows],
            t=[r[1] for r in rows],
            dur=[r[2] for r in rows],
            wait=[r[3] for r in rows],
        )
    width = -(-(last_step - first_step + 1) // max_points)
    bucket = (col(Step.step) - first_step) // width
    rows = session.exec(
        select(
            # A bucket sits at its last step, so live steps merged after it are all newer.
            func.max(Step.step),
            func.max(Step.t),
            func.avg(Step.dur),
            func.min(Step.dur),
            func.max(Step.dur),
            func.avg(Step.wait),
        )
        .where(*where)
        .group_by(bucket)
        .order_by(bucket)
    ).all()
    return StepSeries(
        run_id=run_id,
        total=total,
        downsampled=True,
        step=[r[0] for r in rows],
        t=[r[1] for r in rows],
        dur=[float(r[2]) for r in rows],
        wait=[None if r[5] is None else float(r[5]) for r in rows],
        dur_min=[r[3] for r in rows],
        dur_max=[r[4] for r in rows],
    )
