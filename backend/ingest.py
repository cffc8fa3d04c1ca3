"""Writes from agents: open or resume a run, store batches exactly once, end a run.

Every function runs inside one transaction; a batch's rows and its seq cursor are committed
together, so an acknowledged batch is durable and a replayed one is recognised. Rows go in
through the driver's `executemany` (no per-row ORM work): this is the ingest hot path.
"""

from bisect import bisect_left
from collections.abc import Sequence
from dataclasses import dataclass
from itertools import repeat
from typing import Any

from sqlalchemy import select as sa_select
from sqlalchemy import update
from sqlalchemy.engine import Connection
from sqlmodel import Session, select

from backend.models import IngestCursor, Run, RunStatus, utc_now
from backend.protocol import Batch, Hello, _Columns
from backend.summary import (
    add_agent_counters,
    add_device_samples,
    add_metrics,
    add_steps,
    summarize,
)

# Step rollup tiers (steps per bucket); see models.StepRollup and queries.step_series.
ROLLUP_WIDTHS = (16, 64, 256, 1024, 4096, 16384)


def open_run(*, session: Session, hello: Hello) -> tuple[Run, int]:
    """Create the run named by `hello.run_key`, or resume it; return it and its last stored seq."""
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
            summary=summarize({}).model_dump(),
        )
    else:
        run.status = RunStatus.running
        run.ended_at = None
        if hello.environment and not run.environment:
            run.environment = hello.environment
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


def store_batches(*, session: Session, jobs: Sequence[BatchJob]) -> list[dict[str, Any] | None]:
    """Store several batches in one transaction (the writer's group commit).

    A batch whose seq is already stored for its stream is skipped (None); for the others the
    result is the run's fresh `BATCH_RUN_FIELDS`. Each run's row and each stream's cursor is
    read and written once per group, and rows go in through driver-level executemany: no ORM
    objects on this path.
    """
    connection = session.connection()
    mark = _placeholder(connection)
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
            row = session.execute(
                sa_select(Run.stats, Run.name, Run.tags, Run.notes, Run.status).where(
                    Run.id == job.run_id  # type: ignore[arg-type]
                )
            ).one()
            run = runs[job.run_id] = {
                "stats": row.stats, "name": row.name, "tags": row.tags, "notes": row.notes,
                "status": row.status, "dirty_streams": set(),
            }  # fmt: skip
        run["stats"] = _store_rows(connection, job, run["stats"])
        run["dirty_streams"].add(job.stream)
        results.append(run)
    now = utc_now()
    for run_id, run in runs.items():
        run["summary"] = summarize(run["stats"]).model_dump()
        run["last_seen_at"] = now
        session.execute(
            update(Run)
            .where(Run.id == run_id)  # type: ignore[arg-type]
            .values(stats=run["stats"], summary=run["summary"], last_seen_at=now)
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


def _store_rows(connection: Connection, job: BatchJob, stats: dict[str, Any]) -> dict[str, Any]:
    """Insert one batch's rows and return the run's statistics updated with them."""
    batch, run_id, rank = job.batch, job.run_id, job.rank
    steps = batch.steps
    if steps is not None and len(steps):
        _insert(connection, "step", steps, run_id=run_id, rank=rank)
        wait = steps.column("wait")
        _update_rollups(connection, run_id=run_id, rank=rank, steps=steps, wait=wait)
        stats = add_steps(
            stats,
            steps=steps.step,
            t=steps.t,
            dur=steps.dur,
            wait=wait,
            batch_size=steps.column("batch_size"),
        )
    if batch.metrics is not None and len(batch.metrics):
        _insert(connection, "metric", batch.metrics, run_id=run_id, rank=rank)
        stats = add_metrics(stats, values=batch.metrics.value)
    if batch.device is not None and len(batch.device):
        _insert(connection, "devicesample", batch.device, run_id=run_id, rank=rank)
        stats = add_device_samples(
            stats,
            util=batch.device.column("util"),
            mem_used=batch.device.column("mem_used"),
            tf_mem_peak=batch.device.column("tf_mem_peak"),
        )
    if batch.host is not None and len(batch.host):
        _insert(connection, "hostsample", batch.host, run_id=run_id, rank=rank)
    if batch.agent is not None:
        stats = add_agent_counters(stats, stream=job.stream, counters=batch.agent.model_dump())
    return stats


def _placeholder(connection: Connection) -> str:
    return "?" if connection.dialect.paramstyle == "qmark" else "%s"


def _insert(
    connection: Connection, table: str, columns: _Columns, *, run_id: int, rank: int
) -> None:
    """Insert a columnar section as rows: one driver-level executemany of plain tuples."""
    names = [name for name, value in columns.__dict__.items() if value is not None]
    values = [getattr(columns, name) for name in names]
    n = len(values[0])
    rows = zip(repeat(run_id, n), repeat(rank, n), *values, strict=True)
    mark = _placeholder(connection)
    sql = (
        f"INSERT INTO {table} (run_id, rank, {', '.join(names)}) "
        f"VALUES ({', '.join([mark] * (len(names) + 2))})"
    )
    # The DBAPI cursor of the same connection (same transaction) takes the row iterator as is.
    cursor = connection.connection.cursor()
    try:
        if connection.dialect.name == "postgresql":
            # COPY streams the rows in one command: far faster than row-by-row INSERTs.
            with cursor.copy(f"COPY {table} (run_id, rank, {', '.join(names)}) FROM STDIN") as copy:
                for row in rows:
                    copy.write_row(row)
        else:
            cursor.executemany(sql, rows)
    finally:
        cursor.close()


def _segments(steps: Sequence[int], width: int) -> list[tuple[int, int, int]]:
    """(bucket, start, end) index ranges of `steps` that fall in one bucket of `width`."""
    if list(steps) == sorted(steps):
        out = []
        start, n = 0, len(steps)
        while start < n:
            bucket = steps[start] // width
            end = bisect_left(steps, (bucket + 1) * width, start)
            out.append((bucket, start, end))
            start = end
        return out
    return [(s // width, i, i + 1) for i, s in enumerate(steps)]


def _update_rollups(
    connection: Connection, *, run_id: int, rank: int, steps: Any, wait: Sequence[float | None]
) -> None:
    """Fold the batch's steps into every rollup tier (insert or add to existing buckets)."""
    step, t, dur = steps.step, steps.t, steps.dur
    rows: list[tuple[Any, ...]] = []
    for width in ROLLUP_WIDTHS:
        merged: dict[int, list[Any]] = {}
        for bucket, i, j in _segments(step, width):
            waits = [w for w in wait[i:j] if w is not None]
            d = dur[i:j]
            part = [
                j - i,
                max(step[i:j]),
                max(t[i:j]),
                sum(d),
                min(d),
                max(d),
                sum(waits),
                len(waits),
            ]
            old = merged.get(bucket)
            merged[bucket] = part if old is None else _combine(old, part)
        rows.extend((run_id, rank, width, bucket, *agg) for bucket, agg in merged.items())
    mark = _placeholder(connection)
    lo, hi = ("min", "max") if connection.dialect.name == "sqlite" else ("LEAST", "GREATEST")
    connection.exec_driver_sql(
        "INSERT INTO steprollup (run_id, rank, width, bucket, n, step_max, t_max, dur_sum, "
        f"dur_min, dur_max, wait_sum, wait_n) VALUES ({', '.join([mark] * 12)}) "
        "ON CONFLICT (run_id, rank, width, bucket) DO UPDATE SET "
        "n = steprollup.n + excluded.n, "
        f"step_max = {hi}(steprollup.step_max, excluded.step_max), "
        f"t_max = {hi}(steprollup.t_max, excluded.t_max), "
        "dur_sum = steprollup.dur_sum + excluded.dur_sum, "
        f"dur_min = {lo}(steprollup.dur_min, excluded.dur_min), "
        f"dur_max = {hi}(steprollup.dur_max, excluded.dur_max), "
        "wait_sum = steprollup.wait_sum + excluded.wait_sum, "
        "wait_n = steprollup.wait_n + excluded.wait_n",
        rows,
    )


def _combine(a: list[Any], b: list[Any]) -> list[Any]:
    return [
        a[0] + b[0], max(a[1], b[1]), max(a[2], b[2]), a[3] + b[3],
        min(a[4], b[4]), max(a[5], b[5]), a[6] + b[6], a[7] + b[7],
    ]  # fmt: skip


def end_run(*, session: Session, run_id: int, status: RunStatus) -> Run:
    """Mark a run ended with `status`."""
    run = session.get(Run, run_id)
    assert run is not None
    run.status = status
    run.ended_at = utc_now()
    run.last_seen_at = run.ended_at
    session.add(run)
    session.commit()
    session.refresh(run)
    return run


def get_run_row(*, session: Session, run_id: int) -> Run | None:
    return session.get(Run, run_id)


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
    "step", "steprollup", "metric", "devicesample", "hostsample", "ingestcursor",
    "runevent", "alert",
)  # fmt: skip


def delete_run(*, session: Session, run_id: int) -> bool:
    """Delete a run and all its rows in one transaction; False when it does not exist."""
    connection = session.connection()
    exists = connection.exec_driver_sql(
        f"SELECT 1 FROM run WHERE id = {_placeholder(connection)}", (run_id,)
    ).first()
    if exists is None:
        return False
    for table in RUN_CHILD_TABLES:
        connection.exec_driver_sql(
            f"DELETE FROM {table} WHERE run_id = {_placeholder(connection)}", (run_id,)
        )
    connection.exec_driver_sql(f"DELETE FROM run WHERE id = {_placeholder(connection)}", (run_id,))
    session.commit()
    return True
