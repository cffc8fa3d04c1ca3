"""Device-chart buckets read from the device rollups (core.models.DeviceRollup).

A zoomed-out view of a long run asks for buckets of at least a rollup width; they are made of
whole rollup buckets: each chart bucket is `k` rollup buckets of `width` seconds, aligned on
multiples of its own width in wall-clock time, so it merges them exactly (mean = sum / count,
min of mins, max of maxes). A window (`since_t`, `until_t`) takes its whole chart buckets
from the rollups and the partial ones at its two edges from the raw samples.
"""

from collections.abc import Sequence
from typing import Any

from sqlalchemy import Float, cast, func, or_, text
from sqlmodel import Session, col

from stoker_server.api.queries import bucket_of
from stoker_server.core.db import select_columns
from stoker_server.core.models import DeviceSample
from stoker_server.ingest.device_rollups import DEVICE_ROLLUP_WIDTHS

# A chart bucket: its first t, then per field [sum, count, min, max].
Bucket = list[Any]


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
    buckets = _from_rollups(session, key, fields, rollup_width_s, k, j0, j1)
    edges = []
    if j0 is not None:
        edges.append(col(DeviceSample.t) < j0 * chart_width)
    if j1 is not None:
        edges.append(col(DeviceSample.t) >= j1 * chart_width)
    if edges:
        for j, bucket in _from_rows(session, [*raw, or_(*edges)], fields, chart_width).items():
            buckets[j] = _merge(buckets[j], bucket) if j in buckets else bucket
    ordered = [buckets[j] for j in sorted(buckets)]
    out: dict[str, list[Any]] = {"t": [b[0] for b in ordered]}
    for i, name in enumerate(fields):
        parts = [b[1 + i] for b in ordered]
        out[name] = [p[0] / p[1] if p[1] else None for p in parts]
        out[f"{name}_min"] = [p[2] for p in parts]
        out[f"{name}_max"] = [p[3] for p in parts]
    return out


def _from_rollups(
    session: Session, key: dict[str, int], fields: Sequence[str], width: int, k: int,
    j0: int | None, j1: int | None,
) -> dict[int, Bucket]:  # fmt: skip
    aggregates = ", ".join(f"sum({f}_sum), sum({f}_n), min({f}_min), max({f}_max)" for f in fields)
    where = "run_id = :run_id AND rank = :rank AND gpu = :gpu AND width = :width"
    params: dict[str, Any] = {**key, "width": width}
    if j0 is not None:
        where += " AND bucket >= :lo"
        params["lo"] = j0 * k
    if j1 is not None:
        where += " AND bucket < :hi"
        params["hi"] = j1 * k
    # bucket and k are integers: integer division on both databases.
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
    return {int(row[0]): _bucket(row[1:], len(fields)) for row in rows}


def _from_rows(
    session: Session, where: Sequence[Any], fields: Sequence[str], chart_width: float
) -> dict[int, Bucket]:
    t = col(DeviceSample.t)
    j = bucket_of(session, t / float(chart_width))
    aggregates: list[Any] = [j, func.min(t)]
    for f in fields:
        value = cast(col(getattr(DeviceSample, f)), Float)
        aggregates += [func.sum(value), func.count(value), func.min(value), func.max(value)]
    rows = session.connection().execute(select_columns(*aggregates).where(*where).group_by(j))
    return {int(row[0]): _bucket(row[1:], len(fields)) for row in rows.all()}


def _bucket(row: Sequence[Any], n_fields: int) -> Bucket:
    """A chart bucket from a row: first t, then per field sum, count, min, max."""
    out: Bucket = [float(row[0])]
    for i in range(n_fields):
        total, count, low, high = row[1 + 4 * i : 5 + 4 * i]
        out.append(
            [
                float(total or 0.0),
                int(count or 0),
                None if low is None else float(low),
                None if high is None else float(high),
            ]
        )
    return out


def _merge(a: Bucket, b: Bucket) -> Bucket:
    out: Bucket = [min(a[0], b[0])]
    for x, y in zip(a[1:], b[1:], strict=True):
        lows = [v for v in (x[2], y[2]) if v is not None]
        highs = [v for v in (x[3], y[3]) if v is not None]
        out.append(
            [x[0] + y[0], x[1] + y[1], min(lows) if lows else None, max(highs) if highs else None]
        )
    return out
