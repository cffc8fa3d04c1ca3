"""Advice that knows the pipeline: never to add what is there, each thing once, and
what is left once the input side is parallel and prefetched; one figure and one word."""

import re

import pytest

from stoker_server.core.levels import VERDICT_WORDS, Verdict
from stoker_server.diagnosis.advice import input_advice, once
from stoker_server.diagnosis.verdict import Diagnosis, diagnose
from stoker_server.diagnosis.window import RunWindow, WholeRun
from stoker_server.ingest.summary import add_steps, summarize
from trainer_agent.figures import ms_text, share_text

# As the agent describes the demo's fed pipeline (trainer_agent.capture.pipeline.describe_pipeline).
FED = {
    "prefetch": True, "parallel_map": True, "serial_map": False, "cache": True,
    "parallel_interleave": False, "interleave": False, "parallel_batch": False,
}  # fmt: skip
ADDING = (".prefetch(", "num_parallel_calls", ".cache() after")


def _window(pipeline: dict | None = None, **kwargs) -> RunWindow:
    environment = {"input_pipeline": pipeline} if pipeline is not None else {}
    return RunWindow(run_id=1, window_s=30.0, environment=environment, **kwargs)


def _feed(window: RunWindow, n: int, *, dur: float, wait: float, cpu: float | None = None) -> None:
    window.add_steps(
        now=1.0, step=list(range(1, n + 1)), t=[i * dur for i in range(n)], dur=[dur] * n,
        wait=[wait] * n, batch_size=[64] * n,
    )  # fmt: skip
    if cpu is not None:
        window.add_host(now=1.0, t=[0.0, n * dur], proc_cpu=[cpu, cpu], sys_cpu=[cpu, cpu])


def _diagnose(window: RunWindow) -> Diagnosis:
    return diagnose(
        window, now=1.0, connected=True, min_steps=20, stall_min_s=60, stall_step_factor=20
    )


@pytest.mark.parametrize("cpu", [None, 20.0, 65.0, 95.0])
def test_fed_short_step_run_gets_no_advice_to_add_what_it_has(cpu: float | None) -> None:
    # The demo's fed run: cache + parallel map + prefetch, 1.5 ms steps waiting 0.1 ms.
    window = _window(FED)
    _feed(window, 2000, dur=0.0015, wait=0.0001, cpu=cpu)
    diagnosis = _diagnose(window)
    assert diagnosis.verdict == Verdict.moderately_input_bound
    advice = " ".join(diagnosis.advice)
    for remedy in ADDING:
        assert remedy not in advice, (remedy, diagnosis.advice)
    assert "Feed the device faster" not in advice
    # What is left: the short steps first, then the host, cache placement.
    assert "steps_per_execution" in diagnosis.advice[0] and "Larger batches" in diagnosis.advice[0]
    assert "host cores" in advice or "more host cores" in advice
    assert "Check where cache() sits" in advice


def test_fed_run_with_longer_steps_is_told_what_is_left_on_the_host() -> None:
    window = _window(FED)
    _feed(window, 200, dur=0.05, wait=0.01, cpu=60.0)
    advice = _diagnose(window).advice
    assert not any("steps_per_execution" in a for a in advice)
    assert any("already maps in parallel, caches and prefetches" in a for a in advice)
    assert any("tf.data service" in a and "offline" in a and "onto the device" in a for a in advice)


@pytest.mark.parametrize("cpu", [None, 20.0, 65.0, 95.0])
def test_each_remedy_is_said_once(cpu: float | None) -> None:
    window = _window({"prefetch": False, "serial_map": True, "parallel_map": False})
    _feed(window, 200, dur=0.05, wait=0.02, cpu=cpu)
    advice = _diagnose(window).advice
    text = " ".join(advice)
    assert text.count("map runs one element at a time") == 1, advice
    assert "map(..., num_parallel_calls" not in text  # said by the serial-map item
    assert text.count(".prefetch(") == 1, advice
    assert once(advice) == advice


def test_following_the_advice_changes_it() -> None:
    before = input_advice(cpu=30.0, pipeline={"prefetch": False, "serial_map": True})
    assert any(".prefetch(" in a for a in before)
    assert any("num_parallel_calls" in a for a in before)
    after = input_advice(
        cpu=30.0, pipeline={"prefetch": True, "serial_map": True, "parallel_map": True}
    )
    assert not any(".prefetch(" in a for a in after)
    assert not any("map runs one element at a time" in a for a in after)


def test_an_unknown_pipeline_gets_the_general_remedies() -> None:
    advice = input_advice(cpu=None, pipeline={})
    text = " ".join(advice)
    assert "Feed the device faster" in text
    assert "num_parallel_calls" in text and ".prefetch(" in text and ".cache()" in text


def test_once_drops_what_an_earlier_item_already_said() -> None:
    fix = "stage 5 (map 'slow_decode') runs serially: pass num_parallel_calls=tf.data.AUTOTUNE."
    general = "map runs one element at a time: pass num_parallel_calls=tf.data.AUTOTUNE."
    other = "The host CPU is saturated: preprocess offline."
    assert once([fix, general, other, other]) == [fix, other]


def test_figure_and_verdict_agree_at_the_threshold() -> None:
    # 4.96 % is shown as 5.0 %: moderately input-bound, never "not input-bound" beside "5 %".
    window = _window()
    _feed(window, 200, dur=0.1, wait=0.00496)
    diagnosis = _diagnose(window)
    assert diagnosis.input_wait_share == 0.05
    assert diagnosis.verdict == Verdict.moderately_input_bound
    assert diagnosis.verdict_label == VERDICT_WORDS[Verdict.moderately_input_bound]
    assert diagnosis.window_label == "last 30 s"
    evidence = next(e for e in diagnosis.evidence if e.key == "input_wait_share")
    assert "5.0 % of step time over the last 30 s" in evidence.text
    assert evidence.value == diagnosis.input_wait_share


def test_an_ended_runs_verdict_is_its_summarys_figure_over_the_whole_run() -> None:
    n = 400
    step = list(range(n + 1))
    t = [i * 0.1 for i in range(n + 1)]
    # Starved early, fed in the last 30 s: the window alone would say not input-bound.
    wait = [0.02 if i <= 300 else 0.0 for i in range(n + 1)]
    stats = add_steps({}, steps=step, t=t, dur=[0.1] * (n + 1), wait=wait, batch_size=[8] * (n + 1))
    summary = summarize({**stats, "util_count": 0})
    window = _window(whole_run=WholeRun.of(stats))
    window.add_steps(
        now=1.0, step=step, t=t, dur=[0.1] * (n + 1), wait=wait, batch_size=[8] * (n + 1)
    )
    diagnosis = _diagnose(window)
    assert diagnosis.window_label == "whole run"
    assert diagnosis.input_wait_share == summary.input_wait_share == 0.15
    assert diagnosis.verdict == summary.verdict == Verdict.moderately_input_bound
    evidence = {e.key: e.text for e in diagnosis.evidence}
    # One count and one step time with the summary's (the run page's cards): its steps, step 0
    # included, and its median over the whole run, not a mean over the stored window.
    assert summary.steps == diagnosis.steps_in_window == 401
    assert evidence["input_wait_share"].endswith(
        f"{share_text(0.15)} of step time over the whole run (401 steps)"
    )
    assert summary.step_time_ms_median is not None
    median = ms_text(summary.step_time_ms_median / 1000)
    assert evidence["median_step_ms"] == f"median step time {median} over the whole run"
    assert "mean_step_ms" not in evidence


def test_every_share_in_a_diagnosis_text_is_written_to_a_tenth_of_a_percent() -> None:
    window = _window(FED)
    _feed(window, 500, dur=0.01, wait=0.00123, cpu=40.0)
    diagnosis = _diagnose(window)
    shares = re.findall(
        r"(\d+(?:\.\d+)?) % of step time", " ".join(e.text for e in diagnosis.evidence)
    )
    assert shares == ["12.3"]
