"""Device and host samples over wall-clock time, one series per (rank, GPU) or rank, each
downsampled in SQL to at most `max_points` buckets.

A long run holds one sample a second per GPU (76,000 per GPU in 21 h), so the reads stay
few and lean: one query finds the series and their spans, one more per series reads either
its rows (when they fit) or per bucket the mean, min and max of each field; the rows come
back as floats and are turned into columns whole, never value by value. A device series'
buckets of at least a rollup width come from its rollups (api.device_rollup_reads), and the
whole run's spans too: neither reads the samples.
"""

from collections.abc import Sequence
from typing import Any

from sqlalchemy import Float, Integer, cast, func, text
from sqlmodel import Session, col, select

from stoker_server.api.device_rollup_reads import (
    has_rollups,
    rollup_buckets,
    rollup_spans,
    rollup_width,
)
from stoker_server.api.queries import bucket_of
from stoker_server.core.db import select_columns
from stoker_server.core.errors import BadRequest
from stoker_server.core.models import DEVICE_ROLLUP_FIELDS, DeviceSample, HostSample, Run

# Every numeric field of DeviceSample: the ones the device rollups aggregate too.
DEVICE_FIELDS = DEVICE_ROLLUP_FIELDS
HOST_FIELDS = ("proc_cpu", "sys_cpu", "rss", "mem_used", "mem_total")


def _fields(requested: str | None, allowed: Sequence[str]) -> list[str]:
    if not requested:
        return list(allowed)
    names = [n.strip() for n in requested.split(",") if n.strip()]
    unknown = [n for n in names if n not in allowed]
    if unknown or not names:
        raise BadRequest(f"unknown fields {unknown}; choose from {', '.join(allowed)}")
    return names


def _time_range(table: Any, since_t: float | None, until_t: float | None) -> list[Any]:
    where = []
    if since_t is not None:
        where.append(col(table.t) > since_t)
    if until_t is not None:
        where.append(col(table.t) < until_t)
    return where


def device_series(
    *, session: Session, run_id: int, max_points: int, gpu: int | None = None,
    fields: str | None = None, since_t: float | None = None, until_t: float | None = None,
) -> dict[str, Any]:  # fmt: skip
    """Device samples per (rank, GPU) over wall-clock time, each downsampled to `max_points`."""
    chosen = _fields(fields, DEVICE_FIELDS)
    where = [DeviceSample.run_id == run_id, *_time_range(DeviceSample, since_t, until_t)]
    # GPU by GPU: each then reads one range of the (run_id, gpu, t) index.
    series = []
    for device in [gpu] if gpu is not None else _gpus(session, run_id):
        picked = [*where, DeviceSample.gpu == device]
        window = (since_t, until_t)
        spans = None
        if since_t is None and until_t is None:
            spans = rollup_spans(session, run_id=run_id, gpu=device)
        rollups = spans is not None
        if spans is None:
            spans = _spans(session, DeviceSample, ("rank",), picked)
        for rank, total, first, last in spans:
            key = {"run_id": run_id, "rank": rank, "gpu": device}
            rows = [*picked, DeviceSample.rank == rank]
            width = rollup_width(first, last, max_points) if total > max_points else None
            if width is not None and (rollups or has_rollups(session, **key)):
                data = rollup_buckets(
                    session, key=key, fields=chosen, width=width, window=window, raw=rows
                )
            elif total <= max_points:
                data = _rows(session, DeviceSample, rows, chosen)
            else:
                data = _buckets(session, DeviceSample, rows, chosen, first, last, max_points)
            series.append(
                {"rank": rank, "gpu": device, "total": total,
                 "downsampled": total > max_points, **data}
            )  # fmt: skip
    series.sort(key=lambda s: (s["rank"], s["gpu"]))
    return {"run_id": run_id, "fields": chosen, "series": series, **_compacted(session, run_id)}


# The run's GPU numbers, one index lookup each (a DISTINCT would read every sample).
_GPUS = text(
    "WITH RECURSIVE g(gpu) AS ("
    " SELECT min(gpu) FROM devicesample WHERE run_id = :run_id"
    " UNION ALL"
    " SELECT (SELECT min(gpu) FROM devicesample WHERE run_id = :run_id AND gpu > g.gpu)"
    " FROM g WHERE g.gpu IS NOT NULL"
    ") SELECT gpu FROM g WHERE gpu IS NOT NULL"
)


def _gpus(session: Session, run_id: int) -> list[int]:
    return [row[0] for row in session.connection().execute(_GPUS, {"run_id": run_id})]


def host_series(
    *, session: Session, run_id: int, max_points: int, fields: str | None = None,
    since_t: float | None = None, until_t: float | None = None,
) -> dict[str, Any]:  # fmt: skip
    """Host samples per rank over wall-clock time, each downsampled to `max_points`."""
    chosen = _fields(fields, HOST_FIELDS)
    where = [HostSample.run_id == run_id, *_time_range(HostSample, since_t, until_t)]
    series = _series(
        session=session, table=HostSample, keys=("rank",), where=where, fields=chosen,
        max_points=max_points,
    )  # fmt: skip
    return {"run_id": run_id, "fields": chosen, "series": series, **_compacted(session, run_id)}


def _series(
    *,
    session: Session,
    table: Any,
    keys: Sequence[str],
    where: Sequence[Any],
    fields: Sequence[str],
    max_points: int,
) -> list[dict[str, Any]]:
    """One series per value of the `keys` columns, ordered by them: `total` rows, and the
    rows themselves (`t` and each field) when they fit in `max_points`, else buckets of
    equal time over the series' own span, each at its first sample's `t` with the mean of
    each field and its min and max (`<field>_min`, `<field>_max`), so spikes and dips stay."""
    key_columns = [col(getattr(table, k)) for k in keys]
    spans = _spans(session, table, keys, where)
    out = []
    for span in spans:
        identity = dict(zip(keys, span[: len(keys)], strict=True))
        total, first, last = span[len(keys) :]
        picked = [*where, *(c == v for c, v in zip(key_columns, identity.values(), strict=True))]
        if total <= max_points:
            data = _rows(session, table, picked, fields)
        else:
            data = _buckets(session, table, picked, fields, first, last, max_points)
        out.append({**identity, "total": total, "downsampled": total > max_points, **data})
    return out


def _spans(session: Session, table: Any, keys: Sequence[str], where: Sequence[Any]) -> list:
    """Per value of the `keys` columns, in their order: the keys, the row count, first and
    last `t`."""
    key_columns = [col(getattr(table, k)) for k in keys]
    t = col(table.t)
    return list(
        session.exec(
            select_columns(*key_columns, func.count(), func.min(t), func.max(t))
            .where(*where)
            .group_by(*key_columns)
            .order_by(*key_columns)
        ).all()
    )


def _rows(session: Session, table: Any, where: Sequence[Any], fields: Sequence[str]) -> dict:
    """A series' rows as columns, in time order."""
    t = col(table.t)
    query = select_columns(t, *(col(getattr(table, f)) for f in fields)).where(*where)
    rows = session.connection().execute(query.order_by(t)).all()
    columns = list(zip(*rows, strict=True)) if rows else [() for _ in range(len(fields) + 1)]
    return {"t": list(columns[0]), **{f: list(c) for f, c in zip(fields, columns[1:], strict=True)}}


def _buckets(
    session: Session,
    table: Any,
    where: Sequence[Any],
    fields: Sequence[str],
    first: float,
    last: float,
    max_points: int,
) -> dict[str, list[Any]]:
    """A series' rows in at most `max_points` buckets of equal time from `first` to `last`."""
    t = col(table.t)
    span = float(last - first)
    width = span / (max_points - 1) if span > 0 else 1.0
    bucket = bucket_of(session, (t - float(first)) / width)
    aggregates: list[Any] = [func.min(t)]
    for f in fields:
        column = col(getattr(table, f))
        # Integer columns (throttle) as floats: PostgreSQL's avg of an integer is a numeric.
        integer = isinstance(table.__table__.c[f].type, Integer)
        value = cast(column, Float) if integer else column
        aggregates += [func.avg(value), func.min(value), func.max(value)]
    query = select_columns(*aggregates).where(*where).group_by(bucket).order_by(func.min(t))
    rows = session.connection().execute(query).all()
    columns = list(zip(*rows, strict=True))
    out: dict[str, list[Any]] = {"t": list(columns[0])}
    for i, name in enumerate(fields):
        base = 1 + 3 * i
        out[name] = list(columns[base])
        out[f"{name}_min"] = list(columns[base + 1])
        out[f"{name}_max"] = list(columns[base + 2])
    return out


def _compacted(session: Session, run_id: int) -> dict[str, Any]:
    """A sample series' retention flag: `compacted` when retention thinned the run's samples
    to `KEEP_SAMPLES` per series, so zooming in shows no finer detail."""
    compacted_at = session.exec(select(Run.compacted_at).where(Run.id == run_id)).first()
    return {"compacted": compacted_at is not None}
