"""Incremental run statistics.

A run's `stats` JSON holds running sums and a log-bucketed histogram of step times, so
the median and p95 come from the histogram (within 1 % relative error) instead of a scan
over millions of step rows on every request.
"""

import math
from collections.abc import Sequence
from typing import Any

from backend.models import RunSummary

# Buckets are powers of 1.02 of one microsecond: adjacent bounds differ by 2 %, so the
# bucket midpoint is within 1 % of any value in it.
_BUCKET_BASE = 1.02
_BUCKET_UNIT_S = 1e-6


def _bucket_of(duration_s: float) -> int:
    return max(0, round(math.log(max(duration_s, _BUCKET_UNIT_S) / _BUCKET_UNIT_S, _BUCKET_BASE)))


def _bucket_value_s(bucket: int) -> float:
    return _BUCKET_UNIT_S * _BUCKET_BASE**bucket


def add_steps(
    stats: dict[str, Any],
    *,
    steps: Sequence[int],
    t: Sequence[float],
    dur: Sequence[float],
    wait: Sequence[float | None],
    batch_size: Sequence[int | None],
) -> dict[str, Any]:
    """Return `stats` updated with one batch of steps. Step 0 (tracing, compilation) is skipped."""
    new = dict(stats)
    hist: dict[str, int] = dict(new.get("dur_hist", {}))
    count = new.get("steps", 0)
    timed = new.get("timed_steps", 0)
    dur_sum = new.get("dur_sum_s", 0.0)
    waited_dur_sum = new.get("waited_dur_sum_s", 0.0)
    wait_sum = new.get("wait_sum_s", 0.0)
    samples = new.get("samples", 0)
    sized_dur_sum = new.get("sized_dur_sum_s", 0.0)
    last_step = new.get("last_step")
    for i, step in enumerate(steps):
        count += 1
        last_step = step if last_step is None else max(last_step, step)
        if step == 0:
            continue
        d = dur[i]
        timed += 1
        dur_sum += d
        key = str(_bucket_of(d))
        hist[key] = hist.get(key, 0) + 1
        w = wait[i] if i < len(wait) else None
        if w is not None:
            wait_sum += w
            waited_dur_sum += d
        bs = batch_size[i] if i < len(batch_size) else None
        if bs is not None:
            samples += bs
            sized_dur_sum += d
    if t:
        new["first_t"] = min(new.get("first_t", t[0]), t[0])
        new["last_t"] = max(new.get("last_t", t[-1]), t[-1] + dur[-1])
    new.update(
        steps=count,
        timed_steps=timed,
        dur_sum_s=dur_sum,
        waited_dur_sum_s=waited_dur_sum,
        wait_sum_s=wait_sum,
        samples=samples,
        sized_dur_sum_s=sized_dur_sum,
        last_step=last_step,
        dur_hist=hist,
    )
    return new


def add_metrics(stats: dict[str, Any], *, values: Sequence[float | None]) -> dict[str, Any]:
    """Count metric values that arrived as NaN/Inf (stored as null): a diverged loss shows."""
    nulls = sum(1 for v in values if v is None)
    if not nulls:
        return stats
    return {**stats, "nonfinite_metrics": stats.get("nonfinite_metrics", 0) + nulls}


def add_device_samples(
    stats: dict[str, Any],
    *,
    util: Sequence[float | None],
    mem_used: Sequence[float | None],
    tf_mem_peak: Sequence[float | None],
) -> dict[str, Any]:
    """Running GPU utilization mean and peak memory (NVML used, TF allocator peak)."""
    new = dict(stats)
    known = [u for u in util if u is not None]
    new["util_sum"] = new.get("util_sum", 0.0) + sum(known)
    new["util_count"] = new.get("util_count", 0) + len(known)
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


def summarize(stats: dict[str, Any]) -> RunSummary:
    """The public summary of a run from its running statistics."""
    hist = stats.get("dur_hist", {})
    median = _quantile_s(hist, 0.5)
    p95 = _quantile_s(hist, 0.95)
    waited = stats.get("waited_dur_sum_s", 0.0)
    sized = stats.get("sized_dur_sum_s", 0.0)
    return RunSummary(
        steps=stats.get("steps", 0),
        step_time_ms_median=None if median is None else median * 1000,
        step_time_ms_p95=None if p95 is None else p95 * 1000,
        input_wait_share=stats["wait_sum_s"] / waited if waited > 0 else None,
        gpu_util_mean=stats["util_sum"] / stats["util_count"] if stats.get("util_count") else None,
        samples_per_s=stats["samples"] / sized if sized > 0 else None,
        peak_memory_bytes=stats.get("peak_mem_used"),
        peak_tf_memory_bytes=stats.get("peak_tf_mem"),
        duration_s=stats["last_t"] - stats["first_t"] if "first_t" in stats else None,
        dropped_rows=sum(a.get("dropped_rows", 0) for a in stats.get("agents", {}).values()),
        nonfinite_metrics=stats.get("nonfinite_metrics", 0),
    )
