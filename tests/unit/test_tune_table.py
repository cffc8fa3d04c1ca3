"""`stoker tune`'s verdicts (trainer_agent/tune/table.py) and argument parsing, without
TensorFlow: trial results in, rows out."""

import pytest

from trainer_agent.tune.changes import decide_steps_per_execution
from trainer_agent.tune.command import parse_advice, parse_bytes
from trainer_agent.tune.table import (
    ELEMENTS_DIFFER,
    NO_GAIN,
    NOISE_FLOOR,
    NOT_ASKED,
    NOT_TRIED,
    SLOWER,
    SPEED_UP,
    judge,
    render,
)
from trainer_agent.tune.trial import TrialResult, measure

PARALLEL = ".map(slow_decode, num_parallel_calls=tf.data.AUTOTUNE, deterministic=True)"
EDIT = {"where": "train.py:42", "path": "/x/train.py", "line": 42,
        "before": ".map(slow_decode)", "after": PARALLEL}  # fmt: skip


def _result(trial: str, rate: float | None, *, batches: int = 100, examples: int = 6400,
            wait: float = 0.1) -> TrialResult:  # fmt: skip
    return TrialResult(trial=trial, steps=batches, batches=batches, examples=examples,
                       steps_per_s=rate, input_wait_share=wait)  # fmt: skip


def _change(change_id: str, advice: str, **extra: object) -> dict[str, object]:
    return {"id": change_id, "advice": advice, "label": change_id, "title": change_id,
            "function": "slow_decode", "edit": EDIT, **extra}  # fmt: skip


def _rows(table):  # type: ignore[no-untyped-def]
    return {row.id: row for row in table.rows}


def test_a_gain_beyond_the_repeats_spread_is_a_speed_up_and_the_best() -> None:
    baseline = _result("unchanged", 10.0, wait=0.9)
    changes = [_change("parallel:2", "parallel"), _change("prefetch", "prefetch")]
    trials = {"parallel:2": _result("parallel:2", 22.0), "prefetch": _result("prefetch", 10.3)}
    repeat = _result("parallel:2", 20.0)
    table = judge(baseline, changes, trials, repeat, steps=100)
    rows = _rows(table)
    # The repeat differs by 10 %: that is the noise; 3 % is within it.
    assert table.noise == pytest.approx(0.1)
    assert rows["parallel:2"].verdict == SPEED_UP
    assert rows["parallel:2"].speedup == pytest.approx(2.2)
    assert rows["parallel:2"].repeat_speedup == pytest.approx(2.0)
    assert rows["prefetch"].verdict == NO_GAIN
    assert table.best == "parallel:2"
    assert "2.20x the unchanged run's steps/s, 2.00x again" in table.conclusion
    text = render(table)
    assert "train.py:42  .map(slow_decode)" in text
    assert f"-> {PARALLEL}" in text


def test_noise_has_a_floor_and_a_gain_under_it_is_no_measurable_gain() -> None:
    baseline = _result("unchanged", 10.0)
    changes = [_change("parallel:1", "parallel")]
    table = judge(baseline, changes, {"parallel:1": _result("parallel:1", 10.4)},
                  _result("parallel:1", 10.41), steps=100)  # fmt: skip
    assert table.noise == NOISE_FLOOR
    assert _rows(table)["parallel:1"].verdict == NO_GAIN
    assert table.best is None
    assert "No change Stoker tried gains more than the noise" in table.conclusion


def test_the_best_must_gain_on_both_runs() -> None:
    # First run 1.5x, second 1.04x: the spread is large, and the worse run is within it.
    baseline = _result("unchanged", 10.0)
    changes = [_change("parallel:1", "parallel")]
    table = judge(baseline, changes, {"parallel:1": _result("parallel:1", 15.0)},
                  _result("parallel:1", 10.4), steps=100)  # fmt: skip
    assert _rows(table)["parallel:1"].verdict == NO_GAIN


def test_a_python_map_that_gains_nothing_names_the_gil_and_the_alternatives() -> None:
    baseline = _result("unchanged", 9.0)
    changes = [_change("parallel:1", "parallel", python=True, function="parse")]
    table = judge(baseline, changes, {"parallel:1": _result("parallel:1", 9.1)},
                  _result("parallel:1", 8.9), steps=30)  # fmt: skip
    row = _rows(table)["parallel:1"]
    assert row.verdict == NO_GAIN
    assert "parse runs Python" in row.note and "GIL" in row.note
    for alternative in ("TF ops", "more processes", "tf.data service"):
        assert alternative in row.note
        assert alternative in table.conclusion


def test_a_slower_change_is_slower() -> None:
    baseline = _result("unchanged", 10.0)
    changes = [_change("parallel:1", "parallel"), _change("autotune", "autotune")]
    trials = {"parallel:1": _result("parallel:1", 12.0), "autotune": _result("autotune", 7.0)}
    table = judge(baseline, changes, trials, _result("parallel:1", 12.1), steps=100)
    assert _rows(table)["autotune"].verdict == SLOWER


def test_a_trial_that_took_other_elements_is_not_compared() -> None:
    baseline = _result("unchanged", 10.0)
    changes = [_change("cache:1", "cache")]
    trials = {"cache:1": _result("cache:1", 30.0, examples=6000)}
    table = judge(baseline, changes, trials, None, steps=100)
    assert _rows(table)["cache:1"].verdict == ELEMENTS_DIFFER
    assert table.best is None


def test_not_tried_and_not_asked_changes_keep_their_reasons() -> None:
    baseline = _result("unchanged", 10.0)
    changes = [
        _change("prefetch", "prefetch", not_tried="already in effect"),
        _change("cache", "cache"),
    ]
    table = judge(baseline, changes, {}, None, steps=100, asked={"parallel"})
    rows = _rows(table)
    assert (rows["prefetch"].verdict, rows["prefetch"].note) == (NOT_TRIED, "already in effect")
    assert rows["cache"].verdict == NOT_ASKED
    assert table.noise is None
    assert "Nothing to try" in table.conclusion


def test_measure_skips_the_warm_up_and_counts_every_element() -> None:
    rows = {step: (0.1, 0.05, 64) for step in range(100)}
    rows[0] = (5.0, 0.0, 64)  # tracing: not measured
    rows[150] = (0.1, 0.0, 64)  # past N: neither
    result = measure(rows, 100, TrialResult(trial="unchanged"))
    assert (result.steps, result.batches, result.examples) == (100, 100, 6400)
    assert result.warmup_steps == 10 and result.measured_steps == 90
    assert result.steps_per_s == pytest.approx(10.0)
    assert result.input_wait_share == pytest.approx(0.5)
    assert result.compute_ms_median == pytest.approx(50.0)


def test_measure_leaves_out_the_first_call_of_several_steps() -> None:
    # steps_per_execution=16: the first call's steps share its tracing time and have no wait.
    rows = {step: (0.002, 0.0, 16) for step in range(64)}
    for step in range(16):
        rows[step] = (0.05, None, 16)
    result = measure(rows, 60, TrialResult(trial="steps_per_execution"), 16)
    assert (result.warmup_steps, result.measured_steps, result.batches) == (16, 44, 60)
    assert result.steps_per_s == pytest.approx(500.0)
    assert result.input_wait_share == 0.0


def test_steps_per_execution_is_tried_only_for_short_fed_steps() -> None:
    change = {"id": "steps_per_execution", "advice": "steps_per_execution", "pending": True,
              "edit": {**EDIT, "after": "model.compile(steps_per_execution={K})"}}  # fmt: skip
    decided, steps = decide_steps_per_execution(change, 0.002, 0.01, 200)
    assert steps == 32 and not decided.get("not_tried")
    assert decided["edit"]["after"] == "model.compile(steps_per_execution=32)"
    # 30 steps a trial: at most 4 a call, so that three calls are measured after the first.
    assert decide_steps_per_execution(change, 0.002, 0.01, 30)[1] == 4
    decided, steps = decide_steps_per_execution(change, 0.02, 0.01, 200)
    assert steps is None and "20 ms" in decided["not_tried"]
    decided, steps = decide_steps_per_execution(change, 0.002, 0.6, 200)
    assert steps is None and "wait for input 60.0 %" in decided["not_tried"]


def test_only_and_cache_memory_are_parsed() -> None:
    assert parse_advice(["parallel,spe", "cache"]) == {"parallel", "steps_per_execution", "cache"}
    assert parse_advice([]) is None
    with pytest.raises(ValueError, match="unknown advice 'faster'"):
        parse_advice(["faster"])
    assert parse_bytes("2G") == 2_000_000_000
    assert parse_bytes("512MB") == 512_000_000
    assert parse_bytes("1000") == 1000
