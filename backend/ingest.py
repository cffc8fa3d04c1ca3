"""Writes from agents: open or resume a run, store batches exactly once, end a run.

Every function runs inside one transaction; a batch's rows and its seq cursor are committed
together, so an acknowledged batch is durable and a replayed one is recognised.
"""

from sqlalchemy import insert
from sqlmodel import Session, select

from backend.models import IngestCursor, Run, RunStatus, Step, utc_now
from backend.protocol import Batch, Hello
from backend.summary import add_steps


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
        waits = steps.waits()
        sizes = steps.batch_sizes()
        rows = [
            {
                "run_id": run_id,
                "rank": rank,
                "step": steps.step[i],
                "t": steps.t[i],
                "dur": steps.dur[i],
                "wait": waits[i],
                "batch_size": sizes[i],
            }
            for i in range(len(steps))
        ]
        session.execute(insert(Step), rows)
        run.stats = add_steps(
            run.stats, steps=steps.step, t=steps.t, dur=steps.dur, wait=waits, batch_size=sizes
        )
    run.last_seen_at = utc_now()
    session.add(run)
    session.commit()
    return True


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
