"""A run's workers: the ranks of a distributed job, which share its run key.

The run keeps them in `stats["workers"]` (rank → host, pid, status): a worker joins with its
hello and ends with its `end`; the run is running while any worker runs, and once all ended it
failed if any failed, else was interrupted if any was, else finished.
"""

from typing import Any

from stoker_server.core.models import RunStatus


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


def interrupt_workers(stats: dict[str, Any]) -> dict[str, Any]:
    """`stats` with every running worker interrupted (the run was abandoned)."""
    running = RunStatus.running.value
    workers = {
        rank: {**w, "status": RunStatus.interrupted.value} if w.get("status") == running else w
        for rank, w in stats.get("workers", {}).items()
    }
    return {**stats, "workers": workers} if workers else stats
