"""Run summaries from the incremental histogram match exact statistics."""

import numpy as np

from backend.ingest.summary import add_steps, summarize


def test_summary_quantiles_within_one_percent_of_exact() -> None:
    rng = np.random.default_rng(3)
    durations = rng.lognormal(mean=np.log(0.02), sigma=0.5, size=5000)
    stats: dict = {}
    for start in range(0, 5000, 700):
        chunk = durations[start : start + 700]
        steps = list(range(start + 1, start + 1 + len(chunk)))
        stats = add_steps(
            stats, steps=steps, t=[float(s) for s in steps], dur=chunk.tolist(),
            wait=[d * 0.25 for d in chunk], batch_size=[32] * len(chunk),
        )  # fmt: skip
    summary = summarize(stats)
    assert summary.steps == 5000
    exact_median = float(np.median(durations)) * 1000
    exact_p95 = float(np.percentile(durations, 95)) * 1000
    assert abs(summary.step_time_ms_median - exact_median) / exact_median < 0.015
    assert abs(summary.step_time_ms_p95 - exact_p95) / exact_p95 < 0.015
    assert abs(summary.input_wait_share - 0.25) < 1e-9
    assert abs(summary.samples_per_s - 32 * 5000 / durations.sum()) < 1e-6


def test_summary_skips_step_zero_and_reports_unknown_wait_as_null() -> None:
    stats = add_steps({}, steps=[0, 1], t=[0.0, 1.0], dur=[5.0, 0.01], wait=[None, None],
                      batch_size=[None, None])  # fmt: skip
    summary = summarize(stats)
    assert summary.steps == 2
    assert abs(summary.step_time_ms_median - 10.0) < 0.15
    assert summary.input_wait_share is None
    assert summary.samples_per_s is None


def test_summary_of_empty_run_is_empty() -> None:
    summary = summarize({})
    assert summary.steps == 0 and summary.step_time_ms_median is None
