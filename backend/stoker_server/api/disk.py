"""Disk use for the UI: database and profile sizes, free space, and whether the disk
is full (new rows refused, agents spool them) or nearly full.

Measured at each request (an SQLite PRAGMA or pg_database_size, a walk of the profile
directory, a statvfs), which also refreshes the figures `/metrics` serves.

The database's own disk: SQLite's is its file's. PostgreSQL's is read only where PostgreSQL
runs on this machine (reached over loopback or a Unix socket) and tells where the step rows
go (their tablespace's location, or the data directory, which only a superuser or a member
of pg_read_all_settings may read). On another host it cannot be known over SQL: its free
space is unknown, and a full disk is seen when PostgreSQL refuses a write (SQLSTATE 53100),
which sets `full`.
"""

from pathlib import Path

from fastapi import APIRouter
from pydantic import BaseModel
from sqlalchemy.engine import Connection, make_url

from stoker_server.ingest.retention import disk_space, measure
from stoker_server.service.deps import SessionDep, StateDep, ViewerAuth

router = APIRouter(prefix="/api/v1", tags=["disk"], dependencies=[ViewerAuth])

LOOPBACK_HOSTS = {"", "localhost", "127.0.0.1", "::1"}


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


def on_this_machine(url: str) -> bool:
    """Whether a PostgreSQL URL reaches a server on this machine (loopback or Unix socket)."""
    parsed = make_url(url)
    host = parsed.host or str(parsed.query.get("host", ""))
    return host in LOOPBACK_HOSTS or host.startswith("/")


def _postgres_rows_directory(connection: Connection) -> Path | None:
    """Where PostgreSQL writes the step table's files: its tablespace's location, else the
    data directory (hidden from roles that may not read settings: then None)."""
    location = connection.exec_driver_sql(
        "SELECT pg_tablespace_location(COALESCE(NULLIF(c.reltablespace, 0), d.dattablespace)) "
        "FROM pg_class c, pg_database d "
        "WHERE c.oid = 'step'::regclass AND d.datname = current_database()"
    ).scalar()
    if location:
        return Path(location)
    data_directory = connection.exec_driver_sql(
        "SELECT setting FROM pg_settings WHERE name = 'data_directory'"
    ).scalar()
    return Path(data_directory) if data_directory else None


def database_disk(connection: Connection) -> tuple[int | None, int | None, str]:
    """Free and total bytes of the disk the database's rows go to, and where they come from
    (or why they are unknown)."""
    url = connection.engine.url
    if connection.dialect.name == "sqlite":
        path = Path(url.database or "").resolve().parent
        free, total = disk_space(path)
        return free, total, f"the SQLite file's disk ({path})"
    unknown = (
        "cannot be read over SQL: a full disk shows as `full` once PostgreSQL refuses a "
        "write (SQLSTATE 53100); rows are then refused and agents keep them"
    )
    if not on_this_machine(url.render_as_string(hide_password=True)):
        return (
            None,
            None,
            f"PostgreSQL's disk is on its own host ({url.host}): its free space {unknown}",
        )
    directory = _postgres_rows_directory(connection)
    if directory is None:
        return None, None, (
            "PostgreSQL runs on this machine, but this role may not read its data directory "
            f"(superuser or pg_read_all_settings): its free space {unknown}"
        )  # fmt: skip
    free, total = disk_space(directory)
    if free is None:
        return None, None, (
            f"PostgreSQL's files ({directory}) are not reachable from this server (another "
            f"container?): its free space {unknown}"
        )  # fmt: skip
    return free, total, f"PostgreSQL's disk ({directory}), where the step rows are written"


@router.get("/disk")
def read_disk(session: SessionDep, state: StateDep) -> DiskPublic:
    settings, usage, writer = state.settings, state.telemetry.disk, state.writer
    measure(session=session, data_dir=settings.data_dir, usage=usage)
    connection = session.connection()
    database_free, database_total, database_where = database_disk(connection)
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
        sqlite=connection.dialect.name == "sqlite",
        database_free_bytes=database_free,
        database_total_bytes=database_total,
        database_disk=database_where,
    )
