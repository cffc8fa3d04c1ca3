"""Ingest's bulk paths (binary COPY and one rollup statement on PostgreSQL, executemany on
SQLite) store every value as sent, rollups equal the steps they sum, and a replayed seq
stores nothing twice: on both databases."""

from pathlib import Path

import pytest
from sqlalchemy import text
from sqlmodel import Session

from stoker_server.core.db import make_engine
from stoker_server.core.settings import Settings
from stoker_server.core.step_chunks import read_steps
from stoker_server.ingest.agent_writes import BatchJob, open_run, store_batches
from stoker_server.ingest.protocol import Batch, Hello
from tests.conftest import DATABASES
from tests.harness.rollups import assert_rollups_hold

pytestmark = pytest.mark.parametrize("database", DATABASES, indirect=True)

DEVICE_FIELDS = (
    "util", "mem_util", "mem_used", "mem_total", "proc_mem", "tf_mem_current", "tf_mem_peak",
    "temp_c", "power_w", "power_limit_w", "sm_clock_mhz", "pcie_tx_bps", "pcie_rx_bps",
    "sm_util", "sm_occupancy", "tensor_util", "dram_bw_util", "fp32_util", "fp16_util",
    "energy_j",
)  # fmt: skip


def _batch(seq: int, first: int, n: int) -> Batch:
    steps = list(range(first, first + n))
    device = {name: [float(i) * 1.5 + k for i in range(4)] for k, name in enumerate(DEVICE_FIELDS)}
    device["util"][1] = None  # unknown values stay null
    return Batch.model_validate(
        {
            "type": "batch",
            "seq": seq,
            "steps": {
                "step": steps,
                "t": [1.7e9 + s * 0.1 for s in steps],
                "dur": [0.1 + (s % 5) / 1000 for s in steps],
                "wait": [None if s % 3 == 0 else s / 1e4 for s in steps],
                "batch_size": [None if s % 4 == 0 else 64 for s in steps],
            },
            "metrics": {"step": steps[:2], "name": ["loss", "loss"], "value": [0.5, None]},
            "device": {
                "t": [1.7e9 + first + i for i in range(4)],
                "gpu": [0, 1, 0, 1],
                "throttle": [0, 2**40, None, 4],
                "energy_integrated": [True, False, None, True],
                **device,
            },
            "host": {
                "t": [1.7e9 + first, 1.7e9 + first + 1],
                "proc_cpu": [12.5, None],
                "rss": [2.0**31, 2.0**33],
            },
        }
    )


def _rows(session: Session, sql: str, **params: object) -> list[tuple]:
    return [tuple(r) for r in session.connection().execute(text(sql), params).all()]


def test_bulk_rows_are_stored_exactly_once(database: str, tmp_path: Path) -> None:
    engine = make_engine(Settings(data_dir=tmp_path, database_url=database))
    with Session(engine, expire_on_commit=False) as session:
        hello = Hello(type="hello", protocol=1, run_key="bulk-copy-run", host="h")
        run, _ = open_run(session=session, hello=hello)
        assert run.id is not None
        batches = [_batch(1, 0, 300), _batch(2, 300, 700), _batch(3, 1000, 50)]
        jobs = [BatchJob(run.id, hello.stream, 0, b) for b in batches]
        # The first two in one group, then a replay of the second beside the third.
        assert all(r is not None for r in store_batches(session=session, jobs=jobs[:2]))
        results = store_batches(session=session, jobs=[jobs[1], jobs[2]])
        assert results[0] is None and results[1] is not None

        steps = read_steps(session.connection(), run.id)
        stored = list(
            zip(
                steps.step.tolist(), steps.t.tolist(), steps.dur.tolist(), steps.wait_or_none(),
                steps.batch_size_or_none(), strict=True,
            )
        )  # fmt: skip
        sent = [
            row
            for b in batches
            for row in zip(
                b.steps.step, b.steps.t, b.steps.dur, b.steps.wait, b.steps.batch_size, strict=True
            )
        ]
        assert stored == sent

        columns = ", ".join(("t", "gpu", "throttle", "energy_integrated", *DEVICE_FIELDS))
        stored = _rows(
            session,
            f"SELECT {columns} FROM devicesample WHERE run_id = :r ORDER BY t, gpu",
            r=run.id,
        )
        sent = []
        for b in batches:
            d = b.device
            values = [getattr(d, name) for name in ("t", "gpu", "throttle", "energy_integrated")]
            values += [getattr(d, name) for name in DEVICE_FIELDS]
            sent += [tuple(row) for row in zip(*values, strict=True)]
        # SQLite hands booleans back as 0/1.
        normalised = [(*r[:3], None if r[3] is None else bool(r[3]), *r[4:]) for r in stored]
        assert normalised == sorted(sent, key=lambda r: (r[0], r[1]))

        stored = _rows(
            session,
            "SELECT t, proc_cpu, rss FROM hostsample WHERE run_id = :r ORDER BY t",
            r=run.id,
        )
        assert stored == [
            row for b in batches for row in zip(b.host.t, b.host.proc_cpu, b.host.rss, strict=True)
        ]
        assert _rows(session, "SELECT count(*) FROM metric WHERE run_id = :r", r=run.id) == [(6,)]

        sent = [
            (0, *row)
            for b in batches
            for row in zip(b.steps.step, b.steps.dur, b.steps.wait, strict=True)
        ]
        assert_rollups_hold(session.connection(), run.id, sent)
    engine.dispose()
