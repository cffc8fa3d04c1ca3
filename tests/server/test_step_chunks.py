"""Raw steps in chunks (core.step_chunks): what goes in reads back exactly, whatever the
range asked for, on both databases."""

from pathlib import Path

import numpy as np
import pytest
from sqlmodel import Session

from stoker_server.core.db import make_engine
from stoker_server.core.settings import Settings
from stoker_server.core.step_chunks import (
    CHUNK_SPAN,
    CHUNK_STEPS,
    UNKNOWN_BATCH_SIZE,
    batch_sizes,
    chunk_rows,
    count_steps,
    read_latest_steps,
    read_steps,
    step_bounds,
)
from stoker_server.ingest.group_rows import GroupRows
from tests.conftest import DATABASES

pytestmark = pytest.mark.parametrize("database", DATABASES, indirect=True)


def _section(step: np.ndarray, t0: float) -> dict[str, np.ndarray]:
    wait = np.where(step % 3 == 0, np.nan, (step % 7) / 100)
    return {"step": step, "t": t0 + step * 0.5, "dur": 0.5 + (step % 5) / 10, "wait": wait}


def _store(engine, run_id: int, rank: int, section: dict, batch_size) -> None:
    with Session(engine) as session:
        rows = GroupRows(session.connection())
        rows.insert_steps(run_id=run_id, rank=rank, batch_size=batch_size, **section)
        rows.finish()
        session.commit()


def test_steps_read_back_exactly_over_any_range(database: str, tmp_path: Path) -> None:
    engine = make_engine(Settings(data_dir=tmp_path, database_url=database))
    # Rank 0: 10,000 steps in one section (three chunks), a gap wider than a chunk may span,
    # then a restart from step 0 (a second life, later in time). Rank 1: no batch sizes.
    life = _section(np.arange(10_000), 1.7e9)
    sizes = np.where(np.arange(10_000) % 4 == 0, UNKNOWN_BATCH_SIZE, 64)
    _store(engine, 7, 0, life, sizes)
    far = _section(np.array([10_000 + CHUNK_SPAN, 10_001 + CHUNK_SPAN]), 1.7e9)
    _store(engine, 7, 0, far, None)
    restart = _section(np.arange(50), 1.8e9)
    _store(engine, 7, 0, restart, np.full(50, 32))
    _store(engine, 7, 1, _section(np.arange(0, 300, 3), 1.7e9), None)

    expected_step = np.concatenate([life["step"], far["step"], restart["step"]])
    expected_t = np.concatenate([life["t"], far["t"], restart["t"]])
    expected_size = np.concatenate([sizes, [UNKNOWN_BATCH_SIZE] * 2, np.full(50, 32)])
    order = np.lexsort((expected_t, expected_step))
    with engine.connect() as connection:
        chunks = connection.exec_driver_sql(
            "SELECT n, last_step - first_step FROM stepchunk WHERE run_id = 7 AND rank = 0"
        ).all()
        assert sorted(chunks) == sorted(
            [(CHUNK_STEPS, CHUNK_STEPS - 1)] * 2 + [(10_000 - 2 * CHUNK_STEPS, 1807), (2, 1),
             (50, 49)]
        )  # fmt: skip
        steps = read_steps(connection, 7, rank=0)
        assert steps.step.tolist() == expected_step[order].tolist()
        assert steps.t.tolist() == expected_t[order].tolist()
        assert steps.batch_size.tolist() == expected_size[order].tolist()
        wait = np.concatenate([life["wait"], far["wait"], restart["wait"]])[order]
        assert steps.wait_or_none() == [None if w != w else w for w in wait.tolist()]

        far_step = 10_001 + CHUNK_SPAN
        ranges = [(0, 0), (4095, 4096), (4000, 9000), (9999, far_step - 1), (20, 60),
                  (far_step, 10**9), (far_step + 1, 10**9)]  # fmt: skip
        for first, last in ranges:
            window = read_steps(connection, 7, rank=0, first_step=first, last_step=last)
            inside = (expected_step[order] >= first) & (expected_step[order] <= last)
            assert window.step.tolist() == expected_step[order][inside].tolist(), (first, last)

        both = read_steps(connection, 7, t_min=1.8e9 + 10, t_max=1.8e9 + 12)
        assert both.step.tolist() == [20, 21, 22, 23, 24] and set(both.rank.tolist()) == {0}
        assert read_steps(connection, 7, rank=1).batch_size_or_none() == [None] * 100
        assert count_steps(connection, 7) == 10_000 + 2 + 50 + 100
        assert count_steps(connection, 7, rank=1) == 100
        assert step_bounds(connection, 7, 1) == (0, 297)
        assert step_bounds(connection, 8, 0) == (None, None)
        assert len(read_steps(connection, 8)) == 0

        latest = read_latest_steps(connection, 7, rank=1, count=5, t_max=1.7e9 + 140)
        assert latest.step.tolist() == [267, 270, 273, 276, 279]
    engine.dispose()


def test_batch_sizes_keep_their_exact_values(database: str) -> None:
    del database  # no database: the conversion alone
    assert batch_sizes(None, np.array([np.nan])) is None
    assert batch_sizes([None, None], np.array([np.nan, np.nan])) is None
    values = [64, None, 2**60 + 1]
    exact = batch_sizes(values, np.array(values, dtype=np.float64))
    assert exact is not None and exact.tolist() == [64, UNKNOWN_BATCH_SIZE, 2**60 + 1]


def test_unsorted_steps_are_stored_in_step_order(database: str) -> None:
    del database
    step = np.array([5, 3, 4])
    rows = chunk_rows(1, 0, step, step * 1.0, step * 0.1, step * 0.0, None)
    assert len(rows) == 1 and rows[0][2:4] == (3, 5)
    assert np.frombuffer(rows[0][7], dtype="<i8").tolist() == [3, 4, 5]


def test_ranges_past_the_step_numbers_select_all_or_nothing(database: str, tmp_path: Path) -> None:
    engine = make_engine(Settings(data_dir=tmp_path, database_url=database))
    _store(engine, 3, 0, _section(np.arange(10), 1.7e9), None)
    top, bottom = 2**63 - 1, -(2**63)
    with engine.connect() as connection:
        for first, last, expected in [
            (top + 1, None, []), (None, bottom - 1, []), (5, 4, []), (top, top, []),
            (bottom, top, list(range(10))), (bottom - 5, top + 5, list(range(10))),
            (None, 2, [0, 1, 2]), (8, top, [8, 9]),
        ]:  # fmt: skip
            steps = read_steps(connection, 3, first_step=first, last_step=last)
            assert steps.step.tolist() == expected, (first, last)
    engine.dispose()


def test_steps_at_the_int64_limit_are_stored(database: str, tmp_path: Path) -> None:
    """A chunk's span is reckoned without wrapping: steps near 2**63 (an agent may send any
    int64) are stored, not looped over."""
    engine = make_engine(Settings(data_dir=tmp_path, database_url=database))
    top = 2**63 - 1
    step = np.array([top - CHUNK_SPAN - 1, top - 5, top - 1, top], dtype=np.int64)
    _store(engine, 4, 0, _section(step % 1000, 1.7e9) | {"step": step}, None)
    with engine.connect() as connection:
        assert read_steps(connection, 4).step.tolist() == step.tolist()
        assert read_steps(connection, 4, first_step=top - 5).step.tolist() == step[1:].tolist()
    engine.dispose()
