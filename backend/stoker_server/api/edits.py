"""A user's edits of runs from the UI: rename, tag, annotate, delete. Run in the writer thread."""

import shutil
from pathlib import Path
from typing import Any

from sqlmodel import Session

from stoker_server.core.db import placeholder
from stoker_server.core.errors import Conflict
from stoker_server.core.models import Run, RunStatus
from stoker_server.ingest.profiles import trace_path


def update_run(*, session: Session, run_id: int, changes: dict[str, Any]) -> Run | None:
    """Apply a user's edit (name, tags, notes) to a run; None when the run does not exist."""
    run = session.get(Run, run_id)
    if run is None:
        return None
    for key, value in changes.items():
        setattr(run, key, value)
    session.add(run)
    session.commit()
    session.refresh(run)
    return run


# Child tables first; every row of a run is removed in the same transaction as the run.
RUN_CHILD_TABLES = (
    "stepchunk", "steprollup", "metric", "epochmetric", "devicesample", "devicerollup",
    "hostsample", "ingestcursor", "runevent", "alert", "pipelineread", "profile",
)  # fmt: skip


def delete_run(*, session: Session, run_id: int, data_dir: Path) -> bool:
    """Delete a run, all its rows (one transaction) and its profiler traces (after the
    commit); False when it does not exist. A running run is refused (409): its next batch
    would bring back a partial copy of it."""
    connection = session.connection()
    mark = placeholder(connection)
    row = connection.exec_driver_sql(f"SELECT status FROM run WHERE id = {mark}", (run_id,)).first()
    if row is None:
        return False
    if row[0] == RunStatus.running.value:
        raise Conflict(
            f"run {run_id} is running: stop its training first, or delete it once it ended "
            "(or was interrupted)"
        )
    profiles = [
        pid
        for (pid,) in connection.exec_driver_sql(
            f"SELECT id FROM profile WHERE run_id = {mark}", (run_id,)
        )
    ]
    for table in RUN_CHILD_TABLES:
        connection.exec_driver_sql(f"DELETE FROM {table} WHERE run_id = {mark}", (run_id,))
    connection.exec_driver_sql(f"DELETE FROM run WHERE id = {mark}", (run_id,))
    session.commit()
    for pid in profiles:  # gone with the run: they no longer count toward the quota either
        shutil.rmtree(trace_path(data_dir, pid).parent, ignore_errors=True)
    return True
