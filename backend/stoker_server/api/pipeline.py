"""`GET /runs/{id}/pipeline`: the stages of the run's tf.data pipeline and its bottleneck."""

import math
from typing import Annotated, Any

from fastapi import APIRouter, Query
from pydantic import BaseModel
from sqlmodel import Session

from stoker_server.api.deps import RunId, SessionDep, get_run
from stoker_server.core.auth import ViewerAuth
from stoker_server.core.step_chunks import read_latest_steps
from stoker_server.diagnosis.bottleneck import (
    Bottleneck,
    add_bottleneck,
    capacities,
    find_bottleneck,
    reached_steps_per_s,
    step_demand,
)
from stoker_server.diagnosis.verdict import Diagnosis, Verdict
from stoker_server.ingest.pipeline_store import pipeline_read
from stoker_server.ingest.protocol import PipelineStage

router = APIRouter(prefix="/api/v1", tags=["diagnosis"], dependencies=[ViewerAuth])

# The step demand comes from the steps just before the read.
DEMAND_STEPS = 100


class PipelineView(BaseModel):
    run_id: int
    t: float | None
    source: str  # "autotune_model" | "unavailable"
    stages: list[PipelineStage]
    bottleneck: Bottleneck | None
    read_us: float | None = None
    # Beside the stages, for the view: steps/s each could feed (null: unmeasured), and the
    # steps/s the run would take when fed.
    capacity_steps_per_s: list[float | None] = []
    demand_steps_per_s: float | None = None


def _recent_steps(session: Session, run_id: int, before: float) -> tuple[list[float], list[Any]]:
    """The durations and waits of rank 0's last DEMAND_STEPS steps at or before `before`,
    newest first."""
    steps = read_latest_steps(
        session.connection(), run_id, rank=0, count=DEMAND_STEPS, t_max=before
    )
    return steps.dur[::-1].tolist(), steps.wait_or_none()[::-1]


def pipeline_view(session: Session, run_id: int, at: float | None) -> PipelineView:
    run = get_run(session=session, run_id=run_id)
    read = pipeline_read(session.connection(), run_id, at)
    if read is None:
        return PipelineView(run_id=run_id, t=None, source="unavailable", stages=[], bottleneck=None)
    stages = read["stages"] or []
    demand = step_demand(*_recent_steps(session, run_id, read["t"]))
    if demand is not None and not math.isfinite(demand[0]):
        demand = None  # steps that only waited: no compute time to compare with
    environment = run.environment or {}
    cpus = environment.get("cpu_count")
    described = environment.get("input_pipeline")
    bottleneck = find_bottleneck(
        stages,
        demand_steps_per_s=demand[0] if demand else None,
        wait_share=demand[1] if demand else None,
        cpus=cpus if isinstance(cpus, int) else None,
        pipeline=described if isinstance(described, dict) else None,
    )
    return PipelineView(
        run_id=run_id,
        t=read["t"],
        source=read["source"],
        stages=[PipelineStage.model_validate(stage) for stage in stages],
        bottleneck=bottleneck,
        read_us=read["read_us"],
        # Checked against the rate the run reached, as the bottleneck's are: no view shows a
        # capacity below what the stage demonstrably fed.
        capacity_steps_per_s=[
            None if math.isinf(c) else c
            for c in capacities(stages, reached_steps_per_s(*demand) if demand else None)
        ],
        demand_steps_per_s=demand[0] if demand else None,
    )


def with_bottleneck(diagnosis: Diagnosis, *, session: Session) -> Diagnosis:
    """An input-bound verdict gains the stage that starves the steps, when there is one."""
    if diagnosis.verdict not in (Verdict.highly_input_bound, Verdict.moderately_input_bound):
        return diagnosis
    return add_bottleneck(diagnosis, pipeline_view(session, diagnosis.run_id, None).bottleneck)


@router.get("/runs/{run_id}/pipeline")
def read_pipeline(
    run_id: RunId,
    session: SessionDep,
    t: Annotated[float | None, Query(ge=0, le=1e11, description="unix seconds")] = None,
) -> PipelineView:
    """The latest read of the run's tf.data autotuning model (or the latest at or before
    `t`): its stages from the source (0) to the model, and the stage that starves the
    steps, when the run is input-bound. `source` is "unavailable" when there is no read."""
    return pipeline_view(session, run_id, t)
