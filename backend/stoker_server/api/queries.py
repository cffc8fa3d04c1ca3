"""Reads for the REST API: runs, server-side downsampled series, comparison, export."""

import csv
import io
import json
from collections.abc import Iterator, Mapping, Sequence
from datetime import UTC
from typing import Any, Literal

from sqlalchemy import ColumnClause, Float, Integer, Text, cast, func, literal_column, text
from sqlalchemy.orm import defer
from sqlmodel import Session, col, select

from stoker_server.core.db import select_columns
from stoker_server.core.errors import BadRequest
from stoker_server.core.levels import VERDICT_WORDS, Verdict, run_verdict
from stoker_server.core.models import (
    EpochMetric,
    Metric,
    Run,
    RunStatus,
    StepRollup,
    StepSeries,
)
from stoker_server.core.step_chunks import (
    StepArrays,
    bucket_steps,
    none_for_nan,
    ranks_with_steps,
    read_steps,
    step_bounds,
)
from stoker_server.core.text import without_nul
from stoker_server.ingest.agent_writes import ROLLUP_WIDTHS
from stoker_server.ingest.summary import run_public


def _like_pattern(text_: str) -> str:
    escaped = text_.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")
    return f"%{escaped.lower()}%"


def _run_filters(
    session: Session, *, project: str | None, tag: str | None, status: RunStatus | None,
    q: str | None,
) -> list[Any]:  # fmt: skip
    # Stored text never holds NUL (protocol.no_nul), and PostgreSQL refuses it in parameters.
    project, tag, q = (None if v is None else without_nul(v) for v in (project, tag, q))
    where: list[Any] = []
    if project is not None:
        where.append(Run.project == project)
    if status is not None:
        where.append(Run.status == status)
    if q:
        where.append(func.lower(Run.name).like(_like_pattern(q), escape="\\"))
    if tag is not None:
        if session.get_bind().dialect.name == "postgresql":
            where.append(
                text("run.tags @> CAST(:tag_json AS jsonb)").bindparams(tag_json=_json([tag]))
            )
        else:
            where.append(
                text(
                    "EXISTS (SELECT 1 FROM json_each(run.tags) WHERE json_each.value = :tag)"
                ).bindparams(tag=tag)
            )
    return where


# `best:<name>` (or `-best:<name>`) sorts runs by the best value of an epoch metric.
BEST_SORT_PREFIX = "best:"
# Numeric summary fields the runs list sorts by (the starvation cost).
SUMMARY_SORT_KEYS = ("input_wait_s", "lost_gpu_s")
RUN_SORT_PATTERN = (
    r"^-?(started_at|name|project|status|last_seen_at|id|"
    + "|".join(SUMMARY_SORT_KEYS)
    + "|"
    + BEST_SORT_PREFIX
    + r".{1,100})$"
)


def summary_number(session: Session, key: str) -> Any:
    """SQL for the number at `run.summary[key]` (NULL when absent); `key` is a trusted name."""
    if session.get_bind().dialect.name == "postgresql":
        return literal_column(f"CAST(run.summary ->> '{key}' AS float)")
    return literal_column(f"json_extract(run.summary, '$.{key}')")


def _run_order(session: Session, sort: str) -> tuple[Any, ...]:
    descending = sort.startswith("-")
    key = sort.lstrip("-")
    if key.startswith(BEST_SORT_PREFIX):
        return _best_order(session, key[len(BEST_SORT_PREFIX) :], descending=descending)
    if key in SUMMARY_SORT_KEYS:
        value = func.coalesce(summary_number(session, key), 0.0)
        tiebreak = col(Run.id)
        return (value.desc(), tiebreak.desc()) if descending else (value, tiebreak)
    order, tiebreak = col(getattr(Run, key)), col(Run.id)
    if descending:
        return order.desc(), tiebreak.desc()
    return order, tiebreak


def _best_order(session: Session, metric: str, *, descending: bool) -> tuple[Any, ...]:
    """Order by the summary's best value of epoch metric `metric`; runs without one last."""
    metric = without_nul(metric)
    if session.get_bind().dialect.name == "postgresql":
        best = "CAST(run.summary -> 'epoch_metrics' -> CAST(:metric AS text) ->> 'best' AS float)"
    else:
        best = (
            "(SELECT json_extract(em.value, '$.best') FROM json_each(run.summary, "
            "'$.epoch_metrics') AS em WHERE em.key = :metric)"
        )
    direction = "DESC" if descending else "ASC"
    order = text(f"{best} IS NULL, {best} {direction}").bindparams(metric=metric)
    return order, col(Run.id).desc() if descending else col(Run.id)


_SCALAR_COLUMNS = (
    "id", "name", "project", "notes", "status", "started_at", "ended_at", "last_seen_at",
    "pinned", "compacted_at",
)  # fmt: skip
_JSON_COLUMNS = ("tags", "config", "environment", "summary")


def list_runs_json(
    *,
    session: Session,
    limit: int = 100,
    offset: int = 0,
    project: str | None = None,
    tag: str | None = None,
    status: RunStatus | None = None,
    q: str | None = None,
    sort: str = "-started_at",
) -> bytes:
    """Runs matching every given filter, sorted, one page of them, and how many match: the
    JSON document the API sends, built without models.

    The JSON columns are read as text and spliced into the answer as stored (no decode and
    re-encode), so a page of 1,000 runs costs little more than reading it. The summary's
    verdict, computed on read (RunSummary.verdict), is spliced into it from its input-wait
    share, which the database reads out of the JSON.
    """
    where = _run_filters(session, project=project, tag=tag, status=status, q=q)
    count = session.exec(select(func.count()).select_from(Run).where(*where)).one()
    columns = [getattr(Run, c) for c in _SCALAR_COLUMNS] + [
        cast(getattr(Run, c), Text) for c in _JSON_COLUMNS
    ]
    columns.append(summary_number(session, "input_wait_share"))
    order = _run_order(session, sort)
    rows = session.exec(
        select(*columns).where(*where).order_by(*order).offset(offset).limit(limit)
    ).all()
    parts = []
    dumps = json.dumps
    for row in rows:
        scalars = dict(zip(_SCALAR_COLUMNS, row[: len(_SCALAR_COLUMNS)], strict=True))
        scalars["status"] = str(scalars["status"].value if scalars["status"] else None)
        scalars["pinned"] = bool(scalars["pinned"])
        for key in ("started_at", "ended_at", "last_seen_at", "compacted_at"):
            moment = scalars[key]
            scalars[key] = None if moment is None else _iso(moment)
        tags, config, environment, summary, share = row[len(_SCALAR_COLUMNS) :]
        summary = _with_verdict(summary, run_verdict(share))
        parts.append(
            f'{dumps(scalars)[:-1]}, "tags": {tags}, "config": {config}, '
            f'"environment": {environment}, "summary": {summary}}}'
        )
    return f'{{"data": [{", ".join(parts)}], "count": {int(count)}}}'.encode()


def _with_verdict(summary: str | None, verdict: Verdict | None) -> str:
    """A stored summary's JSON text (an object, never holding a verdict) with `verdict` and its
    words (`verdict_label`) added as its last keys, as RunSummary's computed fields."""
    words = "null" if verdict is None else json.dumps(VERDICT_WORDS[verdict])
    value = "null" if verdict is None else f'"{verdict}"'  # a Verdict: a plain identifier
    added = f'"verdict": {value}, "verdict_label": {words}'
    if not summary or summary == "{}":
        return f"{{{added}}}"
    return f"{summary[:-1]}, {added}}}"


def _iso(moment: Any) -> str:
    """Datetimes as the API's models write them (UTC, `Z`)."""
    return moment.astimezone(UTC).isoformat().replace("+00:00", "Z")


def _json(value: Any) -> str:
    return json.dumps(value)


def bucket_of(session: Session, expression: Any) -> Any:
    """floor() of a non-negative float expression, on both databases."""
    if session.get_bind().dialect.name == "postgresql":
        return cast(func.floor(expression), Integer)
    return cast(expression, Integer)  # truncates, which is floor for x >= 0


def step_series(
    *,
    session: Session,
    run_id: int,
    max_points: int,
    after_step: int | None = None,
    before_step: int | None = None,
    rank: int = 0,
) -> StepSeries:
    """Steps of one rank in step order, downsampled to at most `max_points` buckets.

    A bucket keeps the mean step time and its min and max, so a single slow step stays
    visible however far the series is zoomed out. Zoomed-out views of long runs read the
    step rollups (models.StepRollup) instead of the steps themselves.
    """
    if session.exec(select(Run.compacted_at).where(Run.id == run_id)).first() is not None:
        return _compacted_step_series(
            session=session, run_id=run_id, max_points=max_points, after_step=after_step,
            before_step=before_step, rank=rank,
        )  # fmt: skip
    connection = session.connection()
    steps: StepArrays | None = None
    if after_step is not None or before_step is not None:
        steps = read_steps(
            connection, run_id, rank=rank,
            first_step=None if after_step is None else after_step + 1,
            last_step=None if before_step is None else before_step - 1,
        )  # fmt: skip
        total = len(steps)
        first_step, last_step = (int(steps.step[0]), int(steps.step[-1])) if total else (0, 0)
    else:
        first, last = step_bounds(connection, run_id, rank)
        first_step, last_step = first or 0, last or 0
        total = session.exec(
            select(func.coalesce(func.sum(StepRollup.n), 0)).where(
                StepRollup.run_id == run_id,
                StepRollup.rank == rank,
                StepRollup.width == ROLLUP_WIDTHS[-1],
            )
        ).one()
    if total <= max_points:
        if steps is None:
            steps = read_steps(connection, run_id, rank=rank)
        return StepSeries(
            run_id=run_id,
            total=len(steps),
            downsampled=False,
            step=steps.step.tolist(),
            t=steps.t.tolist(),
            dur=steps.dur.tolist(),
            wait=steps.wait_or_none(),
        )
    needed = -(-(last_step - first_step + 1) // (max_points - 1))
    tier = max((w for w in ROLLUP_WIDTHS if w <= needed), default=None)
    if tier is not None and steps is None:
        query = _merged_rollups(
            int(-(-needed // tier)),
            StepRollup.run_id == run_id, StepRollup.rank == rank, StepRollup.width == tier,
        )  # fmt: skip
        return _rollup_series(run_id, total, session.exec(query).all())
    # Rollups cover whole runs; a range (or a short run) is bucketed from its steps.
    if steps is None:
        steps = read_steps(connection, run_id, rank=rank)
    width = -(-(last_step - first_step + 1) // max_points)
    reduced = bucket_steps(steps, (steps.step - first_step) // width)
    return StepSeries(
        run_id=run_id,
        total=total,
        downsampled=True,
        step=reduced.step.tolist(),
        t=reduced.t.tolist(),
        dur=reduced.dur_mean.tolist(),
        wait=none_for_nan(reduced.wait_mean),
        dur_min=reduced.dur_min.tolist(),
        dur_max=reduced.dur_max.tolist(),
    )


def _merged_rollups(per_bucket: int, *where: Any) -> Any:
    """Step rollups of one tier (`where` picks run, rank, tier and range) merged `per_bucket`
    at a time: each merged bucket sits at its last step, with the mean, min and max duration
    and the mean wait of the steps it holds."""
    # A literal divisor: GROUP BY and ORDER BY then name the same expression, one sort.
    bucket: ColumnClause[Any] = literal_column(f"steprollup.bucket / {per_bucket}")
    return (
        select_columns(
            func.max(StepRollup.step_max),
            func.max(StepRollup.t_max),
            func.sum(StepRollup.dur_sum) / func.sum(StepRollup.n),
            func.min(StepRollup.dur_min),
            func.max(StepRollup.dur_max),
            func.sum(StepRollup.wait_sum) / func.nullif(func.sum(StepRollup.wait_n), 0),
        )
        .where(*where)
        .group_by(bucket)
        .order_by(bucket)
    )


def _compacted_step_series(
    *,
    session: Session,
    run_id: int,
    max_points: int,
    after_step: int | None,
    before_step: int | None,
    rank: int,
) -> StepSeries:
    """The steps of a run whose raw steps retention removed, from its rollups alone: the
    same buckets a zoomed-out chart reads; a range or a short run gets the finest tier."""
    finest = ROLLUP_WIDTHS[0]
    where = [StepRollup.run_id == run_id, StepRollup.rank == rank]
    if after_step is not None:
        where.append(StepRollup.step_max > after_step)
    if before_step is not None:
        where.append(StepRollup.step_max < before_step)
    total, first_step, last_step = session.exec(
        select(
            func.coalesce(func.sum(StepRollup.n), 0),
            func.min(StepRollup.step_max),
            func.max(StepRollup.step_max),
        ).where(*where, StepRollup.width == finest)
    ).one()
    tier, per_bucket = finest, 1
    if total and first_step is not None and last_step is not None:
        needed = -(-(last_step - first_step + 1) // max(max_points - 1, 1))
        if after_step is None and before_step is None:
            tier = max((w for w in ROLLUP_WIDTHS if w <= needed), default=finest)
        per_bucket = max(1, int(-(-needed // tier)))
    rows = session.exec(_merged_rollups(per_bucket, *where, StepRollup.width == tier)).all()
    return _rollup_series(run_id, int(total), rows, compacted=True, finest_steps=finest)


def _rollup_series(run_id: int, total: int, buckets: Sequence[Any], **extra: Any) -> StepSeries:
    """A downsampled series from `_merged_rollups`' rows."""
    return StepSeries(
        run_id=run_id,
        total=total,
        downsampled=True,
        step=[r[0] for r in buckets],
        t=[r[1] for r in buckets],
        dur=[float(r[2]) for r in buckets],
        wait=[None if r[5] is None else float(r[5]) for r in buckets],
        dur_min=[r[3] for r in buckets],
        dur_max=[r[4] for r in buckets],
        **extra,
    )


def _xy_series(
    *,
    session: Session,
    table: Any,
    where: Sequence[Any],
    x: str,
    fields: Sequence[str],
    max_points: int,
) -> dict[str, Any]:
    """One series of `table` rows ordered by column `x`, bucketed to at most `max_points`.

    Downsampled buckets carry the mean of each field and its min and max (`<field>_min`,
    `<field>_max`), so spikes and dips stay visible.
    """
    x_col = col(getattr(table, x))
    total, x0, x1 = session.exec(
        select(func.count(), func.min(x_col), func.max(x_col)).where(*where)
    ).one()
    if total <= max_points:
        columns = [x_col, *(col(getattr(table, f)) for f in fields)]
        rows = session.exec(select(*columns).where(*where).order_by(x_col)).all()
        out: dict[str, Any] = {"total": total, "downsampled": False, x: [r[0] for r in rows]}
        for i, name in enumerate(fields, start=1):
            out[name] = [r[i] for r in rows]
        return out
    span = float(x1 - x0)
    width = span / (max_points - 1) if span > 0 else 1.0
    bucket = bucket_of(session, (cast(x_col, Float) - x0) / width)
    aggregates: list[Any] = [func.min(x_col)]
    for f in fields:
        c = cast(col(getattr(table, f)), Float)
        aggregates += [func.avg(c), func.min(c), func.max(c)]
    rows = session.exec(select(*aggregates).where(*where).group_by(bucket).order_by(bucket)).all()
    out = {"total": total, "downsampled": True, x: [r[0] for r in rows]}
    for i, name in enumerate(fields):
        base = 1 + 3 * i
        out[name] = [_float(r[base]) for r in rows]
        out[f"{name}_min"] = [_float(r[base + 1]) for r in rows]
        out[f"{name}_max"] = [_float(r[base + 2]) for r in rows]
    return out


def _float(value: Any) -> float | None:
    return None if value is None else float(value)


MetricAxis = Literal["step", "epoch"]


def step_aggregation(environment: Mapping[str, Any]) -> str:
    """What a step series' values are: Keras `fit` (its environment carries `fit_params`)
    logs the running mean of each metric over the epoch so far; a custom loop logs values."""
    return "running_mean_over_epoch" if "fit_params" in environment else "value"


def metric_series(
    *, session: Session, run_id: int, max_points: int, names: Sequence[str] = (), rank: int = 0,
    after_step: int | None = None, before_step: int | None = None, axis: MetricAxis | None = None,
) -> dict[str, Any]:  # fmt: skip
    """Logged scalars, one series per name (all names when none are asked for): by step
    (`axis: "step"`), then the epoch-end values by epoch (`axis: "epoch"`)."""
    base: list[Any] = [Metric.run_id == run_id, Metric.rank == rank]
    available = list(
        session.exec(select(Metric.name).where(*base).distinct().order_by(col(Metric.name))).all()
    )
    epoch_base: list[Any] = [EpochMetric.run_id == run_id]
    epoch_available = list(
        session.exec(
            select(EpochMetric.name).where(*epoch_base).distinct().order_by(col(EpochMetric.name))
        ).all()
    )
    asked = list(dict.fromkeys(names))
    chosen, epoch_chosen = available[:50], epoch_available[:50]
    if asked:  # a name only recorded per epoch gets no empty step series
        chosen = [n for n in asked if n in available or n not in epoch_available]
        epoch_chosen = [n for n in asked if n in epoch_available]
    if after_step is not None:
        base.append(Metric.step > after_step)
        epoch_base.append(EpochMetric.step > after_step)
    if before_step is not None:
        base.append(Metric.step < before_step)
        epoch_base.append(EpochMetric.step < before_step)
    series = []
    if axis != "epoch" and chosen:
        environment = session.exec(select(Run.environment).where(Run.id == run_id)).one()
        aggregation = step_aggregation(environment or {})
        for name in chosen:
            data = _xy_series(
                session=session, table=Metric, where=[*base, Metric.name == name],
                x="step", fields=["value"], max_points=max_points,
            )  # fmt: skip
            series.append({"name": name, "axis": "step", "aggregation": aggregation, **data})
    if axis != "step":
        for name in epoch_chosen:
            data = _xy_series(
                session=session, table=EpochMetric, where=[*epoch_base, EpochMetric.name == name],
                x="epoch", fields=["step", "value"], max_points=max_points,
            )  # fmt: skip
            series.append({"name": name, "axis": "epoch", **data})
    return {"run_id": run_id, "names": available, "epoch_names": epoch_available, "series": series}


def _flatten(value: Any, prefix: str = "") -> dict[str, Any]:
    if isinstance(value, dict) and value:
        out: dict[str, Any] = {}
        for key, item in value.items():
            out.update(_flatten(item, f"{prefix}{key}."))
        return out
    return {prefix[:-1]: value} if prefix else {}


def _differences(documents: list[dict[str, Any]]) -> dict[str, list[Any]]:
    flat = [_flatten(d) for d in documents]
    keys = sorted(set().union(*flat)) if flat else []
    out = {}
    for key in keys:
        values = [f.get(key) for f in flat]
        if any(v != values[0] for v in values[1:]):
            out[key] = values
    return out


def parse_run_ids(raw: str) -> list[int]:
    """`1,2,3` → [1, 2, 3], or a clear 422."""
    parts = [p.strip() for p in raw.split(",") if p.strip()]
    try:
        ids = [int(p) for p in parts]
    except ValueError:
        raise BadRequest(f"runs must be comma-separated run ids, got {raw!r}") from None
    if not ids or len(ids) > 50:
        raise BadRequest("runs must name between 1 and 50 run ids, e.g. runs=1,2,3")
    if any(i < 1 or i > 2**31 - 1 for i in ids):
        raise BadRequest("run ids are positive integers")
    return list(dict.fromkeys(ids))


def compare_runs(*, session: Session, run_ids: Sequence[int]) -> dict[str, Any]:
    """Per-run summaries side by side and the config/environment keys whose values differ.

    An unknown id (a deleted run named by a saved compare link) is not an error: it is listed
    in `missing`, in the order asked, and the runs found are compared (none found: empty)."""
    rows = session.exec(
        select(Run).options(defer(Run.stats)).where(col(Run.id).in_(run_ids))  # type: ignore[arg-type]
    ).all()
    by_id = {r.id: r for r in rows}
    runs = [by_id[i] for i in run_ids if i in by_id]
    return {
        "missing": [i for i in run_ids if i not in by_id],
        "runs": [
            {
                "id": r.id,
                "name": r.name,
                "project": r.project,
                "status": r.status,
                "tags": r.tags,
                "started_at": r.started_at,
                "ended_at": r.ended_at,
                "summary": run_public(r).summary,
            }
            for r in runs
        ],
        # Every epoch metric any of the runs recorded, for overlays and summary rows.
        "epoch_metrics": sorted({n for r in runs for n in r.summary.get("epoch_metrics", {})}),
        "differences": {
            "config": _differences([r.config for r in runs]),
            "environment": _differences([r.environment for r in runs]),
        },
    }


CSV_STEP_WINDOW = 100_000


def steps_csv(*, session: Session, run_id: int) -> Iterator[str]:
    """A run's steps as CSV text chunks (header first), streamed in step order."""
    buffer = io.StringIO()
    writer = csv.writer(buffer, lineterminator="\n")
    writer.writerow(["rank", "step", "t", "dur", "wait", "batch_size"])
    connection = session.connection()
    for rank in ranks_with_steps(connection, run_id):
        first, last = step_bounds(connection, run_id, rank)
        if first is None or last is None:
            continue
        # A window of step numbers at a time: memory stays bounded however long the run.
        for lo in range(first, last + 1, CSV_STEP_WINDOW):
            steps = read_steps(
                connection, run_id, rank=rank, first_step=lo, last_step=lo + CSV_STEP_WINDOW - 1
            )
            columns = (
                steps.rank.tolist(), steps.step.tolist(), map(repr, steps.t.tolist()),
                map(repr, steps.dur.tolist()),
                ("" if w is None else repr(w) for w in steps.wait_or_none()),
                ("" if b is None else b for b in steps.batch_size_or_none()),
            )  # fmt: skip
            writer.writerows(zip(*columns, strict=True))
            yield buffer.getvalue()
            buffer.seek(0)
            buffer.truncate()
    yield buffer.getvalue()
