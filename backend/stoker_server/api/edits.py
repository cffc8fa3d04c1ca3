"""A user's edits of runs from the UI: rename, tag, annotate, delete. Run in the writer thread."""

from typing import Any

from sqlmodel import Session

from stoker_server.core.db import placeholder
from stoker_server.core.models import Run


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
    "hostsample", "ingestcursor", "runevent", "alert",
)  # fmt: skip


def delete_run(*, session: Session, run_id: int) -> bool:
    """Delete a run and all its rows in one transaction; False when it does not exist."""
    connection = session.connection()
    exists = connection.exec_driver_sql(
        f"SELECT 1 FROM run WHERE id = {placeholder(connection)}", (run_id,)
    ).first()
    if exists is None:
        return False
    for table in RUN_CHILD_TABLES:
        connection.exec_driver_sql(
            f"DELETE FROM {table} WHERE run_id = {placeholder(connection)}", (run_id,)
        )
    connection.exec_driver_sql(f"DELETE FROM run WHERE id = {placeholder(connection)}", (run_id,))
    session.commit()
    return True
