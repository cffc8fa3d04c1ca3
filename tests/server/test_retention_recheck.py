"""Compaction checks, in each of its statements, that its run is still due (issue 39): a run
found due, then pinned or resumed before compaction reaches it (or between two of its
chunks), keeps its raw rows. On both databases."""

from pathlib import Path

import pytest
from sqlmodel import Session

from stoker_server.core.db import make_engine
from stoker_server.core.models import Run, RunStatus
from stoker_server.core.settings import Settings
from stoker_server.ingest import retention
from stoker_server.ingest.agent_writes import end_run, open_run, store_batch
from stoker_server.ingest.protocol import Batch, Hello
from tests.conftest import DATABASES
from tests.harness.support import run_coroutine

pytestmark = pytest.mark.parametrize("database", DATABASES, indirect=True)


class _Writer:
    """The server writer's `run`, in this process."""

    def __init__(self, engine: object) -> None:
        self.engine = engine

    async def run(self, fn, **kwargs):  # type: ignore[no-untyped-def]
        with Session(self.engine, expire_on_commit=False) as session:
            return fn(session=session, **kwargs)


def _ended_run(engine: object, key: str, steps: int = 3000) -> int:
    with Session(engine, expire_on_commit=False) as session:  # type: ignore[arg-type]
        run, _ = open_run(session=session, hello=Hello(type="hello", protocol=1, run_key=key))
        assert run.id is not None
        batch = Batch.model_validate({
            "type": "batch", "seq": 1,
            "steps": {"step": list(range(steps)), "t": [1.7e9 + s for s in range(steps)],
                      "dur": [0.01] * steps},
        })  # fmt: skip
        store_batch(session=session, run_id=run.id, stream="h:0", rank=0, batch=batch)
        end_run(session=session, run_id=run.id, status=RunStatus.finished)
        return run.id


def _raw_steps(engine: object, run_id: int) -> int:
    with Session(engine) as session:  # type: ignore[arg-type]
        counted = session.connection().exec_driver_sql(
            f"SELECT coalesce(sum(n), 0) FROM stepchunk WHERE run_id = {run_id}"
        )
        return int(counted.scalar() or 0)


@pytest.mark.parametrize("change", ["pinned", "resumed"])
def test_a_run_pinned_or_resumed_after_it_was_found_due_keeps_its_raw_rows(
    tmp_path: Path, database: str, change: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(retention, "PAUSE_RATIO", 0.0)
    engine = make_engine(Settings(data_dir=tmp_path, database_url=database))
    try:
        run_id = _ended_run(engine, f"recheck-{change}-run")
        usage = retention.DiskUsage()
        with Session(engine) as session:  # due: old enough for a 0 s retention
            due = retention.due_runs(session=session, max_age_s=1e-9, max_raw_bytes=0, usage=usage)
        assert run_id in due
        with Session(engine) as session:  # then the user pins it, or its agent comes back
            run = session.get(Run, run_id)
            assert run is not None
            if change == "pinned":
                run.pinned = True
            else:
                run.status = RunStatus.running
            session.add(run)
            session.commit()
        before = _raw_steps(engine, run_id)
        assert before == 3000
        compacted = run_coroutine(retention.compact_run(_Writer(engine), engine, run_id, usage))
        assert compacted is None
        assert _raw_steps(engine, run_id) == before
        with Session(engine) as session:
            stored = session.get(Run, run_id)
            assert stored is not None and stored.compacted_at is None
        # And an unchanged due run is compacted as before.
        other = _ended_run(engine, f"recheck-{change}-other")
        done = run_coroutine(retention.compact_run(_Writer(engine), engine, other, usage))
        assert done is not None and done.compacted_at is not None
        assert _raw_steps(engine, other) == 0
    finally:
        engine.dispose()
