"""Disk use for the UI: database and profile sizes, free space, and whether the disk
is full (new rows refused, agents spool them) or nearly full.

Measured at each request (an SQLite PRAGMA or pg_database_size, a walk of the profile
directory, a statvfs), which also refreshes the figures `/metrics` serves.
"""

from fastapi import APIRouter
from pydantic import BaseModel

from stoker_server.ingest.retention import measure
from stoker_server.service.deps import SessionDep, StateDep, ViewerAuth

router = APIRouter(prefix="/api/v1", tags=["disk"], dependencies=[ViewerAuth])


class DiskPublic(BaseModel):
    database_bytes: int | None  # the database's size (SQLite file pages, or PostgreSQL's)
    profiles_bytes: int | None  # stored profiler traces
    # The disk of the data directory (the SQLite database's and the profiles' by default);
    # none when it cannot be read. A PostgreSQL server's own disk is not seen from here: a
    # full one shows as `full` once it refuses a write.
    free_bytes: int | None
    total_bytes: int | None
    full: bool  # the last write failed for want of room: new rows are refused, agents spool
    low: bool  # free space under the settings' disk_low_free_share or disk_low_free_bytes
    refusals: int  # writes refused for want of room since the server started
    low_free_share: float  # the settings' thresholds of `low`
    low_free_bytes: int
    sqlite: bool  # the database is an SQLite file (on the data directory's disk by default)


def is_low(free: int | None, total: int | None, *, share: float, size: int) -> bool:
    """Under either threshold (0 turns one off)."""
    if free is None or not total:
        return False
    return (share > 0 and free < share * total) or (size > 0 and free < size)


@router.get("/disk")
def read_disk(session: SessionDep, state: StateDep) -> DiskPublic:
    settings, usage, writer = state.settings, state.telemetry.disk, state.writer
    measure(session=session, data_dir=settings.data_dir, usage=usage)
    total = usage.total_bytes
    return DiskPublic(
        database_bytes=usage.database_bytes,
        profiles_bytes=usage.profiles_bytes,
        free_bytes=usage.free_bytes,
        total_bytes=total,
        full=writer.disk_full,
        low=is_low(
            usage.free_bytes,
            total,
            share=settings.disk_low_free_share,
            size=settings.disk_low_free_bytes,
        ),
        refusals=writer.disk_full_refusals,
        low_free_share=settings.disk_low_free_share,
        low_free_bytes=settings.disk_low_free_bytes,
        sqlite=session.connection().dialect.name == "sqlite",
    )
