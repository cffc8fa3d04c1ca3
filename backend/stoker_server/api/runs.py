"""REST reads and user edits of runs: list, detail, series, compare, export, edit, delete."""

from typing import Annotated, Any

from fastapi import APIRouter, Query, Response
from fastapi.responses import StreamingResponse
from sqlmodel import Session

from stoker_server.api.deps import (
    HubDep,
    RunDep,
    RunExists,
    RunId,
    SessionDep,
    SettingsDep,
    WriterDep,
)
from stoker_server.api.edits import delete_run, update_run
from stoker_server.api.queries import (
    RUN_SORT_PATTERN,
    MetricAxis,
    compare_runs,
    list_runs_json,
    metric_series,
    parse_run_ids,
    run_public,
    step_series,
    steps_csv,
)
from stoker_server.api.sample_series import device_series, host_series
from stoker_server.core.auth import AdminAuth, ViewerAuth
from stoker_server.core.errors import RunNotFound
from stoker_server.core.models import (
    DeviceSeries,
    HostSeries,
    MetricSeries,
    RunComparison,
    RunPublic,
    RunsPublic,
    RunStatus,
    RunUpdate,
    StepSeries,
)

router = APIRouter(prefix="/api/v1", tags=["runs"], dependencies=[ViewerAuth])

# Run ids are 32-bit on every database; larger numbers are refused up front (422).
MaxPoints = Annotated[int, Query(ge=2, le=200_000, description="at most this many points")]
AfterStep = Annotated[int | None, Query(ge=-1, le=2**63 - 1, description="steps after this")]
BeforeStep = Annotated[int | None, Query(ge=0, le=2**63 - 1, description="steps before this")]
SinceT = Annotated[float | None, Query(allow_inf_nan=False, description="samples after t")]
UntilT = Annotated[float | None, Query(allow_inf_nan=False, description="samples before t")]


@router.get(
    "/runs",
    response_class=Response,
    responses={200: {"model": RunsPublic, "description": "Successful Response"}},
)
def read_runs(
    session: SessionDep,
    limit: Annotated[int, Query(ge=1, le=1000)] = 100,
    offset: Annotated[int, Query(ge=0, le=2**31)] = 0,
    project: Annotated[str | None, Query(max_length=200)] = None,
    tag: Annotated[str | None, Query(max_length=100)] = None,
    status: RunStatus | None = None,
    q: Annotated[str | None, Query(max_length=200, description="name contains")] = None,
    sort: Annotated[
        str,
        Query(
            pattern=RUN_SORT_PATTERN,
            description="a column, or best:<epoch metric> (the summary's best value; runs "
            "without it last); a leading - sorts descending",
        ),
    ] = "-started_at",
) -> Response:
    """Runs matching all filters; `count` is how many match, `data` one page of them."""
    # The body is built without models (queries.list_runs_json: the stored JSON spliced in,
    # about 5 times faster for a page of 1,000 runs), so no model checks it here:
    # tests/server/test_queries.py checks that it parses as RunsPublic and equals each run's
    # detail. The schema above is what it documents.
    body = list_runs_json(
        session=session, limit=limit, offset=offset, project=project, tag=tag,
        status=status, q=q, sort=sort,
    )  # fmt: skip
    return Response(body, media_type="application/json")


@router.get("/runs/{run_id}")
def read_run(run: RunDep) -> RunPublic:
    return run_public(run)


@router.patch("/runs/{run_id}", dependencies=[AdminAuth])
async def edit_run(run_id: RunId, body: RunUpdate, writer: WriterDep, hub: HubDep) -> RunPublic:
    """Change a run's name, tags or notes (only the fields sent)."""
    changes = body.model_dump(exclude_unset=True, exclude_none=True)
    run = await writer.run(update_run, run_id=run_id, changes=changes)
    if run is None:
        raise RunNotFound(run_id)
    public = run_public(run)
    hub.publish_run(public.model_dump(mode="json"))
    return public


@router.delete("/runs/{run_id}", status_code=204, dependencies=[AdminAuth])
async def remove_run(
    run_id: RunId, writer: WriterDep, hub: HubDep, settings: SettingsDep
) -> Response:
    """Delete an ended run with all its steps, samples, metrics and profiler traces; a running
    run is refused (409)."""
    if not await writer.run(delete_run, run_id=run_id, data_dir=settings.data_dir):
        raise RunNotFound(run_id)
    hub.publish_deleted(run_id)
    return Response(status_code=204)


@router.get("/runs/{run_id}/steps", dependencies=[RunExists])
def read_steps(
    run_id: RunId,
    session: SessionDep,
    max_points: MaxPoints = 2000,
    after_step: AfterStep = None,
    before_step: BeforeStep = None,
    rank: Annotated[int, Query(ge=0, le=100_000)] = 0,
) -> StepSeries:
    """Steps of one rank; `after_step` / `before_step` (exclusive) bound a zoomed range."""
    return step_series(
        session=session, run_id=run_id, max_points=max_points, after_step=after_step,
        before_step=before_step, rank=rank,
    )  # fmt: skip


@router.get("/runs/{run_id}/steps.csv", response_class=StreamingResponse, dependencies=[RunExists])
def export_steps(run_id: RunId, session: SessionDep) -> StreamingResponse:
    """All steps of a run as CSV (rank, step, t, dur, wait, batch_size)."""
    engine = session.get_bind()

    def chunks() -> Any:
        with Session(engine) as stream_session:
            yield from steps_csv(session=stream_session, run_id=run_id)

    return StreamingResponse(
        chunks(),
        media_type="text/csv",
        headers={"Content-Disposition": f'attachment; filename="run-{run_id}-steps.csv"'},
    )


@router.get("/runs/{run_id}/samples", response_model=DeviceSeries, dependencies=[RunExists])
def read_device_samples(
    run_id: RunId,
    session: SessionDep,
    max_points: MaxPoints = 2000,
    gpu: Annotated[int | None, Query(ge=0, le=1024)] = None,
    fields: Annotated[str | None, Query(max_length=500, description="comma-separated")] = None,
    since_t: SinceT = None,
    until_t: UntilT = None,
) -> dict[str, Any]:
    """Device (GPU) samples per rank and GPU over wall-clock time, downsampled."""
    return device_series(
        session=session, run_id=run_id, max_points=max_points, gpu=gpu, fields=fields,
        since_t=since_t, until_t=until_t,
    )  # fmt: skip


@router.get("/runs/{run_id}/host", response_model=HostSeries, dependencies=[RunExists])
def read_host_samples(
    run_id: RunId,
    session: SessionDep,
    max_points: MaxPoints = 2000,
    fields: Annotated[str | None, Query(max_length=500, description="comma-separated")] = None,
    since_t: SinceT = None,
    until_t: UntilT = None,
) -> dict[str, Any]:
    """Host samples (CPU, memory) per rank over wall-clock time, downsampled."""
    return host_series(
        session=session, run_id=run_id, max_points=max_points, fields=fields, since_t=since_t,
        until_t=until_t,
    )  # fmt: skip


@router.get("/runs/{run_id}/metrics", response_model=MetricSeries, dependencies=[RunExists])
def read_metrics(
    run_id: RunId,
    session: SessionDep,
    name: Annotated[list[str] | None, Query(max_length=50)] = None,
    max_points: MaxPoints = 2000,
    rank: Annotated[int, Query(ge=0, le=100_000)] = 0,
    after_step: AfterStep = None,
    before_step: BeforeStep = None,
    axis: Annotated[MetricAxis | None, Query(description="only step or only epoch series")] = None,
) -> dict[str, Any]:
    """Logged scalars (loss, accuracy, ...) one series per `name` (repeatable): by step, each
    marked with its `aggregation` (Keras fit logs running means over the epoch), and the
    epoch-end values (val_loss, ...) by epoch."""
    return metric_series(
        session=session, run_id=run_id, max_points=max_points, names=name or (), rank=rank,
        after_step=after_step, before_step=before_step, axis=axis,
    )  # fmt: skip


@router.get("/compare", response_model=RunComparison)
def compare(
    session: SessionDep,
    runs: Annotated[str, Query(max_length=1000, description="comma-separated run ids")],
) -> dict[str, Any]:
    """Summaries of several runs side by side, and the config/environment keys that differ.
    Ids with no run (deleted, or never there) are listed in `missing`, not refused: a saved
    compare link still shows the runs that remain, and says which are gone. Malformed ids: 422."""
    return compare_runs(session=session, run_ids=parse_run_ids(runs))
