"""What a delivered batch or a run's end changes, published: the telemetry counters and
gauges, the browsers (through the live hub), the other server processes, and the detectors."""

from collections.abc import Callable
from functools import partial
from typing import Any

from starlette.requests import HTTPConnection

from stoker_server.api.state import AppState, app_state
from stoker_server.core.models import Run, RunPublic, RunStatus, RunSummary
from stoker_server.ingest.protocol import Batch
from stoker_server.ingest.summary import run_public
from stoker_server.live.hub import LiveHub
from stoker_server.live.messages import StepsData

# What a committed batch changed, published: (the run now, the batch, its rank).
BatchPublisher = Callable[[RunPublic, Batch, int], None]


def push_live_steps(hub: LiveHub, run_id: int, batch: Batch, rank: int) -> None:
    """Show a batch's steps to the browsers watching the run.

    Called as soon as the batch is valid, before it is committed: the chart need not wait for
    the writer. A batch that then fails to store is resent by the agent, and browsers keep
    only steps newer than the last one they hold, so nothing shows twice.
    """
    if batch.steps is not None and len(batch.steps):
        # Built without validating again: the protocol checked these columns.
        data = StepsData.model_construct(
            step=batch.steps.step, t=batch.steps.t, dur=batch.steps.dur,
            wait=batch.steps.column("wait"),
        )  # fmt: skip
        hub.publish_steps(run_id, data, rank=rank)


def publish_stored_batch(state: AppState, run: RunPublic, batch: Batch, rank: int) -> None:
    """A committed batch: counters, gauges, the run's summary, other processes, detectors."""
    hub = state.hub
    state.telemetry.stored(batch)
    state.telemetry.live.observe(run.id, rank=rank, batch=batch, steps_total=run.summary.steps)
    if batch.steps is not None:
        hub.relay_steps(run.id, batch.steps.step, rank=rank)
    hub.publish_run_progress(run.id, lambda: run.model_dump(mode="json"))
    state.detectors.observe_batch(run, batch, rank)


def stored_batch_publisher(conn: HTTPConnection) -> BatchPublisher:
    """The ingest routes' publisher (a FastAPI dependency, which a test may override)."""
    return partial(publish_stored_batch, app_state(conn))


def publish_run_ended(state: AppState, run: Run) -> RunPublic:
    """A run (or one of its workers) ended, as its agent said or reaped: gauges, browsers,
    detectors. The run's gauges go once its last worker ended."""
    public = run_public(run)
    if public.status != RunStatus.running:
        state.telemetry.live.ended(public.id)
    state.hub.publish_run(public.model_dump(mode="json"))
    state.detectors.observe_run(public)
    return public


def refreshed(run: RunPublic, fields: dict[str, Any]) -> RunPublic:
    """`run` with the fields a stored batch changed (see ingest.store.store_batch)."""
    return run.model_copy(update={**fields, "summary": RunSummary(**fields["summary"])})
