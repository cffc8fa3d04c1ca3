"""Writes from agents: open or resume a run, store batches exactly once, end a run.

Every function runs inside one transaction; a batch's rows and its seq cursor are committed
together, so an acknowledged batch is durable and a replayed one is recognised. Rows go in
through the driver's `executemany` on SQLite, and one binary COPY per table for a whole
group of batches on PostgreSQL (no per-row ORM work): this is the ingest hot path.
"""

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from functools import cache
from itertools import repeat
from typing import Any, cast

import numpy as np
from sqlalchemy import BigInteger, Boolean, Float, Integer, bindparam, update
from sqlalchemy import select as sa_select
from sqlalchemy.engine import Connection
from sqlmodel import Session, SQLModel, col, select

from stoker_server.core.db import placeholder
from stoker_server.core.models import IngestCursor, Run, RunStatus, utc_now
from stoker_server.ingest.copy_binary import SIGNATURE, TRAILER, encodable, encode_rows
from stoker_server.ingest.pipeline_store import store_pipeline_reads
from stoker_server.ingest.protocol import Batch, Columns, EpochColumns, Hello
from stoker_server.ingest.summary import (
    GPM_SUMMARY_FIELDS,
    add_agent_counters,
    add_device_samples,
    add_metrics,
    add_steps,
    add_worker_steps,
    epoch_metric_summary,
    gpu_count,
    metric_goal,
    set_unsent_steps,
    set_worker_gpus,
    stored_summary,
)
from stoker_server.service.lifecycle import end_worker, job_status, join_worker

# Step rollup tiers (steps per bucket); see core.models.StepRollup and api.queries.step_series.
ROLLUP_WIDTHS = (16, 64, 256, 1024, 4096, 16384)


def open_run(*, session: Session, hello: Hello) -> tuple[Run, int]:
    """Create the run named by `hello.run_key`, or join it (another worker of the job, in any
    order) or resume it (the same worker reconnecting or restarted); return it and the last
    seq stored from this worker's stream."""
    run = session.exec(select(Run).where(Run.run_key == hello.run_key)).first()
    now = utc_now()
    if run is None:
        run = Run(
            run_key=hello.run_key,
            name=hello.name or hello.run_key[:12],
            project=hello.project or "default",
            tags=hello.tags,
            config=hello.config,
            environment=hello.environment,
            started_at=now,
            summary=stored_summary({}),
        )
    else:
        run.status = RunStatus.running
        run.ended_at = None
        if hello.environment and not run.environment:
            run.environment = hello.environment
    run.stats = join_worker(run.stats, rank=hello.rank, host=hello.host, pid=hello.pid)
    run.stats = set_worker_gpus(run.stats, rank=hello.rank, gpus=gpu_count(hello.environment))
    run.summary = stored_summary(run.stats)
    run.last_seen_at = now
    session.add(run)
    session.commit()
    session.refresh(run)
    assert run.id is not None
    cursor = _cursor(session=session, run_id=run.id, stream=hello.stream)
    return run, cursor.last_seq if cursor else 0


def _cursor(*, session: Session, run_id: int, stream: str) -> IngestCursor | None:
    query = select(IngestCursor).where(IngestCursor.run_id == run_id, IngestCursor.stream == stream)
    return session.exec(query).first()


# The run's fields a live update needs after a batch (the rest does not change with batches).
BATCH_RUN_FIELDS = ("name", "tags", "notes", "status", "summary", "last_seen_at")


@dataclass
class BatchJob:
    """One agent batch waiting for the writer."""

    run_id: int
    stream: str
    rank: int
    batch: Batch


def store_batch(
    *, session: Session, run_id: int, stream: str, rank: int, batch: Batch
) -> dict[str, Any] | None:
    """Store one batch unless its seq is already stored (see `store_batches`)."""
    return store_batches(session=session, jobs=[BatchJob(run_id, stream, rank, batch)])[0]


# Built once: SQLAlchemy caches their compiled form, and building an expression per batch
# cost more than executing it.
_RUN_STATE = sa_select(
    col(Run.stats), col(Run.name), col(Run.tags), col(Run.notes), col(Run.status)
).where(col(Run.id) == bindparam("run_id"))
_RUN_UPDATE = (
    update(Run)
    .where(col(Run.id) == bindparam("run_id"))
    .values(stats=bindparam("stats"), summary=bindparam("summary"), last_seen_at=bindparam("now"))
)


def store_batches(*, session: Session, jobs: Sequence[BatchJob]) -> list[dict[str, Any] | None]:
    """Store several batches in one transaction (the writer's group commit).

    A batch whose seq is already stored for its stream is skipped (None); for the others the
    result is the run's fresh `BATCH_RUN_FIELDS`. Each run's row and each stream's cursor is
    read and written once per group, and rows go in through driver-level executemany: no ORM
    objects on this path.
    """
    connection = session.connection()
    mark = placeholder(connection)
    copies: Copies = {}  # PostgreSQL: the group's rows per table, one COPY each
    rollups: list[RollupPart] = []  # the group's steps, for one rollup statement
    cursors: dict[tuple[int, str], int] = {}
    runs: dict[int, dict[str, Any]] = {}
    results: list[dict[str, Any] | None] = []
    for job in jobs:
        key = (job.run_id, job.stream)
        if key not in cursors:
            cursors[key] = (
                connection.exec_driver_sql(
                    f"SELECT last_seq FROM ingestcursor WHERE run_id = {mark} AND stream = {mark}",
                    key,
                ).scalar()
                or 0
            )
        if job.batch.seq <= cursors[key]:
            results.append(None)
            continue
        cursors[key] = job.batch.seq
        run = runs.get(job.run_id)
        if run is None:
            row = connection.execute(_RUN_STATE, {"run_id": job.run_id}).one()
            run = runs[job.run_id] = {
                "stats": row.stats, "name": row.name, "tags": row.tags, "notes": row.notes,
                "status": row.status, "dirty_streams": set(),
            }  # fmt: skip
        run["stats"] = _store_rows(connection, job, run["stats"], copies, rollups)
        run["dirty_streams"].add(job.stream)
        results.append(run)
    _copy_all(connection, copies)
    _update_rollups(connection, rollups)
    now = utc_now()
    for run_id, run in runs.items():
        run["summary"] = stored_summary(run["stats"])
        run["last_seen_at"] = now
        connection.execute(
            _RUN_UPDATE,
            {"run_id": run_id, "stats": run["stats"], "summary": run["summary"], "now": now},
        )
        for stream in run["dirty_streams"]:
            connection.exec_driver_sql(
                "INSERT INTO ingestcursor (run_id, stream, last_seq) "
                f"VALUES ({mark}, {mark}, {mark}) "
                "ON CONFLICT (run_id, stream) DO UPDATE SET last_seq = excluded.last_seq",
                (run_id, stream, cursors[(run_id, stream)]),
            )
    session.commit()
    return [None if r is None else {k: r[k] for k in BATCH_RUN_FIELDS} for r in results]


def _store_rows(
    connection: Connection, job: BatchJob, stats: dict[str, Any], copies: "Copies",
    rollups: "list[RollupPart]",
) -> dict[str, Any]:  # fmt: skip
    """Insert one batch's rows (on PostgreSQL, add them to `copies`; its steps to `rollups`)
    and return the run's statistics updated with them."""
    batch, run_id, rank = job.batch, job.run_id, job.rank
    steps = batch.steps
    if steps is not None and len(steps):
        _insert(connection, "step", steps, run_id=run_id, rank=rank, copies=copies)
        # One numpy copy of each column serves the rollups and the statistics.
        step = np.asarray(steps.step, dtype=np.int64)
        t = np.asarray(steps.t, dtype=np.float64)
        dur = np.asarray(steps.dur, dtype=np.float64)
        wait = np.asarray(steps.column("wait"), dtype=np.float64)  # unknown: NaN
        batch_size = np.asarray(steps.column("batch_size"), dtype=np.float64)
        rollups.append((run_id, rank, step, t, dur, wait))
        stats = add_steps(stats, steps=step, t=t, dur=dur, wait=wait, batch_size=batch_size)
        stats = add_worker_steps(
            stats, rank=rank, steps=step, t=t, dur=dur, wait=wait, batch_size=batch_size
        )
    if batch.metrics is not None and len(batch.metrics):
        _insert(connection, "metric", batch.metrics, run_id=run_id, rank=rank, copies=copies)
        stats = add_metrics(stats, values=batch.metrics.value)
    if batch.device is not None and len(batch.device):
        _insert(connection, "devicesample", batch.device, run_id=run_id, rank=rank, copies=copies)
        stats = add_device_samples(
            stats,
            util=batch.device.column("util"),
            mem_used=batch.device.column("mem_used"),
            tf_mem_peak=batch.device.column("tf_mem_peak"),
            rank=rank,
            gpu=batch.device.gpu,
            gpm={name: batch.device.column(name) for name in GPM_SUMMARY_FIELDS},
            energy_j=batch.device.column("energy_j"),
            energy_integrated=batch.device.column("energy_integrated"),
        )
    if batch.host is not None and len(batch.host):
        _insert(connection, "hostsample", batch.host, run_id=run_id, rank=rank, copies=copies)
    if batch.epochs is not None and len(batch.epochs):
        stats = _store_epochs(connection, run_id=run_id, epochs=batch.epochs, stats=stats)
    if batch.pipeline is not None and len(batch.pipeline):
        store_pipeline_reads(connection, run_id=run_id, rank=rank, reads=batch.pipeline)
    if batch.agent is not None:
        stats = add_agent_counters(stats, stream=job.stream, counters=batch.agent.model_dump())
    return stats


# A run's summary lists at most this many epoch metrics (the rows are all stored).
MAX_SUMMARY_EPOCH_METRICS = 200


def _store_epochs(
    connection: Connection, *, run_id: int, epochs: EpochColumns, stats: dict[str, Any]
) -> dict[str, Any]:
    """Store epoch rows (an epoch reported again replaces the stored one: a resumed run) and
    return `stats` with the last and best value of each metric the batch touched."""
    mark = placeholder(connection)
    _executemany(
        connection,
        "INSERT INTO epochmetric (run_id, epoch, step, t, name, value) "
        f"VALUES ({', '.join([mark] * 6)}) ON CONFLICT (run_id, name, epoch) DO UPDATE SET "
        "step = excluded.step, t = excluded.t, value = excluded.value",
        zip(repeat(run_id), epochs.epoch, epochs.step, epochs.t, epochs.name, epochs.value),
    )
    summaries = dict(stats.get("epoch_metrics", {}))
    room = MAX_SUMMARY_EPOCH_METRICS - len(summaries)
    touched = [n for n in dict.fromkeys(epochs.name) if n in summaries]
    touched += [n for n in dict.fromkeys(epochs.name) if n not in summaries][: max(room, 0)]
    if not touched:
        return stats
    config = (
        connection.execute(sa_select(col(Run.config)).where(col(Run.id) == run_id)).scalar() or {}
    )
    for name in touched:
        rows = connection.exec_driver_sql(
            "SELECT epoch, value FROM epochmetric "
            f"WHERE run_id = {mark} AND name = {mark} ORDER BY epoch",
            (run_id, name),
        ).all()
        summaries[name] = epoch_metric_summary(
            [(int(e), v) for e, v in rows], goal=metric_goal(name, config)
        )
    return {**stats, "epoch_metrics": summaries}


# PostgreSQL: sections waiting for their COPY (run id, rank, column values), by table and
# the columns they carry.
Copies = dict[tuple[str, tuple[str, ...]], list[tuple[int, int, list[list[Any]]]]]


def _insert(
    connection: Connection, table: str, columns: Columns, *, run_id: int, rank: int,
    copies: Copies,
) -> None:  # fmt: skip
    """Insert a columnar section as rows: one driver-level executemany of plain tuples, or on
    PostgreSQL rows kept for the group's COPY of the table (see `_copy_all`)."""
    names = [name for name, value in columns.__dict__.items() if value is not None]
    values = [getattr(columns, name) for name in names]
    if connection.dialect.name == "postgresql":
        copies.setdefault((table, tuple(names)), []).append((run_id, rank, values))
        return
    n = len(values[0])
    rows = zip(repeat(run_id, n), repeat(rank, n), *values, strict=True)
    mark = placeholder(connection)
    sql = (
        f"INSERT INTO {table} (run_id, rank, {', '.join(names)}) "
        f"VALUES ({', '.join([mark] * (len(names) + 2))})"
    )
    _executemany(connection, sql, rows)


def _copy_all(connection: Connection, copies: Copies) -> None:
    """One binary COPY per table (and set of columns) for a whole group of batches: no text
    to format or parse, no statement per row or per batch. Sections of fixed-width columns
    (steps, samples) are encoded whole by numpy (copy_binary); the others row by row."""
    for (table, names), parts in copies.items():
        types = _copy_types(table, names)
        cursor = connection.connection.cursor()
        try:
            with cursor.copy(
                f"COPY {table} (run_id, rank, {', '.join(names)}) FROM STDIN (FORMAT BINARY)"
            ) as copy:
                if encodable(types):
                    copy.write(SIGNATURE)
                    for run_id, rank, values in parts:
                        copy.write(encode_rows([run_id, rank, *values], types))
                    copy.write(TRAILER)
                    continue
                copy.set_types(types)
                for run_id, rank, values in parts:
                    n = len(values[0])
                    for row in zip(repeat(run_id, n), repeat(rank, n), *values, strict=True):
                        copy.write_row(row)
        finally:
            cursor.close()


@cache
def _copy_types(table: str, names: tuple[str, ...]) -> list[str]:
    """PostgreSQL type names of `table`'s columns run_id, rank and `names` (binary COPY sends
    each value in its column's own binary form, so it must know them)."""
    columns = SQLModel.metadata.tables[table].columns
    return [_pg_type(columns[name].type) for name in ("run_id", "rank", *names)]


def _pg_type(column_type: Any) -> str:
    if isinstance(column_type, Boolean):
        return "bool"
    if isinstance(column_type, BigInteger):
        return "int8"
    if isinstance(column_type, Integer):
        return "int4"
    if isinstance(column_type, Float):
        return "float8"
    return "text"


def _executemany(connection: Connection, sql: str, rows: Iterable[Sequence[Any]]) -> None:
    """Run `sql` once per row on the DBAPI cursor of the same connection (same transaction).

    SQLAlchemy's own executemany inspects every parameter set; on the ingest path that cost
    more than the insert.
    """
    cursor = connection.connection.cursor()
    try:
        # sqlite3 and psycopg take any iterable of rows (the callers' are lazy zips); the
        # DBAPI protocol's type asks for a sequence.
        cursor.executemany(sql, cast("Sequence[Sequence[Any]]", rows))
    finally:
        cursor.close()


# A group's steps for its rollups: (run id, rank, step, t, dur, wait) of each batch.
RollupPart = tuple[int, int, np.ndarray, np.ndarray, np.ndarray, np.ndarray]


def _rollup_columns(parts: Sequence[RollupPart]) -> list[np.ndarray]:
    """A group's steps aggregated into every rollup tier: the columns of `_ROLLUP_COLUMNS`,
    one row per (run, rank, width, bucket).

    The steps are sorted by (run, rank, step), so each bucket is one run of rows; each tier is
    reduced from the one below (every width is a multiple of the previous one). A group holds
    each key once, as one statement's upsert needs; steps sent twice (a restarted worker counts
    from 0 again) add to their bucket, as they did batch by batch.
    """
    run = np.concatenate([np.full(len(p[2]), p[0], dtype=np.int64) for p in parts])
    rank = np.concatenate([np.full(len(p[2]), p[1], dtype=np.int64) for p in parts])
    step, t, dur, wait = (np.concatenate([p[i] for p in parts]) for i in range(2, 6))
    order = np.lexsort((step, rank, run))
    run, rank, step, t, dur, wait = (a[order] for a in (run, rank, step, t, dur, wait))
    known = ~np.isnan(wait)
    # Per row of the tier below: n, step_max, t_max, dur_sum, dur_min, dur_max, wait_sum,
    # wait_n (for the raw steps, each step's own values).
    values = [
        np.ones(len(step), dtype=np.int64), step, t, dur, dur, dur,
        np.where(known, wait, 0.0), known.astype(np.int64),
    ]  # fmt: skip
    reducers = (np.add, np.maximum, np.maximum, np.add, np.minimum, np.maximum, np.add, np.add)
    bucket, below = step, 1
    out: list[list[np.ndarray]] = [[] for _ in range(12)]
    for width in ROLLUP_WIDTHS:
        bucket = bucket // (width // below)
        below = width
        change = (bucket[1:] != bucket[:-1]) | (rank[1:] != rank[:-1]) | (run[1:] != run[:-1])
        starts = np.concatenate(([0], np.flatnonzero(change) + 1))
        run, rank, bucket = run[starts], rank[starts], bucket[starts]
        values = [r.reduceat(v, starts) for r, v in zip(reducers, values, strict=True)]
        for column, array in zip(
            out, [run, rank, np.full(len(starts), width), bucket, *values], strict=True
        ):
            column.append(array)
    return [np.concatenate(column) for column in out]


def _update_rollups(connection: Connection, parts: Sequence[RollupPart]) -> None:
    """Fold a group's steps into every rollup tier (insert or add to existing buckets) with
    one statement."""
    if not parts:
        return
    columns = _rollup_columns(parts)
    postgres = connection.dialect.name == "postgresql"
    lo, hi = ("LEAST", "GREATEST") if postgres else ("min", "max")
    upsert = (
        "ON CONFLICT (run_id, rank, width, bucket) DO UPDATE SET "
        "n = steprollup.n + excluded.n, "
        f"step_max = {hi}(steprollup.step_max, excluded.step_max), "
        f"t_max = {hi}(steprollup.t_max, excluded.t_max), "
        "dur_sum = steprollup.dur_sum + excluded.dur_sum, "
        f"dur_min = {lo}(steprollup.dur_min, excluded.dur_min), "
        f"dur_max = {hi}(steprollup.dur_max, excluded.dur_max), "
        "wait_sum = steprollup.wait_sum + excluded.wait_sum, "
        "wait_n = steprollup.wait_n + excluded.wait_n"
    )
    if postgres:
        # One statement over arrays. Each column goes as one comma-separated text: psycopg
        # adapts a list value by value in Python, which cost more than the statement.
        _executemany(
            connection,
            f"INSERT INTO {_ROLLUP_COLUMNS} SELECT * FROM unnest({_ROLLUP_ARRAYS}) {upsert}",
            [[",".join(map(str, column.tolist())) for column in columns]],
        )
        return
    mark = placeholder(connection)
    _executemany(
        connection,
        f"INSERT INTO {_ROLLUP_COLUMNS} VALUES ({', '.join([mark] * 12)}) {upsert}",
        zip(*(column.tolist() for column in columns), strict=True),
    )


_ROLLUP_COLUMNS = (
    "steprollup (run_id, rank, width, bucket, n, step_max, t_max, dur_sum, dur_min, dur_max, "
    "wait_sum, wait_n)"
)
_ROLLUP_ARRAYS = ", ".join(
    f"string_to_array(%s, ',')::{t}[]"
    for t in ("int4", "int4", "int4", "int8", "int4", "int8") + ("float8",) * 5 + ("int4",)
)


def end_run(
    *, session: Session, run_id: int, status: RunStatus, stream: str = "", unsent_steps: int = 0,
    rank: int | None = None,
) -> Run:  # fmt: skip
    """Mark worker `rank` of a run ended with `status` (the whole run when no rank is given);
    `unsent_steps` of its `stream` are still to come. The run ends with its last worker."""
    run = session.get(Run, run_id)
    assert run is not None
    stats = run.stats
    if unsent_steps or stats.get("unsent_steps"):
        stats = set_unsent_steps(stats, stream=stream, steps=unsent_steps)
    if rank is not None:
        stats = end_worker(stats, rank=rank, status=status)
    run.stats = stats
    run.summary = stored_summary(stats)
    run.status = (job_status(stats) if rank is not None else None) or status
    run.last_seen_at = utc_now()
    run.ended_at = None if run.status == RunStatus.running else run.last_seen_at
    session.add(run)
    session.commit()
    session.refresh(run)
    return run
