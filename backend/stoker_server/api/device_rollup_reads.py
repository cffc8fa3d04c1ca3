"""Device-chart buckets read from the device rollups (core.models.DeviceRollup).

A zoomed-out view of a long run asks for buckets of at least a rollup width; they are made of
whole rollup buckets: each chart bucket is `k` rollup buckets of `width` seconds, aligned on
multiples of its own width in wall-clock time, so it merges them exactly (mean = sum / count,
min of mins, max of maxes). A window (`since_t`, `until_t`) takes its whole chart buckets
from the rollups and the partial ones at its two edges from the raw samples.
"""

from collections.abc import Sequence
from typing import Any

import numpy as np
from sqlalchemy import Float, cast, func, or_, text
from sqlmodel import Session, col

from stoker_server.api.queries import bucket_of
from stoker_server.core.db import select_columns
from stoker_server.core.models import DeviceSample
from stoker_server.ingest.device_rollups import DEVICE_ROLLUP_WIDTHS


def rollup_width(first: float, last: float, max_points: int) -> tuple[int, int] | None:
    """The rollup width and the rollup buckets per chart bucket (`width`, `k`) for
    `max_points` buckets over `first`..`last`; None when a chart bucket is under the smallest
    rollup width. A chart bucket (width * k) is wider than `span / (max_points - 1)`, so at
    most `max_points` of them, aligned, cover the span; within 1.5 times that where a width
    allows it."""
    wanted = (last - first) / max(max_points - 1, 1)
    fitting = [w for w in DEVICE_ROLLUP_WIDTHS if w <= wanted]
    if not fitting:
        return None
    close = [w for w in fitting if (wanted // w + 1) * w <= 1.5 * wanted]
    width = max(close) if close else min(fitting)
    return width, int(wanted // width) + 1


def rollup_spans(session: Session, *, run_id: int, gpu: int) -> list[Any] | None:
    """Per rank of one GPU of a run, from its coarsest rollups: the rank, the sample count,
    the first and last t; None when the GPU has no rollups (a run stored before them)."""
    rows = (
        session.connection()
        .execute(
            text(
                "SELECT rank, sum(n), min(t_min), max(t_max) FROM devicerollup"
                " WHERE run_id = :run_id AND gpu = :gpu AND width = :width"
                " GROUP BY rank ORDER BY rank"
            ),
            {"run_id": run_id, "gpu": gpu, "width": DEVICE_ROLLUP_WIDTHS[-1]},
        )
        .all()
    )
    return [tuple(row) for row in rows] or None


def has_rollups(session: Session, *, run_id: int, rank: int, gpu: int) -> bool:
    """Whether one series has device rollups."""
    row = (
        session.connection()
        .execute(
            text(
                "SELECT 1 FROM devicerollup WHERE run_id = :run_id AND rank = :rank AND gpu = :gpu"
                " AND width = :width LIMIT 1"
            ),
            {"run_id": run_id, "rank": rank, "gpu": gpu, "width": DEVICE_ROLLUP_WIDTHS[0]},
        )
        .first()
    )
    return row is not None


def rollup_buckets(
    session: Session,
    *,
    key: dict[str, int],
    fields: Sequence[str],
    width: tuple[int, int],
    window: tuple[float | None, float | None],
    raw: Sequence[Any],
) -> dict[str, list[Any]]:
    """One series' chart buckets (`t` and per field its mean, `_min`, `_max`), in time order,
    from its rollups (`key`: run_id, rank, gpu) and, at a window's edges, its raw rows
    (`raw`: their conditions, the window's included)."""
    rollup_width_s, k = width
    chart_width = rollup_width_s * k
    since_t, until_t = window
    # The chart buckets wholly inside the window (strictly after since_t): j0 <= j < j1.
    j0 = None if since_t is None else int(since_t // chart_width) + 1
    j1 = None if until_t is None else int(until_t // chart_width)
    parts = [_from_rollups(session, key, fields, rollup_width_s, k, j0, j1)]
    edges = []
    if j0 is not None:
        edges.append(col(DeviceSample.t) < j0 * chart_width)
    if j1 is not None:
        edges.append(col(DeviceSample.t) >= j1 * chart_width)
    if edges:
        parts.append(_from_rows(session, [*raw, or_(*edges)], fields, chart_width))
    j = np.concatenate([p[0] for p in parts])
    values = np.concatenate([p[1] for p in parts])
    # Rows of one chart bucket together: its first t, and per field the sum and count, the
    # min and max of its values (NaN: none).
    order = np.argsort(j, kind="stable")
    j, values = j[order], values[order]
    starts = np.concatenate(([0], np.flatnonzero(j[1:] != j[:-1]) + 1)) if len(j) else j
    out: dict[str, list[Any]] = {"t": []}
    for name in fields:
        out |= {name: [], f"{name}_min": [], f"{name}_max": []}
    if not len(j):
        return out
    merged = [np.minimum.reduceat(values[:, 0], starts)]
    for i in range(len(fields)):
        column = 1 + 4 * i
        merged += [
            np.add.reduceat(values[:, column], starts),
            np.add.reduceat(values[:, column + 1], starts),
            np.fmin.reduceat(values[:, column + 2], starts),
            np.fmax.reduceat(values[:, column + 3], starts),
        ]
    out["t"] = merged[0].tolist()
    for i, name in enumerate(fields):
        total, count, low, high = merged[1 + 4 * i : 5 + 4 * i]
        with np.errstate(invalid="ignore", divide="ignore"):
            mean = np.where(count > 0, total / count, np.nan)
        out[name] = _nullable(mean)
        out[f"{name}_min"] = _nullable(low)
        out[f"{name}_max"] = _nullable(high)
    return out


def _nullable(values: np.ndarray) -> list[float | None]:
    return [None if v != v else v for v in values.tolist()]  # NaN: null


def _from_rollups(
    session: Session, key: dict[str, int], fields: Sequence[str], width: int, k: int,
    j0: int | None, j1: int | None,
) -> tuple[np.ndarray, np.ndarray]:  # fmt: skip
    """The rollup rows of one series in the chart buckets `j0` <= j < `j1`: their chart
    bucket, and per row t_min and per field sum, count, min, max (null: NaN)."""
    aggregates = ", ".join(f"sum({f}_sum), sum({f}_n), min({f}_min), max({f}_max)" for f in fields)
    where = "run_id = :run_id AND rank = :rank AND gpu = :gpu AND width = :width"
    params: dict[str, Any] = {**key, "width": width}
    if j0 is not None:
        where += " AND bucket >= :lo"
        params["lo"] = j0 * k
    if j1 is not None:
        where += " AND bucket < :hi"
        params["hi"] = j1 * k
    # Merged in SQL: a quarter of the values to fetch. bucket and k are integers: integer
    # division on both databases.
    rows = (
        session.connection()
        .execute(
            text(
                f"SELECT bucket / {int(k)} AS j, min(t_min), {aggregates} FROM devicerollup"
                f" WHERE {where} GROUP BY bucket / {int(k)}"
            ),
            params,
        )
        .all()
    )
    array = _floats(rows, 2 + 4 * len(fields))
    return array[:, 0].astype(np.int64), array[:, 1:]


def _from_rows(
    session: Session, where: Sequence[Any], fields: Sequence[str], chart_width: float
) -> tuple[np.ndarray, np.ndarray]:
    """Raw rows aggregated into chart buckets, as `_from_rollups` returns them."""
    t = col(DeviceSample.t)
    j = bucket_of(session, t / float(chart_width))
    aggregates: list[Any] = [j, func.min(t)]
    for f in fields:
        value = cast(col(getattr(DeviceSample, f)), Float)
        aggregates += [
            func.coalesce(func.sum(value), 0.0), func.count(value), func.min(value),
            func.max(value),
        ]  # fmt: skip
    rows = session.connection().execute(select_columns(*aggregates).where(*where).group_by(j))
    array = _floats(rows.all(), 2 + 4 * len(fields))
    return array[:, 0].astype(np.int64), array[:, 1:]


def _floats(rows: Sequence[Any], width: int) -> np.ndarray:
    """Rows as a float array, null as NaN."""
    if not rows:
        return np.empty((0, width))
    return np.array([tuple(row) for row in rows], dtype=np.float64)
