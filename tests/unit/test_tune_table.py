"""`stoker tune`'s verdicts (trainer_agent/tune/table.py) and argument parsing, without
TensorFlow: trial results in, rows out."""

import pytest

from trainer_agent.input_bound import HIGHLY_INPUT_BOUND
from trainer_agent.tune import inflight
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
            wait: float = 0.1, compute_ms: float | None = None) -> TrialResult:  # fmt: skip
    return TrialResult(trial=trial, steps=batches, batches=batches, examples=examples,
                       steps_per_s=rate, input_wait_share=wait,
                       compute_ms_median=compute_ms)  # fmt: skip


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


def test_a_python_map_whose_gain_moved_the_wait_into_the_step_names_the_gil() -> None:
    # A CI machine's figures: more calls of a GIL-bound parse kept the input up (76.9 % ->
    # 15.7 % input wait), but each step's own time tripled while the training thread waited
    # for the GIL: 1.19x where removing the wait would have given 4x.
    baseline = _result("unchanged", 7.96, wait=0.769, compute_ms=29.0)
    changes = [_change("parallel:1", "parallel", python=True, function="parse")]
    trial = _result("parallel:1", 9.45, wait=0.157, compute_ms=89.2)
    table = judge(baseline, changes, {"parallel:1": trial},
                  _result("parallel:1", 9.25, wait=0.039, compute_ms=104.0), steps=20)  # fmt: skip
    row = _rows(table)["parallel:1"]
    assert row.verdict == SPEED_UP and table.best == "parallel:1"
    assert "parse runs Python" in row.note
    assert "input wait 76.9 % -> 15.7 %" in row.note
    assert "grew from 29.0 ms to 89.2 ms" in row.note and "GIL" in row.note
    assert "parse is held back by the GIL" in table.conclusion
    for alternative in ("TF ops", "more processes", "tf.data service"):
        assert alternative in row.note
        assert alternative in table.conclusion


def test_a_python_map_whose_steps_kept_their_time_is_a_plain_speed_up() -> None:
    # Its calls wait on storage without the GIL: the gain is the input's, the step unchanged.
    baseline = _result("unchanged", 5.0, wait=0.8, compute_ms=40.0)
    changes = [_change("parallel:1", "parallel", python=True, function="read")]
    trials = {"parallel:1": _result("parallel:1", 20.0, wait=0.05, compute_ms=47.0)}
    table = judge(baseline, changes, trials, _result("parallel:1", 19.5), steps=20)
    row = _rows(table)["parallel:1"]
    assert row.verdict == SPEED_UP
    assert "GIL" not in row.note and "GIL" not in table.conclusion


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
    assert table.conclusion.startswith("Nothing to try of what --only asked for")
    assert "the others were not asked" in table.conclusion
    everything = judge(baseline, changes[:1], {}, None, steps=100)
    assert everything.conclusion.startswith("Nothing to try: each change Stoker advises")


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


IN_FLIGHT = {"id": "inflight:1", "advice": "parallel", "label": "map slow_decode, 8 in flight",
             "title": "num_parallel_calls=8", "function": "slow_decode", "edit": EDIT,
             "pending": True, "threads": 1}  # fmt: skip


def test_more_calls_in_flight_are_tried_when_the_function_waits_and_say_why() -> None:
    # The steps starve and the process used 0.3 of a core for its one call at a time.
    decided = inflight.decide(IN_FLIGHT, 0.9, 0.3)
    assert not decided.get("not_tried") and not decided["pending"]
    assert decided["why"].startswith("slow_decode waits: ")
    assert "used 0.3 cores" in decided["why"]
    assert decided["why"].endswith("So: more calls in flight than cores")
    baseline = _result("unchanged", 10.0, wait=0.9)
    trials = {"inflight:1": _result("inflight:1", 45.0)}
    table = judge(baseline, [decided], trials, _result("inflight:1", 44.0), steps=100)
    row = _rows(table)["inflight:1"]
    assert (row.verdict, row.note) == (SPEED_UP, decided["why"])
    assert decided["why"] in render(table)


def test_more_calls_in_flight_are_not_tried_for_a_function_that_computes_or_fed_steps() -> None:
    computes = inflight.decide(IN_FLIGHT, 0.9, 1.1)
    assert computes["not_tried"].startswith("slow_decode computes: ")
    assert "More calls in flight than cores would compete for them" in computes["not_tried"]
    # Two calls at once that keep 0.8 of a core busy: each waits more than it computes.
    assert not inflight.decide({**IN_FLIGHT, "threads": 2}, 0.9, 0.8).get("not_tried")
    # One threshold: the steps starve from the server's highly input-bound level on.
    fed = inflight.decide(IN_FLIGHT, HIGHLY_INPUT_BOUND - 0.01, 0.1)
    assert "the input does not starve" in fed["not_tried"]
    assert not inflight.decide(IN_FLIGHT, HIGHLY_INPUT_BOUND, 0.1).get("not_tried")
    assert "no CPU time" in inflight.decide(IN_FLIGHT, 0.9, None)["not_tried"]


def test_more_calls_in_flight_of_a_python_function_that_gains_nothing_name_the_gil() -> None:
    decided = inflight.decide({**IN_FLIGHT, "python": True}, 0.6, 0.05)
    baseline = _result("unchanged", 5.0)
    trials = {"inflight:1": _result("inflight:1", 5.1)}
    table = judge(baseline, [decided], trials, _result("inflight:1", 4.9), steps=30)
    row = _rows(table)["inflight:1"]
    assert row.verdict == NO_GAIN and "GIL" in row.note and "TF ops" in row.note


def test_only_and_cache_memory_are_parsed() -> None:
    assert parse_advice(["parallel,spe", "cache"]) == {"parallel", "steps_per_execution", "cache"}
    assert parse_advice([]) is None
    with pytest.raises(ValueError, match="unknown advice 'faster'"):
        parse_advice(["faster"])
    assert parse_bytes("2G") == 2_000_000_000
    assert parse_bytes("512MB") == 512_000_000
    assert parse_bytes("1000") == 1000
