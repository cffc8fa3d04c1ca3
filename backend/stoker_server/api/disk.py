"""Disk use for the UI: database and profile sizes, free space, and whether the disk
is full (new rows refused, agents spool them) or nearly full.

Measured at each request (an SQLite PRAGMA or pg_database_size, a walk of the profile
directory, statvfs of the data directory's and the database's disks: ingest/disks.py), which
also refreshes the figures `/metrics` serves.
"""

from fastapi import APIRouter
from pydantic import BaseModel

from stoker_server.api.deps import SessionDep, StateDep
from stoker_server.core.auth import ViewerAuth
from stoker_server.ingest.retention import measure

router = APIRouter(prefix="/api/v1", tags=["disk"], dependencies=[ViewerAuth])


class DiskPublic(BaseModel):
    database_bytes: int | None  # the database's size (SQLite file pages, or pg_database_size)
    profiles_bytes: int | None  # stored profiler traces
    # The disk of the data directory (the SQLite database's and the profiles' by default);
    # none when it cannot be read.
    free_bytes: int | None
    total_bytes: int | None
    full: bool  # the last write failed for want of room: new rows are refused, agents spool
    # Under the settings' disk_low_free_share or disk_low_free_bytes: the data directory's
    # disk, or the database's own disk where it is known.
    low: bool
    refusals: int  # writes refused for want of room since the server started
    low_free_share: float  # the settings' thresholds of `low`
    low_free_bytes: int
    sqlite: bool  # the database is an SQLite file (on the data directory's disk by default)
    # The disk the database's rows are written to; none where it cannot be known (PostgreSQL
    # on another host, or a role that may not read where its files are).
    database_free_bytes: int | None = None
    database_total_bytes: int | None = None
    database_disk: str = ""  # where the database_* figures come from, or why they are unknown


def is_low(free: int | None, total: int | None, *, share: float, size: int) -> bool:
    """Under either threshold (0 turns one off)."""
    if free is None or not total:
        return False
    return (share > 0 and free < share * total) or (size > 0 and free < size)


@router.get("/disk")
def read_disk(session: SessionDep, state: StateDep) -> DiskPublic:
    settings, usage, writer = state.settings, state.telemetry.disk, state.writer
    measure(session=session, data_dir=settings.data_dir, usage=usage)
    database_free, database_total = usage.database_space()
    share, size = settings.disk_low_free_share, settings.disk_low_free_bytes
    return DiskPublic(
        database_bytes=usage.database_bytes,
        profiles_bytes=usage.profiles_bytes,
        free_bytes=usage.free_bytes,
        total_bytes=usage.total_bytes,
        full=writer.disk_full,
        low=is_low(usage.free_bytes, usage.total_bytes, share=share, size=size)
        or is_low(database_free, database_total, share=share, size=size),
        refusals=writer.disk_full_refusals,
        low_free_share=share,
        low_free_bytes=size,
        sqlite=session.connection().dialect.name == "sqlite",
        database_free_bytes=database_free,
        database_total_bytes=database_total,
        database_disk=usage.database_disk,
    )
