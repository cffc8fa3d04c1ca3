"""Run lifecycle: a run's workers joining and ending, and interrupting the abandoned runs.

A run whose agent went away without sending `end` (process killed, host lost) is marked
`interrupted` once nothing was heard from it for `heartbeat_timeout_s`. While an agent stays
connected to this process, the reaper keeps the run's `last_seen_at` fresh, so a run that is
alive on one server is never interrupted by another server sharing the database. A resumed
agent (same run key) sets the run back to `running` (see ingest.open_run). A run's workers:
ingest/workers.py.
"""

import asyncio
import logging
from collections.abc import Callable
from datetime import timedelta

from sqlmodel import Session, select

from stoker_server.core.models import Run, RunStatus, utc_now
from stoker_server.ingest.summary import stored_summary
from stoker_server.ingest.workers import interrupt_workers
from stoker_server.ingest.writer import Writer

log = logging.getLogger(__name__)


def reap_runs(*, session: Session, connected: set[int], timeout_s: float) -> list[Run]:
    """Refresh runs with a live agent here; interrupt running runs silent for `timeout_s`."""
    now = utc_now()
    cutoff = now - timedelta(seconds=timeout_s)
    interrupted = []
    running = session.exec(select(Run).where(Run.status == RunStatus.running)).all()
    for run in running:
        if run.id in connected:
            run.last_seen_at = now
        elif run.last_seen_at is None or run.last_seen_at < cutoff:
            run.status = RunStatus.interrupted
            run.ended_at = run.last_seen_at or now
            run.stats = interrupt_workers(run.stats)
            run.summary = stored_summary(run.stats)
            interrupted.append(run)
        else:
            continue
        session.add(run)
    session.commit()
    for run in interrupted:
        session.refresh(run)
    return interrupted


async def reaper_loop(
    *,
    writer: Writer,
    connected: Callable[[], set[int]],
    timeout_s: float,
    on_interrupted: Callable[[Run], None],
) -> None:
    """The `stoker-run-reaper` lifespan task: every few seconds, `reap_runs` with the runs
    `connected` says have an agent here."""
    interval_s = max(0.2, min(timeout_s / 3, 10.0))
    while True:
        await asyncio.sleep(interval_s)
        try:
            interrupted = await writer.run(reap_runs, connected=connected(), timeout_s=timeout_s)
        except Exception:
            log.exception("run reaper pass failed; retrying")
            continue
        for run in interrupted:
            log.info("run %s interrupted: no agent for %.0f s", run.id, timeout_s)
            on_interrupted(run)
