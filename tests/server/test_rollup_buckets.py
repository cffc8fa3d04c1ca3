"""Step rollups are the sums of every step sent, whichever way PostgreSQL takes a group's
rollup rows (COPY for buckets past the last stored one, the upsert for the others): a
worker that restarts from step 0, a second worker, and a batch that continues a bucket, in
one group and across groups, on both databases."""

from pathlib import Path

import pytest
from sqlmodel import Session

from stoker_server.core.db import make_engine
from stoker_server.core.settings import Settings
from stoker_server.ingest.agent_writes import BatchJob, open_run, store_batches
from stoker_server.ingest.protocol import Batch, Hello
from tests.conftest import DATABASES
from tests.harness.rollups import assert_rollups_hold

pytestmark = pytest.mark.parametrize("database", DATABASES, indirect=True)


def _batch(seq: int, first: int, n: int) -> Batch:
    steps = list(range(first, first + n))
    return Batch.model_validate(
        {
            "type": "batch",
            "seq": seq,
            "steps": {
                "step": steps,
                "t": [1.7e9 + s * 0.1 + seq for s in steps],
                "dur": [0.1 + (s % 7) / 1000 + seq / 1e4 for s in steps],
                "wait": [None if s % 5 == 0 else s / 1e5 for s in steps],
            },
        }
    )


def test_rollups_sum_every_step_sent(database: str, tmp_path: Path) -> None:
    engine = make_engine(Settings(data_dir=tmp_path, database_url=database))
    sent: list[tuple[int, int, float, float | None]] = []  # rank, step, dur, wait
    with Session(engine, expire_on_commit=False) as session:
        hellos = [
            Hello(type="hello", protocol=1, run_key="rollup-buckets", host="h", rank=rank)
            for rank in (0, 1)
        ]
        run, _ = open_run(session=session, hello=hellos[0])
        open_run(session=session, hello=hellos[1])
        assert run.id is not None
        groups = [
            [(0, _batch(1, 0, 1000)), (1, _batch(1, 0, 130))],
            # Rank 0 continues bucket 1000 // 16 = 62 and goes on; rank 1 restarts from 0.
            [(0, _batch(2, 1000, 37)), (1, _batch(2, 0, 300))],
            # Rank 0 restarted: steps 0.. again, beside its own later steps in one group.
            [(0, _batch(3, 0, 500)), (0, _batch(4, 1037, 5000))],
        ]
        for group in groups:
            jobs = [BatchJob(run.id, hellos[rank].stream, rank, b) for rank, b in group]
            assert all(r is not None for r in store_batches(session=session, jobs=jobs))
            for rank, b in group:
                steps = b.steps
                assert steps is not None and steps.wait is not None
                sent += zip([rank] * len(steps), steps.step, steps.dur, steps.wait, strict=True)
        assert_rollups_hold(session.connection(), run.id, sent)
    engine.dispose()
