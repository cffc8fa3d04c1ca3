"""Run lifecycle: which runs have an agent connected here, and interrupting the abandoned ones.

A run whose agent went away without sending `end` (process killed, host lost) is marked
`interrupted` once nothing was heard from it for `heartbeat_timeout_s`. While an agent stays
connected to this process, the reaper keeps the run's `last_seen_at` fresh, so a run that is
alive on one server is never interrupted by another server sharing the database. A resumed
agent (same run key) sets the run back to `running` (see ingest.open_run).

One run can have many workers (the ranks of a distributed job, which share its run key).
The run keeps them in `stats["workers"]` (rank → host, pid, status): a worker joins with
its hello and ends with its `end`; the run is running while any worker runs, and once all
ended it failed if any failed, else was interrupted if any was, else finished.
"""

import asyncio
import logging
from collections import Counter
from collections.abc import Callable
from datetime import timedelta
from typing import Any

from sqlmodel import Session, select

from stoker_server.core.models import Run, RunStatus, utc_now
from stoker_server.ingest.summary import stored_summary

log = logging.getLogger(__name__)


class AgentConnections:
    """Open agent connections per run id in this process. Used only from the event loop."""

    def __init__(self) -> None:
        self._open: Counter[int] = Counter()

    def connect(self, run_id: int) -> None:
        self._open[run_id] += 1

    def disconnect(self, run_id: int) -> None:
        self._open[run_id] -= 1
        if self._open[run_id] <= 0:
            del self._open[run_id]

    def run_ids(self) -> set[int]:
        return set(self._open)

    @property
    def total(self) -> int:
        return sum(self._open.values())


def join_worker(stats: dict[str, Any], *, rank: int, host: str, pid: int) -> dict[str, Any]:
    """`stats` with worker `rank` running (joined, or rejoined after a restart)."""
    workers = dict(stats.get("workers", {}))
    worker = dict(workers.get(str(rank), {}))
    worker.update(host=host, pid=pid, status=RunStatus.running.value)
    workers[str(rank)] = worker
    return {**stats, "workers": workers}


def end_worker(stats: dict[str, Any], *, rank: int, status: RunStatus) -> dict[str, Any]:
    """`stats` with worker `rank` ended with `status`."""
    workers = dict(stats.get("workers", {}))
    workers[str(rank)] = {**workers.get(str(rank), {}), "status": status.value}
    return {**stats, "workers": workers}


def job_status(stats: dict[str, Any]) -> RunStatus | None:
    """The run's status from its workers' (None when it has none recorded)."""
    statuses = {w.get("status") for w in stats.get("workers", {}).values()}
    if not statuses:
        return None
    for status in (RunStatus.running, RunStatus.failed, RunStatus.interrupted):
        if status.value in statuses:
            return status
    return RunStatus.finished


def _interrupt_workers(stats: dict[str, Any]) -> dict[str, Any]:
    running = RunStatus.running.value
    workers = {
        rank: {**w, "status": RunStatus.interrupted.value} if w.get("status") == running else w
        for rank, w in stats.get("workers", {}).items()
    }
    return {**stats, "workers": workers} if workers else stats


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
            run.stats = _interrupt_workers(run.stats)
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
    writer,
    connections: AgentConnections,
    timeout_s: float,
    on_interrupted: Callable[[Run], None],
) -> None:
    """The `stoker-run-reaper` lifespan task."""
    interval_s = max(0.2, min(timeout_s / 3, 10.0))
    while True:
        await asyncio.sleep(interval_s)
        try:
            interrupted = await writer.run(
                reap_runs, connected=connections.run_ids(), timeout_s=timeout_s
            )
        except Exception:
            log.exception("run reaper pass failed; retrying")
            continue
        for run in interrupted:
            log.info("run %s interrupted: no agent for %.0f s", run.id, timeout_s)
            on_interrupted(run)
