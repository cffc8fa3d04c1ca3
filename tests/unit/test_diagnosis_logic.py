"""The verdict and the alert state machine, driven with scripted numbers and a scripted clock."""

from datetime import UTC, datetime

import pytest

from stoker_server.core.models import AlertMetric, AlertRule, AlertState, Comparison
from stoker_server.diagnosis.alerting import (
    AlertEngine,
    Resolution,
    RunFacts,
    ValueWindows,
    alert_message,
    resolution_text,
)
from stoker_server.diagnosis.verdict import Verdict, diagnose
from stoker_server.diagnosis.window import RunWindow


def _window(**kwargs) -> RunWindow:
    return RunWindow(run_id=1, window_s=kwargs.pop("window_s", 30.0), **kwargs)


def _feed(window: RunWindow, n: int, *, dur: float, wait: float | None, t0: float = 0.0,
          first: int = 1) -> None:  # fmt: skip
    window.add_steps(
        now=1.0,
        step=list(range(first, first + n)),
        t=[t0 + i * dur for i in range(n)],
        dur=[dur] * n,
        wait=[wait] * n,
        batch_size=[32] * n,
    )


def _verdict(window: RunWindow, now: float = 1.0, connected: bool = True):
    return diagnose(
        window, now=now, connected=connected, min_steps=5, stall_min_s=60, stall_step_factor=20
    )


@pytest.mark.parametrize(
    ("wait", "expected"),
    [
        (0.020, Verdict.highly_input_bound),
        (0.010, Verdict.moderately_input_bound),
        (0.001, Verdict.not_input_bound),
    ],
)
def test_measured_wait_share_follows_profiler_thresholds(wait: float, expected: Verdict) -> None:
    window = _window()
    _feed(window, 50, dur=0.1, wait=wait)
    diagnosis = _verdict(window)
    assert diagnosis.verdict == expected
    assert diagnosis.source == "measured"
    assert diagnosis.input_wait_share == pytest.approx(wait / 0.1)
    assert any(e.key == "input_wait_share" for e in diagnosis.evidence)


def test_too_few_measured_steps_is_insufficient_without_wrap_advice() -> None:
    window = _window()
    _feed(window, 3, dur=0.1, wait=0.05)
    diagnosis = _verdict(window)
    assert diagnosis.verdict == Verdict.insufficient_data
    assert diagnosis.source == "measured"
    assert any("3 of the 5 measured steps" in e.text for e in diagnosis.evidence)
    assert not any("Wrap" in a or "not measured" in a for a in diagnosis.advice)


def test_window_slides_so_old_starvation_is_forgotten() -> None:
    window = _window(window_s=5.0)
    _feed(window, 50, dur=0.1, wait=0.05)  # 5 s starved
    assert _verdict(window).verdict == Verdict.highly_input_bound
    _feed(window, 100, dur=0.1, wait=0.0, t0=5.0, first=51)  # then 10 s fed
    diagnosis = _verdict(window)
    assert diagnosis.verdict == Verdict.not_input_bound
    assert diagnosis.input_wait_share == pytest.approx(0.0, abs=1e-9)
    assert diagnosis.steps_in_window <= 52


def test_cpu_saturated_advice_says_preprocessing_is_cpu_bound() -> None:
    window = _window()
    _feed(window, 50, dur=0.1, wait=0.05)
    window.add_host(now=1.0, t=[1.0, 2.0], proc_cpu=[800.0, 790.0], sys_cpu=[97.0, 95.0])
    advice = " ".join(_verdict(window).advice)
    assert "CPU-bound" in advice and "num_parallel_calls" in advice and "offline" in advice


def test_cpu_idle_while_waiting_advice_points_at_io_or_serial_pipeline() -> None:
    window = _window(environment={"input_pipeline": {"prefetch": False}})
    _feed(window, 50, dur=0.1, wait=0.05)
    window.add_host(now=1.0, t=[1.0], proc_cpu=[30.0], sys_cpu=[12.0])
    diagnosis = _verdict(window)
    advice = " ".join(diagnosis.advice)
    assert "prefetch" in advice and "interleave" in advice and "I/O-bound or serial" in advice
    assert any(e.key == "prefetch" and e.value is False for e in diagnosis.evidence)


def test_low_utilization_without_wait_advises_bigger_steps() -> None:
    window = _window()
    _feed(window, 50, dur=0.1, wait=0.0)
    window.add_device(now=1.0, t=[1.0], gpu=[0], util=[35.0], mem_used=[1.0], mem_total=[2.0],
                      temp_c=[50.0])  # fmt: skip
    diagnosis = _verdict(window)
    assert diagnosis.verdict == Verdict.not_input_bound
    advice = " ".join(diagnosis.advice)
    assert "larger batch" in advice and "jit_compile" in advice and "steps_per_execution" in advice


def test_without_wait_low_util_and_erratic_steps_is_a_fallback_verdict() -> None:
    window = _window()
    for i in range(40):
        _feed(window, 1, dur=0.01 if i % 2 else 0.2, wait=None, t0=i * 0.3, first=i + 1)
    window.add_device(now=1.0, t=[1.0, 2.0], gpu=[0, 0], util=[20.0, 30.0],
                      mem_used=[1.0, 1.0], mem_total=[2.0, 2.0], temp_c=[50.0, 50.0])  # fmt: skip
    diagnosis = _verdict(window)
    assert diagnosis.source == "fallback"
    assert diagnosis.verdict == Verdict.highly_input_bound
    assert diagnosis.input_wait_share is None
    assert any("inferred" in e.text for e in diagnosis.evidence)


def test_without_wait_or_gpu_the_verdict_is_insufficient_data() -> None:
    window = _window()
    _feed(window, 50, dur=0.1, wait=None)
    diagnosis = _verdict(window)
    assert diagnosis.verdict == Verdict.insufficient_data
    assert "cb.wrap" in " ".join(diagnosis.advice)


def test_stall_needs_max_of_floor_and_step_multiple_and_a_live_agent() -> None:
    window = _window()
    _feed(window, 50, dur=5.0, wait=0.0)  # median 5 s → threshold max(60, 100) = 100 s
    window.last_step_at = 0.0
    assert _verdict(window, now=90.0).verdict != Verdict.stalled
    stalled = _verdict(window, now=101.0)
    assert stalled.verdict == Verdict.stalled
    assert "hung collective" in " ".join(stalled.advice)
    assert _verdict(window, now=101.0, connected=False).verdict != Verdict.stalled


def _rule(**overrides) -> AlertRule:
    spec = {
        "id": 1, "name": "low util", "metric": AlertMetric.gpu_util, "comparison": Comparison.lt,
        "threshold": 70.0, "for_s": 30.0, "keep_firing_for_s": 10.0, "only_while_stepping": True,
    }  # fmt: skip
    spec.update(overrides)
    return AlertRule(**spec)


def _facts(util: float | None, *, stepping: bool = True, running: bool = True) -> list[RunFacts]:
    return [RunFacts(run_id=7, project="p", running=running, stepping=stepping,
                     values={AlertMetric.gpu_util: util})]  # fmt: skip


def test_alert_goes_pending_then_firing_after_for_and_resolves_after_keep_firing_for() -> None:
    engine = AlertEngine(rules=[_rule()])
    assert engine.evaluate(_facts(95.0), now=0.0) == []
    [pending] = engine.evaluate(_facts(30.0), now=1.0)
    assert pending.state == AlertState.pending
    assert engine.evaluate(_facts(30.0), now=30.0) == []
    [firing] = engine.evaluate(_facts(30.0), now=31.0)
    assert firing.state == AlertState.firing and firing.previous == AlertState.pending
    # One good sample does not resolve it: keep_firing_for holds it for 10 s.
    assert engine.evaluate(_facts(95.0), now=32.0) == []
    assert engine.evaluate(_facts(30.0), now=33.0) == []
    assert engine.evaluate(_facts(95.0), now=34.0) == []
    [resolved] = engine.evaluate(_facts(95.0), now=44.0)
    assert resolved.state == AlertState.resolved and resolved.previous == AlertState.firing


@pytest.mark.parametrize(
    ("last", "resolution"),
    [
        (_facts(95.0), Resolution.condition_cleared),
        (_facts(30.0, running=False), Resolution.run_ended),
        (_facts(30.0, stepping=False), Resolution.steps_stopped),
        (_facts(None), Resolution.no_value),
    ],
)
def test_a_resolved_alert_says_why_and_since_when(
    last: list[RunFacts], resolution: Resolution
) -> None:
    engine = AlertEngine(rules=[_rule(for_s=0.0, keep_firing_for_s=10.0)])
    [firing] = engine.evaluate(_facts(30.0), now=0.0)
    assert firing.resolution is None
    assert engine.evaluate(last, now=5.0) == []  # stopped holding at 5: kept firing 10 s
    [resolved] = engine.evaluate(last, now=15.0)
    assert (resolved.state, resolved.resolution, resolved.cleared_at) == (
        AlertState.resolved, resolution, 5.0
    )  # fmt: skip


def test_a_condition_that_holds_again_is_no_longer_cleared() -> None:
    engine = AlertEngine(rules=[_rule(for_s=0.0, keep_firing_for_s=10.0)])
    engine.evaluate(_facts(30.0), now=0.0)
    assert engine.evaluate(_facts(95.0), now=5.0) == []  # cleared at 5
    assert engine.evaluate(_facts(30.0), now=8.0) == []  # holds again
    assert engine.evaluate(_facts(95.0), now=9.0) == []  # cleared again, at 9
    [resolved] = engine.evaluate(_facts(95.0), now=19.0)
    assert (resolved.resolution, resolved.cleared_at) == (Resolution.condition_cleared, 9.0)


def test_alert_messages_write_values_as_the_ui_and_resolutions_say_why() -> None:
    rule = _rule(
        name="starved", metric=AlertMetric.input_wait_share, comparison=Comparison.ge,
        threshold=0.2, for_s=60.0,
    )  # fmt: skip
    windows = ValueWindows(wait_s=30.0, device_s=5.0)
    firing = alert_message(rule, AlertState.firing, 0.937, "demo", windows=windows)
    assert firing == (
        "[FIRING] starved on run 'demo': input wait 93.7 % of step time over the last 30 s "
        "(rule: ≥ 20.0 % for 60 s)"
    )
    at = datetime(2026, 11, 29, 7, 46, 20, tzinfo=UTC)
    why = resolution_text(rule, Resolution.condition_cleared, at)
    assert why == "the condition cleared at 07:46:20 UTC"
    resolved = alert_message(rule, AlertState.resolved, 0.031, "demo", windows=windows, why=why)
    assert resolved == (
        "[resolved] starved on run 'demo': the condition cleared at 07:46:20 UTC; last reading: "
        "input wait 3.1 % of step time over the last 30 s"
    )
    ended = resolution_text(rule, Resolution.run_ended)
    assert alert_message(rule, AlertState.resolved, 0.942, "demo", windows=windows, why=ended) == (
        "[resolved] starved on run 'demo': the run ended; last reading: input wait 94.2 % of "
        "step time over the last 30 s"
    )
    assert resolution_text(rule, Resolution.run_ended, fired=False) == (
        "never fired: the run ended before it held for 60 s"
    )
    nan = _rule(name="nan", metric=AlertMetric.metric_nonfinite, comparison=Comparison.ge,
                threshold=1.0, metric_name="val_loss")  # fmt: skip
    assert alert_message(nan, AlertState.resolved, 1.0, "demo", why=ended) == (
        "[resolved] nan on run 'demo': the run ended; last reading: val_loss is NaN or infinite"
    )
    step_rule = _rule(metric=AlertMetric.step_time, comparison=Comparison.gt, threshold=0.5)
    assert alert_message(step_rule, AlertState.firing, 0.0847, None).endswith(
        "on the server: mean step time 84.7 ms over the last 30 s (rule: > 500 ms for 30 s)"
    )


def test_pending_alert_that_clears_before_for_never_fires() -> None:
    engine = AlertEngine(rules=[_rule()])
    engine.evaluate(_facts(30.0), now=0.0)
    [cleared] = engine.evaluate(_facts(90.0), now=5.0)
    assert cleared.state == AlertState.resolved and cleared.previous == AlertState.pending
    assert (cleared.resolution, cleared.cleared_at) == (Resolution.condition_cleared, 5.0)


def test_while_stepping_rule_ignores_idle_runs_and_missing_values() -> None:
    engine = AlertEngine(rules=[_rule(for_s=0.0)])
    assert engine.evaluate(_facts(10.0, stepping=False), now=0.0) == []
    assert engine.evaluate(_facts(None), now=1.0) == []
    [firing] = engine.evaluate(_facts(10.0), now=2.0)
    assert firing.state == AlertState.firing


def test_disabled_rule_resolves_its_firing_alerts() -> None:
    rule = _rule(for_s=0.0, keep_firing_for_s=0.0)
    engine = AlertEngine(rules=[rule])
    engine.evaluate(_facts(10.0), now=0.0)
    engine.set_rules([_rule(for_s=0.0, enabled=False)])
    [resolved] = engine.evaluate(_facts(10.0), now=1.0)
    assert resolved.state == AlertState.resolved
    assert resolved.resolution == Resolution.rule_changed


def test_scope_project_limits_rule_to_that_project() -> None:
    engine = AlertEngine(rules=[_rule(for_s=0.0, scope="project", project="other")])
    assert engine.evaluate(_facts(10.0), now=0.0) == []


@pytest.mark.parametrize(
    ("steps_per_execution", "estimated"), [(None, False), (1, False), (4, True)]
)
def test_evidence_says_when_the_wait_is_estimated_over_several_steps_per_execution(
    steps_per_execution: int | None, estimated: bool
) -> None:
    environment = (
        {} if steps_per_execution is None else {"steps_per_execution": steps_per_execution}
    )
    window = _window(environment=environment)
    _feed(window, 20, dur=0.1, wait=0.03)
    evidence = {e.key: e for e in _verdict(window).evidence}
    assert ("input_wait_estimated" in evidence) is estimated
    if estimated:
        assert "steps_per_execution = 4" in evidence["input_wait_estimated"].text
