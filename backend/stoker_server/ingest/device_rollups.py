"""Device samples folded into their rollups (core.models.DeviceRollup) at ingest.

A group's samples are aggregated per (run, rank, GPU, width, bucket) with numpy, then upserted
with one statement run per row: a group of one-second samples makes a few rows per GPU and
width, so the statement count stays small beside the samples' own insert. Replayed batches
never reach here (the writer drops sequence numbers it stored before), so each sample is
counted once.
"""

from collections.abc import Sequence
from typing import Any

import numpy as np
from sqlalchemy.engine import Connection

from stoker_server.core.db import placeholder
from stoker_server.core.models import DEVICE_ROLLUP_FIELDS

# Rollup widths in seconds: a 2,000-point chart of a run of hours (from 10 s), days (60 s)
# or weeks (600 s) reads at most a few thousand rows per GPU.
DEVICE_ROLLUP_WIDTHS = (10, 60, 600)

# A batch's samples: (run id, rank, gpu, t, values: one column per DEVICE_ROLLUP_FIELDS, NaN
# for null).
DevicePart = tuple[int, int, np.ndarray, np.ndarray, np.ndarray]

_PARTS = ("sum", "n", "min", "max")
_VALUE_COLUMNS = [f"{f}_{p}" for f in DEVICE_ROLLUP_FIELDS for p in _PARTS]
_COLUMNS = ["run_id", "rank", "gpu", "width", "bucket", "n", "t_min", "t_max", *_VALUE_COLUMNS]


def device_part(
    run_id: int, rank: int, gpu: Sequence[int], t: Sequence[float], columns: Any
) -> DevicePart:
    """A batch's device section as arrays (`getattr(columns, name)`: a field's values, None
    when the agent did not send it)."""
    values = np.full((len(t), len(DEVICE_ROLLUP_FIELDS)), np.nan)
    for i, name in enumerate(DEVICE_ROLLUP_FIELDS):
        sent = getattr(columns, name)
        if sent is not None:
            values[:, i] = np.array(sent, dtype=np.float64)  # None: NaN
    return run_id, rank, np.asarray(gpu, dtype=np.int64), np.asarray(t, dtype=np.float64), values


def rollup_rows(parts: Sequence[DevicePart]) -> list[np.ndarray]:
    """A group's samples aggregated into every width: the columns of `_COLUMNS` (value columns
    as floats, NaN for a min or max of no values), one row per (run, rank, GPU, width,
    bucket).

    The samples are sorted once by (run, rank, GPU, t), so each bucket of every width is one
    run of rows; each width is reduced from the one below (every width is a multiple of the
    previous one).
    """
    run = np.concatenate([np.full(len(p[3]), p[0], dtype=np.int64) for p in parts])
    rank = np.concatenate([np.full(len(p[3]), p[1], dtype=np.int64) for p in parts])
    gpu = np.concatenate([p[2] for p in parts])
    t = np.concatenate([p[3] for p in parts])
    values = np.concatenate([p[4] for p in parts])
    order = np.lexsort((t, gpu, rank, run))
    run, rank, gpu, t, values = run[order], rank[order], gpu[order], t[order], values[order]
    known = ~np.isnan(values)
    # Per row of the level below (the samples first): n, t_min, t_max, and per field its
    # sum, count, min and max.
    level = [
        np.ones(len(t), dtype=np.int64), t, t,
        np.where(known, values, 0.0), known.astype(np.int64), values, values,
    ]  # fmt: skip
    reducers = (np.add, np.minimum, np.maximum, np.add, np.add, np.fmin, np.fmax)
    series_change = (gpu[1:] != gpu[:-1]) | (rank[1:] != rank[:-1]) | (run[1:] != run[:-1])
    out: list[list[np.ndarray]] = [[] for _ in _COLUMNS]
    for width in DEVICE_ROLLUP_WIDTHS:
        bucket = np.floor(level[1] / width).astype(np.int64)
        change = series_change | (bucket[1:] != bucket[:-1])
        starts = np.concatenate(([0], np.flatnonzero(change) + 1))
        level = [r.reduceat(v, starts, axis=0) for r, v in zip(reducers, level, strict=True)]
        run, rank, gpu, bucket = run[starts], rank[starts], gpu[starts], bucket[starts]
        series_change = (gpu[1:] != gpu[:-1]) | (rank[1:] != rank[:-1]) | (run[1:] != run[:-1])
        # Per field: sum, n, min, max (the order of _VALUE_COLUMNS).
        fields = np.stack(level[3:], axis=2).reshape(len(starts), -1)
        key = [run, rank, gpu, np.full(len(starts), width), bucket]
        for column, array in zip(out, [*key, *level[:3], *fields.T], strict=True):
            column.append(array)
    return [np.concatenate(column) for column in out]


def update_device_rollups(connection: Connection, parts: Sequence[DevicePart]) -> None:
    """Fold a group's samples into every rollup width (insert, or add to stored buckets)."""
    if not parts:
        return
    columns = rollup_rows(parts)
    mark = placeholder(connection)
    sql = (
        f"INSERT INTO devicerollup ({', '.join(_COLUMNS)}) "
        f"VALUES ({', '.join([mark] * len(_COLUMNS))}) {_UPSERT}"
    )
    listed = []
    for name, column in zip(_COLUMNS, columns, strict=True):
        if name.endswith(("_min", "_max")) and name not in ("t_min", "t_max"):
            listed.append([None if v != v else v for v in column.tolist()])  # NaN: null
        elif name == "n" or name.endswith("_n"):
            listed.append(column.astype(np.int64).tolist())
        else:
            listed.append(column.tolist())
    params = list(zip(*listed, strict=True))
    cursor = connection.connection.cursor()
    try:
        cursor.executemany(sql, params)
    finally:
        cursor.close()


def _merge(column: str) -> str:
    old, new = f"devicerollup.{column}", f"excluded.{column}"
    if column.endswith(("_sum", "_n")) or column == "n":
        return f"{column} = {old} + {new}"
    # min/max of two values, either possibly null (SQLite's two-argument min is null then).
    pick = "min" if column.endswith("_min") or column == "t_min" else "max"
    return f"{column} = {_pick(pick, old, new)}"


def _pick(kind: str, a: str, b: str) -> str:
    op = "<" if kind == "min" else ">"
    return f"CASE WHEN {b} IS NULL OR ({a} IS NOT NULL AND {a} {op} {b}) THEN {a} ELSE {b} END"


_UPSERT = "ON CONFLICT (run_id, rank, gpu, width, bucket) DO UPDATE SET " + ", ".join(
    _merge(c) for c in _COLUMNS[5:]
)
