"""Raw steps stored in chunks: one row per (run, rank) and up to CHUNK_STEPS steps, each
column a little-endian array (models.StepChunk).

A row per step cost PostgreSQL an index entry per step: 1.5-2 us of its CPU and 70 bytes of
write-ahead log a step, more than the row itself. A chunk costs one index entry for
thousands of steps. Every query of raw steps reads the chunks that can hold its range
through the (run_id, rank, first_step) index and filters the decoded columns with numpy.

A chunk's steps are sorted and span fewer than CHUNK_SPAN step numbers, so a range's chunks
are found by first_step alone: those with first_step in (first - CHUNK_SPAN, last].
"""

from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from sqlalchemy.engine import Connection

from stoker_server.core.db import placeholder

CHUNK_STEPS = 4096
CHUNK_SPAN = 1 << 16
_INT64_MIN, _INT64_MAX = -(2**63), 2**63 - 1
UNKNOWN_BATCH_SIZE = -1

# The stored columns' dtypes. wait: NaN where unknown; batch_size: -1 where unknown, and the
# whole column NULL when the chunk knows none.
_DTYPES = {"step": "<i8", "t": "<f8", "dur": "<f8", "wait": "<f8", "batch_size": "<i8"}
COLUMNS = (
    "run_id", "rank", "first_step", "last_step", "first_t", "last_t", "n",
    "step", "t", "dur", "wait", "batch_size",
)  # fmt: skip
PG_TYPES = ["int4", "int4", "int8", "int8", "float8", "float8", "int4"] + ["bytea"] * 5
# What `decode` takes, per chunk row.
SELECT_CHUNKS = "SELECT rank, n, step, t, dur, wait, batch_size FROM stepchunk"


@dataclass(frozen=True, slots=True)
class StepArrays:
    """Raw steps as columns, in (rank, step) order (a restarted worker's steps, which count
    from 0 again, follow in the order they were stored)."""

    rank: np.ndarray  # int64
    step: np.ndarray  # int64
    t: np.ndarray  # float64
    dur: np.ndarray  # float64
    wait: np.ndarray  # float64, NaN: not measured
    batch_size: np.ndarray  # int64, -1: unknown

    def __len__(self) -> int:
        return len(self.step)

    def where(self, keep: np.ndarray) -> "StepArrays":
        return StepArrays(*(column[keep] for column in self._columns()))

    def _columns(self) -> tuple[np.ndarray, ...]:
        return (self.rank, self.step, self.t, self.dur, self.wait, self.batch_size)

    def wait_or_none(self) -> list[float | None]:
        return none_for_nan(self.wait)

    def batch_size_or_none(self) -> list[int | None]:
        return [None if b == UNKNOWN_BATCH_SIZE else b for b in self.batch_size.tolist()]

    def by_rank(self) -> Iterator[tuple[int, "StepArrays"]]:
        """Each rank's steps, ranks in order."""
        for rank in np.unique(self.rank).tolist():
            yield rank, self.where(self.rank == rank)

    def window_arrays(self) -> tuple[np.ndarray, ...]:
        """step, t, dur, wait and batch_size as the detectors' window takes them
        (RunWindow.add_step_arrays: floats, NaN where unknown)."""
        known = self.batch_size != UNKNOWN_BATCH_SIZE
        batch_size = np.where(known, self.batch_size, np.nan).astype(np.float64)
        return (self.step, self.t, self.dur, self.wait, batch_size)


def chunk_rows(
    run_id: int, rank: int, step: np.ndarray, t: np.ndarray, dur: np.ndarray,
    wait: np.ndarray, batch_size: np.ndarray | None,
) -> list[tuple[Any, ...]]:  # fmt: skip
    """A batch section's steps as stepchunk rows (the values of COLUMNS).

    `wait`: NaN where unknown; `batch_size`: int64 with UNKNOWN_BATCH_SIZE, or None when no
    step has one."""
    if len(step) > 1 and bool(np.any(step[1:] < step[:-1])):
        order = np.argsort(step, kind="stable")
        step, t, dur, wait = step[order], t[order], dur[order], wait[order]
        batch_size = None if batch_size is None else batch_size[order]
    rows = []
    start, n = 0, len(step)
    while start < n:
        end = min(start + CHUNK_STEPS, n)
        # Past the span: the chunk ends before the first step CHUNK_SPAN numbers on (in
        # Python's integers: near the int64 limit numpy's sum would wrap).
        limit = int(step[start]) + CHUNK_SPAN
        if limit <= _INT64_MAX:
            end = start + int(np.searchsorted(step[start:end], np.int64(limit)))
        piece = slice(start, end)
        rows.append((
            run_id, rank, int(step[start]), int(step[end - 1]),
            float(np.min(t[piece])), float(np.max(t[piece])), end - start,
            _bytes(step[piece], "step"), _bytes(t[piece], "t"), _bytes(dur[piece], "dur"),
            _bytes(wait[piece], "wait"),
            None if batch_size is None else _bytes(batch_size[piece], "batch_size"),
        ))  # fmt: skip
        start = end
    return rows


def batch_sizes(values: Sequence[int | None] | None, floats: np.ndarray) -> np.ndarray | None:
    """A section's batch sizes as int64 (UNKNOWN_BATCH_SIZE where unknown), or None when it
    has none. `floats`: the same as float64 (NaN: unknown), exact below 2**53."""
    if values is None:
        return None
    known = ~np.isnan(floats)
    if not known.any():
        return None
    if bool(np.all(np.abs(floats[known]) < 2.0**53)):
        return np.where(known, floats, UNKNOWN_BATCH_SIZE).astype(np.int64)
    return np.array([UNKNOWN_BATCH_SIZE if v is None else v for v in values], dtype=np.int64)


def _bytes(column: np.ndarray, name: str) -> bytes:
    return np.ascontiguousarray(column, dtype=_DTYPES[name]).tobytes()


def insert_chunks_sql(connection: Connection) -> str:
    mark = placeholder(connection)
    return f"INSERT INTO stepchunk ({', '.join(COLUMNS)}) VALUES ({', '.join([mark] * 12)})"


def read_steps(
    connection: Connection,
    run_id: int,
    *,
    rank: int | None = None,
    first_step: int | None = None,
    last_step: int | None = None,
    t_min: float | None = None,
    t_max: float | None = None,
) -> StepArrays:
    """A run's raw steps (of one rank, or all), within the step and time bounds (inclusive)."""
    if first_step is not None and last_step is not None and first_step > last_step:
        return decode([])
    # Step numbers are int64: bounds past them select all or nothing, not an overflow.
    if first_step is not None:
        if first_step > _INT64_MAX:
            return decode([])
        first_step = None if first_step <= _INT64_MIN + CHUNK_SPAN else first_step
    if last_step is not None:
        if last_step < _INT64_MIN:
            return decode([])
        last_step = None if last_step >= _INT64_MAX else last_step
    mark = placeholder(connection)
    where: list[str] = [f"run_id = {mark}"]
    params: list[float] = [run_id]
    if rank is not None:
        where.append(f"rank = {mark}")
        params.append(rank)
    if first_step is not None:
        where.append(f"first_step > {mark} AND last_step >= {mark}")
        params += [first_step - CHUNK_SPAN, first_step]
    if last_step is not None:
        where.append(f"first_step <= {mark}")
        params.append(last_step)
    if t_min is not None:
        where.append(f"last_t >= {mark}")
        params.append(t_min)
    if t_max is not None:
        where.append(f"first_t <= {mark}")
        params.append(t_max)
    rows = connection.exec_driver_sql(
        f"{SELECT_CHUNKS} WHERE {' AND '.join(where)} ORDER BY rank, first_step",
        tuple(params),
    ).all()
    steps = decode(rows)
    keep = np.ones(len(steps), dtype=bool)
    if first_step is not None:
        keep &= steps.step >= first_step
    if last_step is not None:
        keep &= steps.step <= last_step
    if t_min is not None:
        keep &= steps.t >= t_min
    if t_max is not None:
        keep &= steps.t <= t_max
    return steps if keep.all() else steps.where(keep)


def read_latest_steps(
    connection: Connection, run_id: int, *, rank: int, count: int, t_max: float
) -> StepArrays:
    """The last `count` steps of a rank (by step) at or before `t_max`, in step order."""
    mark = placeholder(connection)
    rows = connection.exec_driver_sql(
        f"{SELECT_CHUNKS} WHERE run_id = {mark} AND rank = {mark} AND first_t <= {mark} "
        f"ORDER BY first_step DESC LIMIT {mark}",
        # Chunks of a few steps (a slow run's batches): enough of them for `count` steps.
        # One more: the newest chunk read may end past t_max.
        (run_id, rank, t_max, max(1, count) + 1),
    ).all()
    steps = decode(list(reversed(rows)))
    steps = steps.where(steps.t <= t_max)
    return steps.where(np.arange(len(steps)) >= len(steps) - count)


def decode(rows: Iterable[Sequence[Any]]) -> StepArrays:
    """Chunk rows (rank, n, step, t, dur, wait, batch_size) as columns, in the rows' order
    then by step within (rank, first_step)."""
    ranks: list[np.ndarray] = []
    columns: dict[str, list[np.ndarray]] = {name: [] for name in _DTYPES}
    for rank, n, *blobs in rows:
        ranks.append(np.full(n, rank, dtype=np.int64))
        for name, blob in zip(_DTYPES, blobs, strict=True):
            if blob is None:  # batch_size: none known
                columns[name].append(np.full(n, UNKNOWN_BATCH_SIZE, dtype=np.int64))
            else:
                columns[name].append(np.frombuffer(blob, dtype=_DTYPES[name]))
    if not ranks:
        empty = {name: np.empty(0, dtype=dtype) for name, dtype in _DTYPES.items()}
        return StepArrays(rank=np.empty(0, dtype=np.int64), **empty)
    steps = StepArrays(
        rank=np.concatenate(ranks),
        **{name: np.concatenate(parts) for name, parts in columns.items()},
    )
    # Chunks in (rank, first_step) order can overlap (a restarted worker): rows by (rank,
    # step, t), a step stored twice in the order it was taken.
    order = np.lexsort((steps.t, steps.step, steps.rank))
    return steps if bool(np.all(order[1:] > order[:-1])) else steps.where(order)


def count_steps(connection: Connection, run_id: int, rank: int | None = None) -> int:
    """How many raw steps a run (or one of its ranks) has stored."""
    mark = placeholder(connection)
    where, params = f"run_id = {mark}", [run_id]
    if rank is not None:
        where += f" AND rank = {mark}"
        params.append(rank)
    total = connection.exec_driver_sql(
        f"SELECT sum(n) FROM stepchunk WHERE {where}", tuple(params)
    ).scalar()
    return int(total or 0)


def step_bounds(connection: Connection, run_id: int, rank: int) -> tuple[int | None, int | None]:
    """The first and last step number a rank has stored (None, None: no step)."""
    mark = placeholder(connection)
    first, last = connection.exec_driver_sql(
        "SELECT min(first_step), max(last_step) FROM stepchunk "
        f"WHERE run_id = {mark} AND rank = {mark}",
        (run_id, rank),
    ).one()
    return first, last


def ranks_with_steps(connection: Connection, run_id: int) -> list[int]:
    mark = placeholder(connection)
    rows = connection.exec_driver_sql(
        f"SELECT DISTINCT rank FROM stepchunk WHERE run_id = {mark} ORDER BY rank", (run_id,)
    ).all()
    return [int(r[0]) for r in rows]


@dataclass(frozen=True, slots=True)
class StepBuckets:
    """Steps reduced to buckets: each at its last step and latest start, with the mean, min
    and max duration and the mean of the measured waits (NaN: none measured)."""

    step: np.ndarray
    t: np.ndarray
    dur_mean: np.ndarray
    dur_min: np.ndarray
    dur_max: np.ndarray
    wait_mean: np.ndarray


def bucket_steps(steps: StepArrays, bucket: np.ndarray) -> StepBuckets:
    """Reduce steps (in step order) by `bucket`, a non-decreasing bucket number per step."""
    starts = np.flatnonzero(np.concatenate(([True], bucket[1:] != bucket[:-1])))
    count = np.diff(np.append(starts, len(bucket)))
    known = ~np.isnan(steps.wait)
    wait_n = np.add.reduceat(known.astype(np.int64), starts)
    wait_sum = np.add.reduceat(np.where(known, steps.wait, 0.0), starts)
    with np.errstate(invalid="ignore", divide="ignore"):
        wait_mean = np.where(wait_n > 0, wait_sum / np.maximum(wait_n, 1), np.nan)
    return StepBuckets(
        step=np.maximum.reduceat(steps.step, starts),
        t=np.maximum.reduceat(steps.t, starts),
        dur_mean=np.add.reduceat(steps.dur, starts) / count,
        dur_min=np.minimum.reduceat(steps.dur, starts),
        dur_max=np.maximum.reduceat(steps.dur, starts),
        wait_mean=wait_mean,
    )


def none_for_nan(values: np.ndarray) -> list[float | None]:
    return [None if v != v else v for v in values.tolist()]
