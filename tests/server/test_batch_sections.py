"""A batch carrying every wire section: each section's rows are stored once and its part of
the run's summary is added once, also when the same seq arrives again (on both databases);
and every section of the wire format has a unit that stores it."""

from pathlib import Path

import pytest
from sqlalchemy import text
from sqlmodel import Session

from stoker_server.core.db import make_engine
from stoker_server.core.models import Run
from stoker_server.core.settings import Settings
from stoker_server.ingest.agent_writes import (
    ROLLUP_WIDTHS,
    SECTIONS,
    BatchJob,
    open_run,
    store_batches,
)
from stoker_server.ingest.protocol import Batch, Hello
from tests.conftest import DATABASES

T0 = 1.7e9


def _batch(seq: int) -> Batch:
    return Batch.model_validate(
        {
            "type": "batch",
            "seq": seq,
            "steps": {
                "step": list(range(10)),
                "t": [T0 + s for s in range(10)],
                "dur": [5.0] + [0.1] * 9,  # step 0 (compilation) is not timed
                "wait": [None] + [0.02] * 9,
                "batch_size": [32] * 10,
            },
            "metrics": {"step": [3, 3], "name": ["loss", "acc"], "value": [0.5, float("nan")]},
            "device": {
                "t": [T0, T0 + 5],
                "gpu": [0, 0],
                "util": [40.0, 60.0],
                "mem_used": [2e9, 3e9],
                "energy_j": [100.0, 250.0],
            },
            "host": {"t": [T0], "proc_cpu": [95.0]},
            "epochs": {
                "epoch": [0, 1],
                "step": [5, 10],
                "t": [T0 + 5, T0 + 10],
                "name": ["val_loss", "val_loss"],
                "value": [0.9, 0.7],
            },
            "pipeline": {
                "t": [T0 + 2],
                "source": ["autotune_model"],
                "stages": [[{"position": 0, "kind": "map", "name": "decode"}]],
            },
            "agent": {"dropped_rows": 3, "spooled_rows": 0},
        }
    )


def _count(session: Session, table: str, run_id: int) -> int:
    counted = "coalesce(sum(n), 0)" if table == "stepchunk" else "count(*)"  # steps, not chunks
    sql = text(f"SELECT {counted} FROM {table} WHERE run_id = :r")
    return int(session.connection().execute(sql, {"r": run_id}).scalar_one())


@pytest.mark.parametrize("database", DATABASES, indirect=True)
def test_every_section_is_stored_and_summarised_once(database: str, tmp_path: Path) -> None:
    engine = make_engine(Settings(data_dir=tmp_path, database_url=database))
    with Session(engine, expire_on_commit=False) as session:
        hello = Hello(type="hello", protocol=1, run_key="every-section-run", host="h")
        run, _ = open_run(session=session, hello=hello)
        assert run.id is not None
        job = BatchJob(run.id, hello.stream, 0, _batch(1))
        # The same seq twice in one group, then once more in a later group.
        first = store_batches(session=session, jobs=[job, job])
        assert first[0] is not None and first[1] is None
        assert store_batches(session=session, jobs=[job]) == [None]

        counts = {
            table: _count(session, table, run.id)
            for table in (
                "stepchunk", "metric", "devicesample", "hostsample", "epochmetric", "pipelineread",
                "steprollup",
            )
        }  # fmt: skip
        assert counts == {
            "stepchunk": 10, "metric": 2, "devicesample": 2, "hostsample": 1, "epochmetric": 2,
            "pipelineread": 1, "steprollup": len(ROLLUP_WIDTHS),
        }  # fmt: skip
        rollup_n = session.connection().execute(
            text("SELECT DISTINCT n FROM steprollup WHERE run_id = :r"), {"r": run.id}
        )
        assert rollup_n.scalars().all() == [10]

        session.expire_all()  # store_batches writes the run's row without the ORM
        stored = session.get(Run, run.id)
        assert stored is not None
        summary = stored.summary
        assert summary == first[0]["summary"]
        assert summary["steps"] == 10
        assert summary["input_wait_s"] == pytest.approx(0.18)
        assert summary["samples_per_s"] == pytest.approx(32 * 9 / 0.9)
        assert summary["gpu_util_mean"] == pytest.approx(50.0)
        assert summary["peak_memory_bytes"] == 3e9
        assert summary["energy_j"] == 250.0
        assert summary["nonfinite_metrics"] == 1
        assert summary["dropped_rows"] == 3
        assert summary["epoch_metrics"]["val_loss"] == {
            "last": 0.7, "last_epoch": 1, "best": 0.7, "best_epoch": 1, "goal": "min",
            "directed": True, "epochs": 2,
        }  # fmt: skip
        assert [w["steps"] for w in summary["workers"]] == [10]
        assert stored.stats["agents"] == {
            hello.stream: {"dropped_rows": 3, "spooled_rows": 0, "unreadable_spool_files": 0}
        }
    engine.dispose()


def test_every_wire_section_has_a_unit_that_stores_it() -> None:
    assert list(SECTIONS) == [name for name in Batch.model_fields if name not in ("type", "seq")]


def _steps_batch(seq: int, first: int, n: int) -> Batch:
    steps = list(range(first, first + n))
    return Batch.model_validate(
        {"type": "batch", "seq": seq,
         "steps": {"step": steps, "t": [T0 + s for s in steps], "dur": [0.1] * n}}
    )  # fmt: skip


@pytest.mark.parametrize("database", DATABASES, indirect=True)
def test_a_group_of_many_runs_and_streams_is_stored_once(database: str, tmp_path: Path) -> None:
    """A group's runs and cursors are read and written once each: batches of three runs and
    four streams, replays among them, across two groups; a run deleted meanwhile fails its
    group (the writer then stores the others one by one)."""
    engine = make_engine(Settings(data_dir=tmp_path, database_url=database))
    with Session(engine, expire_on_commit=False) as session:
        hellos = {
            key: Hello(type="hello", protocol=1, run_key=f"group-{name}", host="h", rank=rank)
            for key, name, rank in (("a0", "run-a", 0), ("a1", "run-a", 1), ("b0", "run-b", 0),
                                    ("c0", "run-c", 0))
        }  # fmt: skip
        ids = {key: open_run(session=session, hello=hello)[0].id for key, hello in hellos.items()}

        def job(key: str, seq: int, first: int, n: int) -> BatchJob:
            run_id = ids[key]
            assert run_id is not None
            return BatchJob(
                run_id, hellos[key].stream, hellos[key].rank, _steps_batch(seq, first, n)
            )

        first = store_batches(
            session=session,
            jobs=[
                job("a0", 1, 0, 10),
                job("a1", 1, 0, 7),
                job("b0", 1, 0, 5),
                job("a0", 2, 10, 10),
            ],
        )
        assert [r is not None for r in first] == [True] * 4
        second = store_batches(
            session=session,
            jobs=[job("a0", 2, 10, 10), job("a1", 2, 7, 3), job("c0", 1, 0, 4), job("b0", 1, 0, 5),
                  job("a0", 1, 0, 10)],
        )  # fmt: skip
        assert [r is not None for r in second] == [False, True, True, False, False]
        cursors = (
            session.connection()
            .execute(
                text("SELECT run_id, stream, last_seq FROM ingestcursor ORDER BY run_id, stream")
            )
            .all()
        )
        assert sorted(tuple(c) for c in cursors) == sorted(
            [(ids["a0"], "h:0", 2), (ids["a1"], "h:1", 2), (ids["b0"], "h:0", 1),
             (ids["c0"], "h:0", 1)]
        )  # fmt: skip
        stored = {key: _count(session, "stepchunk", run_id) for key, run_id in ids.items()}
        assert stored == {"a0": 30, "a1": 30, "b0": 5, "c0": 4}  # a0 and a1: one run
        # A run's summary counts its furthest worker's steps: 20 for a (its rank 1 has 10).
        for key, steps in (("a0", 20), ("b0", 5), ("c0", 4)):
            run = session.get(Run, ids[key])
            assert run is not None
            session.refresh(run)
            assert run.summary["steps"] == steps

        with pytest.raises(LookupError, match="does not exist"):
            store_batches(session=session, jobs=[BatchJob(10**6, "h:0", 0, _steps_batch(1, 0, 3))])
        session.rollback()
    engine.dispose()
