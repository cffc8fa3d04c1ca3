"""Writes from agents: open or resume a run, store batches exactly once, end a run.

Every function runs inside one transaction; a batch's rows and its seq cursor are committed
together, so an acknowledged batch is durable and a replayed one is recognised. Rows go in
through the driver's `executemany` (no per-row ORM work): this is the ingest hot path.
"""

from bisect import bisect_left
from collections.abc import Sequence
from itertools import repeat
from typing import Any

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
ROLLUP_WIDTHS = (64, 4096)


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


def store_batch(*, session: Session, run_id: int, stream: str, rank: int, batch: Batch) -> bool:
    """Store one batch unless its seq is already stored. Returns whether rows were written."""
    cursor = _cursor(session=session, run_id=run_id, stream=stream)
    if cursor is not None and batch.seq <= cursor.last_seq:
        return False
    if cursor is None:
        cursor = IngestCursor(run_id=run_id, stream=stream)
    cursor.last_seq = batch.seq
    session.add(cursor)
    run = session.get(Run, run_id)
    assert run is not None
    connection = session.connection()
    stats = run.stats
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
        stats = add_agent_counters(stats, stream=stream, counters=batch.agent.model_dump())
    run.stats = stats
    run.summary = summarize(stats).model_dump()
    run.last_seen_at = utc_now()
    session.add(run)
    session.commit()
    return True


def _placeholder(connection: Connection) -> str:
    return "?" if connection.dialect.paramstyle == "qmark" else "%s"


def _insert(
    connection: Connection, table: str, columns: _Columns, *, run_id: int, rank: int
) -> None:
    """Insert a columnar section as rows: one driver-level executemany of plain tuples."""
    names = [name for name, value in columns.__dict__.items() if value is not None]
    values = [getattr(columns, name) for name in names]
    n = len(values[0])
    rows = list(zip(repeat(run_id, n), repeat(rank, n), *values, strict=True))
    mark = _placeholder(connection)
    sql = (
        f"INSERT INTO {table} (run_id, rank, {', '.join(names)}) "
        f"VALUES ({', '.join([mark] * (len(names) + 2))})"
    )
    connection.exec_driver_sql(sql, rows)


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
                min(step[i:j]),
                min(t[i:j]),
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
        "INSERT INTO steprollup (run_id, rank, width, bucket, n, step_min, t_min, dur_sum, "
        f"dur_min, dur_max, wait_sum, wait_n) VALUES ({', '.join([mark] * 12)}) "
        "ON CONFLICT (run_id, rank, width, bucket) DO UPDATE SET "
        "n = steprollup.n + excluded.n, "
        f"step_min = {lo}(steprollup.step_min, excluded.step_min), "
        f"t_min = {lo}(steprollup.t_min, excluded.t_min), "
        "dur_sum = steprollup.dur_sum + excluded.dur_sum, "
        f"dur_min = {lo}(steprollup.dur_min, excluded.dur_min), "
        f"dur_max = {hi}(steprollup.dur_max, excluded.dur_max), "
        "wait_sum = steprollup.wait_sum + excluded.wait_sum, "
        "wait_n = steprollup.wait_n + excluded.wait_n",
        rows,
    )


def _combine(a: list[Any], b: list[Any]) -> list[Any]:
    return [
        a[0] + b[0], min(a[1], b[1]), min(a[2], b[2]), a[3] + b[3],
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
