"""Run summaries from the incremental histogram match exact statistics; the verdict is read
from the input-wait share."""

import numpy as np
import pytest

from stoker_server.core.levels import HIGHLY_INPUT_BOUND, MODERATELY_INPUT_BOUND
from stoker_server.core.models import Run, RunSummary
from stoker_server.ingest.summary import add_steps, run_public, stored_summary, summarize


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


def _waiting(share: float) -> dict:
    return add_steps({}, steps=[1, 2], t=[1.0, 2.0], dur=[0.1, 0.1], wait=[0.1 * share] * 2,
                     batch_size=[8, 8])  # fmt: skip


@pytest.mark.parametrize(
    ("share", "verdict"),
    [
        (0.63, "highly_input_bound"),
        (HIGHLY_INPUT_BOUND, "highly_input_bound"),
        (0.1, "moderately_input_bound"),
        (MODERATELY_INPUT_BOUND, "moderately_input_bound"),
        (0.049, "not_input_bound"),
    ],
)
def test_summary_verdict_is_the_level_of_the_runs_input_wait_share(
    share: float, verdict: str
) -> None:
    assert summarize(_waiting(share)).verdict == verdict


def test_summary_verdict_is_computed_on_read_never_stored() -> None:
    assert summarize(add_steps({}, steps=[1], t=[1.0], dur=[0.1], wait=[None],
                               batch_size=[None])).verdict is None  # fmt: skip
    stored = stored_summary(_waiting(0.5))
    assert "verdict" not in stored
    # A summary stored before the verdict existed reads with one.
    run = Run(id=1, run_key="k", name="n", summary=stored)
    assert run_public(run).summary.verdict == "highly_input_bound"
    assert RunSummary.model_validate(stored).model_dump(mode="json")["verdict"] == (
        "highly_input_bound"
    )
