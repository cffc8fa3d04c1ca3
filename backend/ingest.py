"""Writes from agents: open or resume a run, store batches exactly once, end a run.

Every function runs inside one transaction; a batch's rows and its seq cursor are committed
together, so an acknowledged batch is durable and a replayed one is recognised.
"""

from sqlalchemy import insert
from sqlmodel import Session, select

from backend.models import (
    DeviceSample,
    HostSample,
    IngestCursor,
    Metric,
    Run,
    RunStatus,
    Step,
    utc_now,
)
from backend.protocol import Batch, Hello, _Columns
from backend.summary import add_agent_counters, add_device_samples, add_metrics, add_steps


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
    steps = batch.steps
    if steps is not None and len(steps):
        _insert(session, Step, steps, run_id=run_id, rank=rank)
        run.stats = add_steps(
            run.stats,
            steps=steps.step,
            t=steps.t,
            dur=steps.dur,
            wait=steps.column("wait"),
            batch_size=steps.column("batch_size"),
        )
    if batch.metrics is not None and len(batch.metrics):
        _insert(session, Metric, batch.metrics, run_id=run_id, rank=rank)
        run.stats = add_metrics(run.stats, values=batch.metrics.value)
    if batch.device is not None and len(batch.device):
        _insert(session, DeviceSample, batch.device, run_id=run_id, rank=rank)
        run.stats = add_device_samples(
            run.stats,
            util=batch.device.column("util"),
            mem_used=batch.device.column("mem_used"),
            tf_mem_peak=batch.device.column("tf_mem_peak"),
        )
    if batch.host is not None and len(batch.host):
        _insert(session, HostSample, batch.host, run_id=run_id, rank=rank)
    if batch.agent is not None:
        run.stats = add_agent_counters(run.stats, stream=stream, counters=batch.agent.model_dump())
    run.last_seen_at = utc_now()
    session.add(run)
    session.commit()
    return True


def _insert(session: Session, table: type, columns: _Columns, *, run_id: int, rank: int) -> None:
    """Insert a columnar section as rows (one executemany)."""
    names = [name for name, value in columns.__dict__.items() if value is not None]
    values = [getattr(columns, name) for name in names]
    rows = [
        {"run_id": run_id, "rank": rank, **dict(zip(names, row, strict=True))}
        for row in zip(*values, strict=True)
    ]
    session.execute(insert(table), rows)


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
