"""Migration 0007 gives runs stored before the starvation cost existed that cost, from the wait sums
their running statistics always held; on SQLite and PostgreSQL."""

from typing import Any

import pytest
from sqlalchemy import Engine, MetaData, Table, create_engine, insert
from sqlmodel import Session, select

from stoker_server.core.db import migrate
from stoker_server.core.models import Run, RunStatus
from stoker_server.ingest.summary import add_steps, add_worker_steps, summarize
from tests.conftest import DATABASES

pytestmark = pytest.mark.parametrize("database", DATABASES, indirect=True)


def _old_run(key: str, environment: dict[str, Any], waits: dict[int, list[float]]) -> Run:
    """A run as the server stored it before: statistics with wait sums, no cost in its summary."""
    stats: dict[str, Any] = {}
    for rank, rank_waits in waits.items():
        n = len(rank_waits)
        columns = dict(steps=list(range(n)), t=[float(i) for i in range(n)], dur=[1.0] * n,
                       wait=rank_waits, batch_size=[32] * n)  # fmt: skip
        stats = add_steps(stats, **columns)
        stats = add_worker_steps(stats, rank=rank, **columns)
    summary = summarize(stats).model_dump()
    for field in ("input_wait_s", "lost_gpu_s"):
        del summary[field]
    for worker in summary["workers"]:
        del worker["input_wait_s"], worker["gpus"]
    return Run(run_key=key, name=key, environment=environment, stats=stats, summary=summary,
               status=RunStatus.finished)  # fmt: skip


def _store_old(engine: Engine, runs: list[Run]) -> None:
    """Insert `runs` into the run table as it is at the database's revision (reflected: later
    migrations add columns the model already has)."""
    table = Table("run", MetaData(), autoload_with=engine)
    with engine.begin() as connection:
        for run in runs:
            values = {c.name: getattr(run, c.name) for c in table.columns if c.name != "id"}
            values["status"] = run.status.value
            connection.execute(insert(table).values(**values))


def test_old_summaries_get_input_wait_and_lost_gpu_time(database: str) -> None:
    engine = create_engine(database)
    migrate(engine, revision="0006")
    four_gpus = {"gpus": [{"index": i} for i in range(4)]}
    _store_old(
        engine,
        [
            _old_run("old-four-gpus", four_gpus, {0: [9.0, 0.5, 1.5], 1: [0.0, 0.25, 0.25]}),
            _old_run("old-no-gpu", {}, {0: [0.0, 2.0]}),
        ],
    )
    migrate(engine)
    with Session(engine) as session:
        runs = {r.run_key: r.summary for r in session.exec(select(Run)).all()}
    engine.dispose()
    four = runs["old-four-gpus"]
    assert (four["input_wait_s"], four["lost_gpu_s"]) == (2.5, 2.5 * 4)
    assert [(w["input_wait_s"], w["gpus"]) for w in four["workers"]] == [(2.0, 4), (0.5, 4)]
    assert (runs["old-no-gpu"]["input_wait_s"], runs["old-no-gpu"]["lost_gpu_s"]) == (2.0, 2.0)
