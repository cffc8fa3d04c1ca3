"""Retention, in the manner of Prometheus's `retention.time` and `retention.size`.

An ended run older than `retention_time_s`, or beyond `retention_size_bytes` of raw rows
(newest runs kept first), is compacted: its raw step rows are deleted (the step rollups the
charts read at every zoom stay), and its device and host samples are thinned to one reading per
(rank, GPU) and bucket, `KEEP_SAMPLES` buckets over the run, as many as a chart shows at
its default zoom; their rollups (core.models.DeviceRollup) stay, so a zoomed-out device
chart keeps its true means and extremes. The run's summary, epoch metrics, events, alerts,
pipeline reads and profiles are not touched. A pinned run (`Run.pinned`) keeps its raw rows;
a compacted run says so (`Run.compacted_at`), and so do its series.

Compaction runs in small chunks (through the writer on SQLite, on a connection of its own
on PostgreSQL) with a pause after each twice as long as the chunk took, so ingest batches
are stored between two chunks and reads never wait on a long transaction. It is idempotent: a
server stopped mid-way finishes the run on its next pass.
"""

import asyncio
import logging
import math
import time
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from sqlalchemy.engine import Connection
from sqlmodel import Session, col, select

from stoker_server.core.db import placeholder
from stoker_server.core.models import Run, RunStatus, utc_now
from stoker_server.ingest.disks import database_directory, disk_space

log = logging.getLogger(__name__)

# Samples kept per (rank, GPU) series of a compacted run: the charts' default max_points.
KEEP_SAMPLES = 2000
# Rows deleted per transaction, and the pause after each, as a multiple of its duration.
CHUNK_ROWS = 10_000
PAUSE_RATIO = 2.0
# Step chunks deleted per transaction (up to core.step_chunks.CHUNK_STEPS steps each).
CHUNKS_PER_DELETE = 4
# Bytes per raw row (row, index and page overhead), as stored on SQLite: steps 40 (in chunks,
# measured by bench.query), device samples with every field, host samples; and how each table
# counts its rows. `retention_size_bytes` bounds the raw rows' estimated bytes: rollups,
# summaries and the rest are kept and small.
ROW_BYTES = {"stepchunk": 40, "devicesample": 190, "hostsample": 60}
_ROW_COUNT = {"stepchunk": "sum(n)", "devicesample": "count(*)", "hostsample": "count(*)"}


@dataclass
class DiskUsage:
    """The latest disk figures, measured by the retention pass (a scrape reads only these,
    and the free space of the database's own disk, a statvfs)."""

    database_bytes: int | None = None
    profiles_bytes: int | None = None
    free_bytes: int | None = None
    total_bytes: int | None = None  # the size of the data directory's disk
    raw_bytes: int | None = None  # estimated bytes of raw rows still kept
    compacted_runs: int = 0  # compacted by this server since it started
    compacted_rows: int = 0  # raw rows deleted by this server since it started
    # Where the database's rows are written (ingest/disks.py), or None with why not known.
    database_dir: Path | None = None
    database_disk: str = ""
    _raw_by_run: dict[int, int] = field(default_factory=dict)  # ended runs' raw bytes (cache)

    def database_space(self) -> tuple[int | None, int | None]:
        """Free and total bytes of the database's own disk, read now; none where unknown."""
        return disk_space(self.database_dir) if self.database_dir else (None, None)


def database_bytes(connection: Connection) -> int:
    """The database's size on disk (SQLite: the main file's pages; PostgreSQL: the database)."""
    if connection.dialect.name == "sqlite":
        pages = connection.exec_driver_sql("PRAGMA page_count").scalar() or 0
        size = connection.exec_driver_sql("PRAGMA page_size").scalar() or 0
        return int(pages) * int(size)
    return int(
        connection.exec_driver_sql("SELECT pg_database_size(current_database())").scalar_one()
    )


def directory_bytes(path: Path) -> int:
    if not path.exists():
        return 0
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file())


def _raw_bytes(connection: Connection, run_id: int) -> int:
    mark = placeholder(connection)
    total = 0
    for table, row_bytes in ROW_BYTES.items():
        rows = connection.exec_driver_sql(
            f"SELECT {_ROW_COUNT[table]} FROM {table} WHERE run_id = {mark}", (run_id,)
        ).scalar()
        total += int(rows or 0) * row_bytes
    return total


def due_runs(
    *, session: Session, max_age_s: float, max_raw_bytes: int, usage: DiskUsage
) -> list[int]:
    """Ended, unpinned, uncompacted runs that the policies reduce, oldest first.

    Age: ended (or last heard of) more than `max_age_s` ago (0: no limit). Size: the newest
    runs' raw rows are kept up to `max_raw_bytes` (0: no limit), the older ones are due.
    """
    runs = session.exec(
        select(Run.id, Run.ended_at, Run.last_seen_at, Run.started_at).where(
            Run.status != RunStatus.running,
            Run.pinned == False,  # noqa: E712  (SQL comparison)
            col(Run.compacted_at).is_(None),
        )
    ).all()
    now = utc_now()
    newest_first = sorted(runs, key=lambda r: r[1] or r[2] or r[3], reverse=True)
    due: list[int] = []
    kept_bytes = 0
    connection = session.connection()
    for run_id, ended_at, last_seen_at, started_at in newest_first:
        assert run_id is not None  # a stored run's key
        moment = ended_at or last_seen_at or started_at
        if max_age_s > 0 and now - _aware(moment) > timedelta(seconds=max_age_s):
            due.append(run_id)
            continue
        if max_raw_bytes > 0:
            raw = usage._raw_by_run.get(run_id)
            if raw is None:
                raw = usage._raw_by_run[run_id] = _raw_bytes(connection, run_id)
            if kept_bytes + raw > max_raw_bytes:
                due.append(run_id)
                continue
            kept_bytes += raw
    usage.raw_bytes = kept_bytes if max_raw_bytes > 0 else usage.raw_bytes
    return list(reversed(due))


def _aware(moment: datetime) -> datetime:
    # SQLite hands datetimes back without a zone; every stored moment is UTC.
    return moment if moment.tzinfo is not None else moment.replace(tzinfo=UTC)


def delete_step_chunks(
    *, session: Session, run_id: int, limit: int = CHUNKS_PER_DELETE
) -> tuple[int, int]:
    """Delete up to `limit` of a run's step chunks; return how many steps and chunks went."""
    connection = session.connection()
    mark = placeholder(connection)
    # stepchunk has no key of its own: rows are picked by their physical address.
    if connection.dialect.name == "postgresql":
        where = f"ctid = ANY(ARRAY(SELECT ctid FROM stepchunk WHERE run_id = {mark} LIMIT {mark}))"
    else:
        where = f"rowid IN (SELECT rowid FROM stepchunk WHERE run_id = {mark} LIMIT {mark})"
    counts = connection.exec_driver_sql(
        f"DELETE FROM stepchunk WHERE {where} RETURNING n", (run_id, limit)
    ).all()
    session.commit()
    return sum(int(n) for (n,) in counts), len(counts)


def sample_windows(*, session: Session, run_id: int, table: str) -> tuple[float, float, int] | None:
    """A run's samples in `table`: (first t, bucket width in seconds, rows); None if none."""
    connection = session.connection()
    mark = placeholder(connection)
    row = connection.exec_driver_sql(
        f"SELECT min(t), max(t), count(*) FROM {table} WHERE run_id = {mark}", (run_id,)
    ).one()
    if not row[2]:
        return None
    first, last, rows = float(row[0]), float(row[1]), int(row[2])
    return first, max((last - first) / KEEP_SAMPLES, 1e-9), rows


def thin_samples_chunk(
    *, session: Session, run_id: int, table: str, first: float, width: float, lo: int, hi: int
) -> int:
    """Keep one sample (the first stored) per series and bucket `[lo, hi)` of `width`
    seconds from `first`; return how many rows went."""
    connection = session.connection()
    mark = placeholder(connection)
    series = "rank, gpu" if table == "devicesample" else "rank"
    bucket = (
        f"CAST(floor((t - {mark}) / {mark}) AS BIGINT)"
        if connection.dialect.name == "postgresql"
        else f"CAST((t - {mark}) / {mark} AS INTEGER)"
    )
    t_lo, t_hi = first + lo * width, first + hi * width
    last = hi >= KEEP_SAMPLES  # the last chunk takes the run's last sample (t == t_hi) too
    upper = "<=" if last else "<"
    within = f"run_id = {mark} AND t >= {mark} AND t {upper} {mark}"
    deleted = connection.exec_driver_sql(
        f"DELETE FROM {table} WHERE {within} AND id NOT IN ("
        f"SELECT min(id) FROM {table} WHERE {within} GROUP BY {series}, {bucket})",
        (run_id, t_lo, t_hi, run_id, t_lo, t_hi, first, width),
    ).rowcount
    session.commit()
    return int(deleted or 0)


def mark_compacted(*, session: Session, run_id: int) -> Run | None:
    run = session.get(Run, run_id)
    if run is None:
        return None
    run.compacted_at = utc_now()
    session.add(run)
    session.commit()
    session.refresh(run)
    return run


class _Statements:
    """Runs compaction's statements: on PostgreSQL on a connection of their own, beside
    ingest (deleting an ended run's rows blocks no insert); on SQLite through the writer (one
    writer at a time). After each it pauses `PAUSE_RATIO` times as long as the statement
    took, so compaction never takes more than a third of the database's time."""

    def __init__(self, writer: Any, engine: Any) -> None:
        self._writer = writer
        self._engine = engine
        self._own_connection = engine.dialect.name == "postgresql"

    async def run(self, fn: Any, **kwargs: Any) -> Any:
        started = time.monotonic()
        if self._own_connection:
            result = await asyncio.to_thread(self._call, fn, kwargs)
        else:
            result = await self._writer.run(fn, **kwargs)
        await asyncio.sleep((time.monotonic() - started) * PAUSE_RATIO)
        return result

    def _call(self, fn: Any, kwargs: dict[str, Any]) -> Any:
        with Session(self._engine, expire_on_commit=False) as session:
            return fn(session=session, **kwargs)


class NoLongerDue(Exception):
    """The run was pinned, resumed or deleted after it was found due: compaction stops."""


def still_due(session: Session, run_id: int) -> None:
    """Raise NoLongerDue unless the run exists, has ended and is not pinned: checked in the
    transaction of each of compaction's statements (on PostgreSQL with the run's row locked
    until its commit), so a pin or a resume between two chunks stops it."""
    connection = session.connection()
    lock = " FOR UPDATE" if connection.dialect.name == "postgresql" else ""
    row = connection.exec_driver_sql(
        f"SELECT status, pinned FROM run WHERE id = {placeholder(connection)}{lock}", (run_id,)
    ).first()
    if row is None or row[0] == RunStatus.running.value or row[1]:
        raise NoLongerDue(run_id)


def _while_due(fn: Any) -> Any:
    """`fn` (one of compaction's statements), run only while its run is still due."""

    def checked(*, session: Session, run_id: int, **kwargs: Any) -> Any:
        still_due(session, run_id)
        return fn(session=session, run_id=run_id, **kwargs)

    return checked


async def compact_run(writer: Any, engine: Any, run_id: int, usage: DiskUsage) -> Run | None:
    """Reduce one run's raw rows, chunk by chunk; return the run (None when it was pinned,
    resumed or deleted meanwhile: then what is left stays)."""
    statements = _Statements(writer, engine)
    deleted_rows = 0
    try:
        while True:
            steps, chunks = await statements.run(_while_due(delete_step_chunks), run_id=run_id)
            deleted_rows += steps
            if chunks < CHUNKS_PER_DELETE:
                break
        for table in ("devicesample", "hostsample"):
            window = await statements.run(sample_windows, run_id=run_id, table=table)
            if window is None:
                continue
            first, width, rows = window
            if rows <= KEEP_SAMPLES:
                continue
            chunks = max(1, math.ceil(rows / CHUNK_ROWS))
            step = max(1, math.ceil(KEEP_SAMPLES / chunks))
            for lo in range(0, KEEP_SAMPLES, step):
                deleted_rows += await statements.run(
                    _while_due(thin_samples_chunk), run_id=run_id, table=table, first=first,
                    width=width, lo=lo, hi=min(lo + step, KEEP_SAMPLES),
                )  # fmt: skip
        run = await writer.run(_while_due(mark_compacted), run_id=run_id)
    except NoLongerDue:
        usage._raw_by_run.pop(run_id, None)
        log.info("run %s was pinned, resumed or deleted: compaction stopped", run_id)
        return None
    usage.compacted_runs += 1
    usage.compacted_rows += deleted_rows
    usage._raw_by_run.pop(run_id, None)
    log.info("run %s compacted: %d raw rows reduced to rollups", run_id, deleted_rows)
    return run


def measure(*, session: Session, data_dir: Path, usage: DiskUsage) -> None:
    """Refresh the disk figures."""
    connection = session.connection()
    usage.database_bytes = database_bytes(connection)
    usage.profiles_bytes = directory_bytes(data_dir / "profiles")
    usage.free_bytes, usage.total_bytes = disk_space(data_dir)
    usage.database_dir, usage.database_disk = database_directory(connection)


async def retention_pass(*, writer: Any, engine: Any, settings: Any, usage: DiskUsage) -> list[int]:
    """One pass: measure, then compact every due run; return the compacted run ids. The
    reads run in a thread of their own (never on the event loop), the deletes in the writer."""

    def read() -> list[int]:
        with Session(engine) as session:
            measure(session=session, data_dir=settings.data_dir, usage=usage)
            return due_runs(
                session=session,
                max_age_s=settings.retention_time_s,
                max_raw_bytes=settings.retention_size_bytes,
                usage=usage,
            )

    due = await asyncio.to_thread(read)
    for run_id in due:
        await compact_run(writer, engine, run_id, usage)
    if due:
        await asyncio.to_thread(read)
    return due


async def retention_loop(*, writer: Any, engine: Any, settings: Any, usage: DiskUsage) -> None:
    """The `stoker-retention` lifespan task: a pass every `retention_interval_s`."""
    while True:
        started = time.monotonic()
        try:
            await retention_pass(writer=writer, engine=engine, settings=settings, usage=usage)
        except Exception:
            log.exception("retention pass failed; retrying at the next interval")
        elapsed = time.monotonic() - started
        await asyncio.sleep(max(settings.retention_interval_s - elapsed, 0.1))
