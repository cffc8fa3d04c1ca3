"""What starvation costs: lost device hours per project and per run, and the UI's
settings (price, input-bound thresholds).

A run's cost is its summary's `lost_gpu_s` (seconds its steps waited on input, times the
GPUs each worker trains on: see ingest.summary.gpu_count). A run counts when it was active
on or after `since` (last heard from then, or started then), with its whole run's cost.
"""

from datetime import UTC, datetime, timedelta
from typing import Annotated, Any

from fastapi import APIRouter, Query
from pydantic import BaseModel
from sqlalchemy import and_, func, or_
from sqlmodel import Session, col, select

from stoker_server.api.deps import SessionDep, SettingsDep
from stoker_server.api.queries import summary_number
from stoker_server.core.auth import ViewerAuth
from stoker_server.core.db import select_columns
from stoker_server.core.levels import INPUT_BOUND, InputBoundThresholds
from stoker_server.core.models import Run, RunStatus
from stoker_server.core.text import without_nul

router = APIRouter(prefix="/api/v1", tags=["cost"], dependencies=[ViewerAuth])

DEFAULT_SINCE = timedelta(days=7)


class ProjectCost(BaseModel):
    project: str
    lost_gpu_hours: float
    input_wait_hours: float
    runs: int


class RunCost(BaseModel):
    id: int
    name: str
    project: str
    status: RunStatus
    started_at: datetime
    lost_gpu_hours: float
    input_wait_hours: float
    # The run's input wait over its whole run, as its summary gives it (0..1, to a tenth of a
    # percent; null when the wait is not measured).
    input_wait_share: float | None = None


class Starvation(BaseModel):
    since: datetime
    lost_gpu_hours: float
    input_wait_hours: float
    projects: list[ProjectCost]
    runs: list[RunCost]


class UiSettings(BaseModel):
    """Server settings the UI shows with: the price of a GPU-hour (null: hours only), and the
    input-wait shares from which steps are input-bound (the verdicts' and the starved
    stretches' thresholds)."""

    gpu_hour_price: float | None
    energy_price_kwh: float | None = None
    currency: str
    input_bound: InputBoundThresholds


def _utc(moment: datetime) -> datetime:
    return moment.replace(tzinfo=UTC) if moment.tzinfo is None else moment.astimezone(UTC)


def starvation_totals(
    *, session: Session, since: datetime, project: str | None = None, limit: int = 100
) -> Starvation:
    """Lost device hours and input-wait hours per project (all matching runs) and per run (the
    `limit` costliest, then newest first)."""
    since = _utc(since)
    where: list[Any] = [
        or_(
            col(Run.last_seen_at) >= since,
            and_(col(Run.last_seen_at).is_(None), col(Run.started_at) >= since),
        )
    ]
    if project is not None:
        where.append(Run.project == without_nul(project))
    lost = func.coalesce(summary_number(session, "lost_gpu_s"), 0.0)
    wait = func.coalesce(summary_number(session, "input_wait_s"), 0.0)
    share = summary_number(session, "input_wait_share")
    lost_sum, wait_sum = func.sum(lost), func.sum(wait)
    projects = session.exec(
        select(Run.project, lost_sum, wait_sum, func.count())
        .where(*where)
        .group_by(col(Run.project))
        .order_by(lost_sum.desc(), col(Run.project))
    ).all()
    runs = session.exec(
        select_columns(Run.id, Run.name, Run.project, Run.status, Run.started_at, lost, wait, share)
        .where(*where)
        .order_by(lost.desc(), col(Run.id).desc())
        .limit(limit)
    ).all()
    return Starvation(
        since=since,
        lost_gpu_hours=sum(float(p[1]) for p in projects) / 3600,
        input_wait_hours=sum(float(p[2]) for p in projects) / 3600,
        projects=[
            ProjectCost(
                project=name,
                lost_gpu_hours=float(lost_s) / 3600,
                input_wait_hours=float(wait_s) / 3600,
                runs=int(n),
            )
            for name, lost_s, wait_s, n in projects
        ],
        runs=[
            RunCost(
                id=run_id,
                name=name,
                project=proj,
                status=status,
                started_at=_utc(started),
                lost_gpu_hours=float(lost_s) / 3600,
                input_wait_hours=float(wait_s) / 3600,
                input_wait_share=None if wait_share is None else float(wait_share),
            )
            for run_id, name, proj, status, started, lost_s, wait_s, wait_share in runs
        ],
    )


@router.get("/starvation")
def read_starvation(
    session: SessionDep,
    since: Annotated[
        datetime | None,
        Query(description="runs active on or after this time (ISO 8601; default 7 days ago)"),
    ] = None,
    project: Annotated[str | None, Query(max_length=200)] = None,
    limit: Annotated[int, Query(ge=1, le=1000, description="runs listed, costliest first")] = 100,
) -> Starvation:
    """Lost device hours to input starvation, per project and per run."""
    start = since if since is not None else datetime.now(UTC) - DEFAULT_SINCE
    return starvation_totals(session=session, since=start, project=project, limit=limit)


@router.get("/settings/ui")
def read_ui_settings(settings: SettingsDep) -> UiSettings:
    return UiSettings(
        gpu_hour_price=settings.gpu_hour_price,
        energy_price_kwh=settings.energy_price_kwh,
        currency=settings.currency,
        input_bound=INPUT_BOUND,
    )
