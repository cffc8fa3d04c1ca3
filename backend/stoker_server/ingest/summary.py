"""Incremental run statistics.

A run's `stats` JSON holds running sums and a log-bucketed histogram of step times, so
the median and p95 come from the histogram (within 1 % relative error) instead of a scan
over millions of step rows on every request.
"""

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from stoker_server.core.levels import shown_share
from stoker_server.core.metric_goals import metric_direction
from stoker_server.core.models import Run, RunPublic, RunSummary, WorkerSummary

# Buckets are powers of 1.02 of one microsecond: adjacent bounds differ by 2 %, so the
# bucket midpoint is within 1 % of any value in it.
_BUCKET_BASE = 1.02
_BUCKET_UNIT_S = 1e-6


def _bucket_value_s(bucket: int) -> float:
    return _BUCKET_UNIT_S * _BUCKET_BASE**bucket


@dataclass(frozen=True)
class TimedSteps:
    """The steps that count for timing, as arrays (unknown waits and batch sizes are NaN)."""

    dur: np.ndarray
    end: np.ndarray  # t + dur
    wait: np.ndarray
    batch_size: np.ndarray
    waited: np.ndarray  # wait is known
    sized: np.ndarray  # batch size is known


def timed_steps(
    step: Sequence[int] | np.ndarray,
    t: Sequence[float] | np.ndarray,
    dur: Sequence[float] | np.ndarray,
    wait: Sequence[float | None] | np.ndarray,
    batch_size: Sequence[int | None] | np.ndarray,
) -> TimedSteps:
    """Every step but step 0, which traces and compiles the train function: not steady state."""
    timed = np.asarray(step, dtype=np.int64) != 0
    d = np.asarray(dur, dtype=np.float64)[timed]
    w = np.asarray(wait, dtype=np.float64)[timed]
    bs = np.asarray(batch_size, dtype=np.float64)[timed]
    end = np.asarray(t, dtype=np.float64)[timed] + d
    return TimedSteps(d, end, w, bs, ~np.isnan(w), ~np.isnan(bs))


def add_steps(
    stats: dict[str, Any],
    *,
    steps: Sequence[int] | np.ndarray,
    t: Sequence[float] | np.ndarray,
    dur: Sequence[float] | np.ndarray,
    wait: Sequence[float | None] | np.ndarray,
    batch_size: Sequence[int | None] | np.ndarray,
) -> dict[str, Any]:
    """Return `stats` updated with one batch of steps. Step 0 (tracing, compilation) is skipped.

    Bucket k of the step-time histogram holds durations that round to UNIT * BASE**k. The
    columns are handled as numpy arrays (a missing wait or batch size becomes NaN): this runs
    for every stored batch, and a per-row Python loop was a third of the writer's time.
    """
    new = dict(stats)
    n = len(steps)
    if n == 0:
        return new
    step_a = np.asarray(steps, dtype=np.int64)
    t_a = np.asarray(t, dtype=np.float64)
    dur_a = np.asarray(dur, dtype=np.float64)
    timed = timed_steps(step_a, t_a, dur_a, wait, batch_size)  # step 0 counts, is not timed
    timed_dur, timed_wait, timed_bs = timed.dur, timed.wait, timed.batch_size
    waited, sized = timed.waited, timed.sized
    scaled = np.maximum(timed_dur, _BUCKET_UNIT_S) / _BUCKET_UNIT_S
    buckets = np.maximum(0, np.rint(np.log(scaled) / math.log(_BUCKET_BASE))).astype(np.int64)
    hist: dict[str, int] = dict(new.get("dur_hist", {}))
    counts = np.bincount(buckets)
    for bucket in np.flatnonzero(counts).tolist():
        key = str(bucket)
        hist[key] = hist.get(key, 0) + int(counts[bucket])
    last_end = float(np.max(t_a + dur_a))
    first_t = float(np.min(t_a))
    new["first_t"] = min(new.get("first_t", first_t), first_t)
    new["last_t"] = max(new.get("last_t", last_end), last_end)
    last = int(np.max(step_a))
    new.update(
        steps=new.get("steps", 0) + n,
        timed_steps=new.get("timed_steps", 0) + len(timed_dur),
        dur_sum_s=new.get("dur_sum_s", 0.0) + float(timed_dur.sum()),
        waited_dur_sum_s=new.get("waited_dur_sum_s", 0.0) + float(timed_dur[waited].sum()),
        waited_steps=new.get("waited_steps", 0) + int(waited.sum()),
        wait_sum_s=new.get("wait_sum_s", 0.0) + float(timed_wait[waited].sum()),
        samples=new.get("samples", 0) + int(timed_bs[sized].sum()),
        sized_dur_sum_s=new.get("sized_dur_sum_s", 0.0) + float(timed_dur[sized].sum()),
        last_step=last if new.get("last_step") is None else max(new["last_step"], last),
        dur_hist=hist,
    )
    return new


def add_worker_steps(
    stats: dict[str, Any],
    *,
    rank: int,
    steps: Sequence[int] | np.ndarray,
    t: Sequence[float] | np.ndarray,
    dur: Sequence[float] | np.ndarray,
    wait: Sequence[float | None] | np.ndarray,
    batch_size: Sequence[int | None] | np.ndarray,
) -> dict[str, Any]:
    """Return `stats` with one batch of worker `rank`'s steps added to that worker's own
    statistics (`stats["workers"][rank]["timing"]`, the shape `add_steps` keeps)."""
    workers = dict(stats.get("workers", {}))
    worker = dict(workers.get(str(rank), {}))
    worker["timing"] = add_steps(
        worker.get("timing", {}), steps=steps, t=t, dur=dur, wait=wait, batch_size=batch_size
    )
    workers[str(rank)] = worker
    return {**stats, "workers": workers}


def gpu_count(environment: dict[str, Any]) -> int:
    """How many GPUs one worker trains on, from its hello's environment.

    The GPUs NVML saw visible to the process (`gpus`, which honours CUDA_VISIBLE_DEVICES),
    else TensorFlow's physical GPUs (`tf_gpus`); capped by the strategy's `replicas` when that
    is smaller (the default strategy trains on one GPU of several visible); 1 when there is no
    GPU information. `replicas` alone never raises the count: a multi-worker strategy counts
    every worker's replicas.
    """
    counts = [environment.get(key) for key in ("gpus", "tf_gpus")]
    visible = next((len(c) for c in counts if isinstance(c, list) and c), 0)
    replicas = environment.get("replicas")
    if visible and isinstance(replicas, int) and not isinstance(replicas, bool) and replicas >= 1:
        visible = min(visible, replicas)
    return max(visible, 1)


def set_worker_gpus(stats: dict[str, Any], *, rank: int, gpus: int) -> dict[str, Any]:
    """`stats` with the number of GPUs worker `rank` trains on (see `gpu_count`)."""
    workers = dict(stats.get("workers", {}))
    workers[str(rank)] = {**workers.get(str(rank), {}), "gpus": gpus}
    return {**stats, "workers": workers}


def add_metrics(stats: dict[str, Any], *, values: Sequence[float | None]) -> dict[str, Any]:
    """Count metric values that arrived as NaN/Inf (stored as null): a diverged loss shows."""
    nulls = sum(1 for v in values if v is None)
    if not nulls:
        return stats
    return {**stats, "nonfinite_metrics": stats.get("nonfinite_metrics", 0) + nulls}


def metric_goal(name: str, config: dict[str, Any]) -> tuple[str, bool]:
    """Whether an epoch metric is best at its minimum or maximum, and whether that direction
    is the metric's own (core.metric_goals: the user's choice or Keras's): a value without one
    (`learning_rate`) is ranked as "max" for its best, and never starred."""
    direction = metric_direction(name, config)
    return direction or "max", direction is not None


def epoch_metric_summary(
    epochs: Sequence[tuple[int, float | None]], *, goal: str, directed: bool = True
) -> dict[str, Any]:
    """The last value and the best one (earliest epoch on ties) of one metric's epochs, given
    in epoch order; a null (NaN/Inf) value is never best but may be last."""
    best: tuple[int, float] | None = None
    for epoch, value in epochs:
        if value is None:
            continue
        if best is None or (value < best[1] if goal == "min" else value > best[1]):
            best = (epoch, value)
    last_epoch, last = epochs[-1] if epochs else (None, None)
    return {
        "last": last, "last_epoch": last_epoch, "best": None if best is None else best[1],
        "best_epoch": None if best is None else best[0], "goal": goal, "directed": directed,
        "epochs": len(epochs),
    }  # fmt: skip


# A run's summary lists at most this many epoch metrics (the rows are all stored).
MAX_SUMMARY_EPOCH_METRICS = 200


def summarised_epoch_names(stats: dict[str, Any], names: Iterable[str]) -> list[str]:
    """The metrics among a batch's epoch rows whose summary to refresh: each one the summary
    holds already, then new ones while it has room (`MAX_SUMMARY_EPOCH_METRICS`)."""
    held = stats.get("epoch_metrics", {})
    distinct = list(dict.fromkeys(names))
    room = max(MAX_SUMMARY_EPOCH_METRICS - len(held), 0)
    return [n for n in distinct if n in held] + [n for n in distinct if n not in held][:room]


def add_epoch_metrics(stats: dict[str, Any], summaries: dict[str, Any]) -> dict[str, Any]:
    """`stats` with these metrics' epoch summaries (`epoch_metric_summary`) set."""
    return {**stats, "epoch_metrics": {**stats.get("epoch_metrics", {}), **summaries}}


# GPM fields whose run means the summary keeps (`<field>_mean`).
GPM_SUMMARY_FIELDS = ("sm_util", "sm_occupancy", "tensor_util", "dram_bw_util")


def add_device_samples(
    stats: dict[str, Any],
    *,
    util: Sequence[float | None],
    mem_used: Sequence[float | None],
    tf_mem_peak: Sequence[float | None],
    rank: int = 0,
    gpu: Sequence[int] = (),
    gpm: dict[str, Sequence[float | None]] | None = None,
    energy_j: Sequence[float | None] = (),
    energy_integrated: Sequence[bool | None] = (),
) -> dict[str, Any]:
    """Running GPU utilization mean, peak memory (NVML used, TF allocator peak), GPM means
    (only over rows that have them) and each GPU's latest cumulative energy."""
    new = dict(stats)
    known = [u for u in util if u is not None]
    new["util_sum"] = new.get("util_sum", 0.0) + sum(known)
    new["util_count"] = new.get("util_count", 0) + len(known)
    for name, column in (gpm or {}).items():
        present = [v for v in column if v is not None]
        if present:
            new[f"{name}_sum"] = new.get(f"{name}_sum", 0.0) + sum(present)
            new[f"{name}_count"] = new.get(f"{name}_count", 0) + len(present)
    if any(e is not None for e in energy_j):
        energy = dict(new.get("energy", {}))
        for i, joules in enumerate(energy_j):
            if joules is None:
                continue
            key = f"{rank}:{gpu[i]}"
            integrated = bool(energy_integrated[i]) if i < len(energy_integrated) else False
            old = energy.get(key, {})
            energy[key] = {
                "j": max(float(joules), old.get("j", 0.0)),
                "integrated": integrated or old.get("integrated", False),
            }
        new["energy"] = energy
    for key, column in (("peak_mem_used", mem_used), ("peak_tf_mem", tf_mem_peak)):
        present = [v for v in column if v is not None]
        if present:
            new[key] = max(new.get(key, 0.0), max(present))
    return new


def add_agent_counters(
    stats: dict[str, Any], *, stream: str, counters: dict[str, int]
) -> dict[str, Any]:
    """Keep each agent stream's latest cumulative counters (dropped, spooled rows)."""
    agents = dict(stats.get("agents", {}))
    agents[stream] = counters
    return {**stats, "agents": agents}


def set_unsent_steps(stats: dict[str, Any], *, stream: str, steps: int) -> dict[str, Any]:
    """Keep how many steps each agent stream still holds in its spool as its run ended."""
    unsent = {**stats.get("unsent_steps", {}), stream: steps}
    return {**stats, "unsent_steps": {k: v for k, v in unsent.items() if v}}


def _quantile_s(hist: dict[str, int], q: float) -> float | None:
    total = sum(hist.values())
    if total == 0:
        return None
    rank = q * (total - 1)
    seen = 0
    for bucket in sorted(hist, key=int):
        seen += hist[bucket]
        if seen > rank:
            return _bucket_value_s(int(bucket))
    return _bucket_value_s(int(max(hist, key=int)))


def _timing(stats: dict[str, Any]) -> dict[str, Any]:
    """Median step time, input-wait share and throughput of `add_steps` statistics."""
    median = _quantile_s(stats.get("dur_hist", {}), 0.5)
    waited = stats.get("waited_dur_sum_s", 0.0)
    sized = stats.get("sized_dur_sum_s", 0.0)
    return {
        "step_time_ms_median": None if median is None else median * 1000,
        # As every surface shows it (levels.shown_share): one figure in the API and the UI.
        "input_wait_share": shown_share(stats["wait_sum_s"] / waited) if waited > 0 else None,
        "samples_per_s": stats["samples"] / sized if sized > 0 else None,
        "input_wait_s": stats.get("wait_sum_s", 0.0),
    }


def _gpm_means(stats: dict[str, Any]) -> dict[str, Any]:
    """`<field>_mean` of each GPM field over the rows that had it; null for a run without."""
    return {
        f"{name}_mean": stats[f"{name}_sum"] / stats[f"{name}_count"]
        if stats.get(f"{name}_count")
        else None
        for name in GPM_SUMMARY_FIELDS
    }


def _energy(stats: dict[str, Any]) -> dict[str, Any]:
    """The run's energy over all its GPUs (null when none reported any) and whether any of it
    was integrated from power."""
    energy = stats.get("energy") or {}
    if not energy:
        return {"energy_j": None, "energy_integrated": False}
    return {
        "energy_j": sum(e["j"] for e in energy.values()),
        "energy_integrated": any(e.get("integrated") for e in energy.values()),
    }


def worker_summaries(stats: dict[str, Any]) -> list[WorkerSummary]:
    """Every worker of the run by rank, with its own steps' statistics."""
    workers = []
    for rank, worker in sorted(stats.get("workers", {}).items(), key=lambda item: int(item[0])):
        timing = worker.get("timing", {})
        summary = WorkerSummary(
            rank=int(rank), host=worker.get("host", ""), pid=worker.get("pid", 0),
            status=worker.get("status", "running"), steps=timing.get("steps", 0),
            gpus=worker.get("gpus", 1), **_timing(timing),
        )  # fmt: skip
        workers.append(summary)
    return workers


def summarize(stats: dict[str, Any]) -> RunSummary:
    """The public summary of a run from its running statistics."""
    hist = stats.get("dur_hist", {})
    p95 = _quantile_s(hist, 0.95)
    workers = worker_summaries(stats)
    # Each worker's GPUs idle while that worker waits; with no worker recorded, one GPU.
    lost_gpu_s = (
        sum(w.input_wait_s * w.gpus for w in workers) if workers else stats.get("wait_sum_s", 0.0)
    )
    return RunSummary(
        # Workers of one job run the same steps: the job ran as many as its furthest worker.
        steps=max((w.steps for w in workers), default=0) or stats.get("steps", 0),
        step_time_ms_p95=None if p95 is None else p95 * 1000,
        gpu_util_mean=stats["util_sum"] / stats["util_count"] if stats.get("util_count") else None,
        **_timing(stats),
        lost_gpu_s=lost_gpu_s,
        peak_memory_bytes=stats.get("peak_mem_used"),
        peak_tf_memory_bytes=stats.get("peak_tf_mem"),
        **_gpm_means(stats),
        **_energy(stats),
        steps_to_upload=sum(stats.get("unsent_steps", {}).values()),
        duration_s=stats["last_t"] - stats["first_t"] if "first_t" in stats else None,
        dropped_rows=sum(a.get("dropped_rows", 0) for a in stats.get("agents", {}).values()),
        unreadable_spool_files=sum(
            a.get("unreadable_spool_files", 0) for a in stats.get("agents", {}).values()
        ),
        nonfinite_metrics=stats.get("nonfinite_metrics", 0),
        epoch_metrics=stats.get("epoch_metrics", {}),
        workers=workers,
    )


def stored_summary(stats: dict[str, Any]) -> dict[str, Any]:
    """A run's `summary` column: `summarize` without the fields computed on read (the
    verdict, from the thresholds of the day)."""
    return summarize(stats).model_dump(exclude=set(RunSummary.model_computed_fields))


def run_public(run: Run) -> RunPublic:
    assert run.id is not None
    summary = RunSummary.model_validate(run.summary) if run.summary else summarize(run.stats)
    return RunPublic(
        id=run.id,
        name=run.name,
        project=run.project,
        tags=run.tags,
        notes=run.notes,
        status=run.status,
        started_at=run.started_at,
        ended_at=run.ended_at,
        last_seen_at=run.last_seen_at,
        pinned=run.pinned,
        compacted_at=run.compacted_at,
        config=run.config,
        environment=run.environment,
        summary=summary,
    )
