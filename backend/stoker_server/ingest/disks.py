"""The disks the server writes to: the data directory's (profiles; the SQLite file by default)
and the database's own, where the step rows go.

SQLite's is its file's. PostgreSQL's is known only where PostgreSQL runs on this machine
(reached over loopback or a Unix socket) and tells where the step rows go (their tablespace's
location, or the data directory, which only a superuser or a member of pg_read_all_settings may
read). On another host it cannot be known over SQL: its free space is unknown, and a full disk
is seen when PostgreSQL refuses a write (SQLSTATE 53100), which sets the writer's `disk_full`.
"""

import shutil
from pathlib import Path

from sqlalchemy.engine import Connection, make_url

LOOPBACK_HOSTS = {"", "localhost", "127.0.0.1", "::1"}
UNKNOWN = (
    "cannot be read over SQL: a full disk shows as `full` once PostgreSQL refuses a "
    "write (SQLSTATE 53100); rows are then refused and agents keep them"
)


def disk_space(path: Path) -> tuple[int | None, int | None]:
    """Free and total bytes of the disk holding `path`; none when it cannot be read."""
    try:
        space = shutil.disk_usage(path)
    except OSError:
        return None, None
    return space.free, space.total


def free_share(free: int | None, total: int | None) -> float | None:
    return free / total if free is not None and total else None


def on_this_machine(url: str) -> bool:
    """Whether a PostgreSQL URL reaches a server on this machine (loopback or Unix socket)."""
    parsed = make_url(url)
    host = parsed.host or str(parsed.query.get("host", ""))
    return host in LOOPBACK_HOSTS or host.startswith("/")


def _postgres_rows_directory(connection: Connection) -> Path | None:
    """Where PostgreSQL writes the step chunks' files: its tablespace's location, else the
    data directory (hidden from roles that may not read settings: then None)."""
    location = connection.exec_driver_sql(
        "SELECT pg_tablespace_location(COALESCE(NULLIF(c.reltablespace, 0), d.dattablespace)) "
        "FROM pg_class c, pg_database d "
        "WHERE c.oid = 'stepchunk'::regclass AND d.datname = current_database()"
    ).scalar()
    if location:
        return Path(location)
    data_directory = connection.exec_driver_sql(
        "SELECT setting FROM pg_settings WHERE name = 'data_directory'"
    ).scalar()
    return Path(data_directory) if data_directory else None


def database_directory(connection: Connection) -> tuple[Path | None, str]:
    """The directory the database's rows are written to, with where that is; or None with
    why it cannot be known from this server."""
    url = connection.engine.url
    if connection.dialect.name == "sqlite":
        path = Path(url.database or "").resolve().parent
        return path, f"the SQLite file's disk ({path})"
    if not on_this_machine(url.render_as_string(hide_password=True)):
        return None, f"PostgreSQL's disk is on its own host ({url.host}): its free space {UNKNOWN}"
    directory = _postgres_rows_directory(connection)
    if directory is None:
        return None, (
            "PostgreSQL runs on this machine, but this role may not read its data directory "
            f"(superuser or pg_read_all_settings): its free space {UNKNOWN}"
        )  # fmt: skip
    if disk_space(directory)[0] is None:
        return None, (
            f"PostgreSQL's files ({directory}) are not reachable from this server (another "
            f"container?): its free space {UNKNOWN}"
        )  # fmt: skip
    return directory, f"PostgreSQL's disk ({directory}), where the step rows are written"
