"""The alert logic for how training ends and misbehaves, without a server: run-end events,
metric tracks, the first-steps baseline, and rule validation."""

import math
from pathlib import Path

import pytest
from pydantic import ValidationError
from sqlmodel import Session, select

from stoker_server.core.db import make_engine
from stoker_server.core.models import (
    AlertMetric,
    AlertRule,
    AlertRuleCreate,
    AlertState,
    Comparison,
    SeedMarker,
)
from stoker_server.core.settings import Settings
from stoker_server.diagnosis.alerting import (
    DEFAULT_RULES,
    DISK_RULES,
    END_AND_METRIC_RULES,
    AlertEngine,
    RunFacts,
    param_key,
    seed_default_rules,
)
from stoker_server.diagnosis.watched import FirstSteps, MetricTrack


def _rule(rule_id: int, metric: AlertMetric, threshold: float, **fields: object) -> AlertRule:
    return AlertRule(id=rule_id, name=f"r{rule_id}", metric=metric, comparison=Comparison.ge,
                     threshold=threshold, **fields)  # fmt: skip


def _facts(running: bool, values: dict, params: dict | None = None) -> RunFacts:
    return RunFacts(run_id=1, project="p", running=running, stepping=running, values=values,
                    params=params or {})  # fmt: skip


def test_an_end_event_fires_at_once_on_an_ended_run_then_resolves_after_keep_firing() -> None:
    rule = _rule(1, AlertMetric.run_failed, 1.0, for_s=30.0, keep_firing_for_s=5.0)
    engine = AlertEngine([rule])
    running = engine.evaluate([_facts(True, {AlertMetric.run_failed: None})], now=0.0)
    assert running == []
    fired = engine.evaluate([_facts(False, {AlertMetric.run_failed: 1.0})], now=1.0)
    # for_s is not waited for an event: it fires at the tick the end is seen.
    assert [(t.state, t.previous) for t in fired] == [(AlertState.firing, None)]
    assert engine.evaluate([_facts(False, {AlertMetric.run_failed: 0.0})], now=3.0) == []
    resolved = engine.evaluate([_facts(False, {AlertMetric.run_failed: 0.0})], now=6.5)
    assert [(t.state, t.previous) for t in resolved] == [(AlertState.resolved, AlertState.firing)]


def test_a_condition_metric_does_not_hold_on_an_ended_run() -> None:
    engine = AlertEngine([_rule(1, AlertMetric.metric_nonfinite, 1.0, metric_name="loss")])
    key = (AlertMetric.metric_nonfinite, ("metric", "loss"))
    assert engine.wanted_params() == {key}
    assert engine.evaluate([_facts(False, {}, {key: 1.0})], now=0.0) == []
    fired = engine.evaluate([_facts(True, {}, {key: 1.0})], now=1.0)
    assert [t.state for t in fired] == [AlertState.firing]


def test_a_metric_gone_nan_as_the_run_ended_fires_once_at_once() -> None:
    rule = _rule(1, AlertMetric.metric_nonfinite, 1.0, for_s=30.0, keep_firing_for_s=1.0)
    engine = AlertEngine([rule])
    key = (AlertMetric.metric_nonfinite, ("metric", "loss"))
    # The NaN and the run's end came in one flush: the tick sees an ended run.
    ended = _facts(False, {}, {key: 1.0})
    ended.just_ended = True
    fired = engine.evaluate([ended], now=0.0)
    assert [(t.state, t.previous) for t in fired] == [(AlertState.firing, None)]
    later = _facts(False, {}, {key: 1.0})  # no longer just ended: its values no longer hold
    assert engine.evaluate([later], now=0.5) == []
    resolved = engine.evaluate([later], now=1.5)
    assert [t.state for t in resolved] == [AlertState.resolved]
    # A condition rule (not a metric one) is not judged on a run that just ended.
    util = AlertEngine([_rule(2, AlertMetric.gpu_util, 0.0)])
    ended_util = _facts(False, {AlertMetric.gpu_util: 50.0})
    ended_util.just_ended = True
    assert util.evaluate([ended_util], now=0.0) == []


def test_param_keys_name_the_metric_and_the_baseline() -> None:
    nan = _rule(1, AlertMetric.metric_nonfinite, 1.0)
    assert param_key(AlertMetric.metric_nonfinite, nan) == ("metric", "loss")
    own = _rule(2, AlertMetric.throughput_drop, 0.3, baseline_s=60.0)
    assert param_key(AlertMetric.throughput_drop, own) == ("first", 60.0)
    other = _rule(3, AlertMetric.throughput_drop, 0.3, baseline_run_id=7, baseline_s=60.0)
    assert param_key(AlertMetric.throughput_drop, other) == ("run", 7)
    assert param_key(AlertMetric.gpu_util, own) is None


def test_metric_track_keeps_the_best_and_sees_non_finite_values() -> None:
    track = MetricTrack()
    for value in (2.0, 1.0, 1.5):
        track.add(value)
    assert (track.best, track.last, track.rise()) == (1.0, 1.5, 1.5)
    track.add(None)  # the protocol turns NaN and infinities into null
    assert track.last is None and track.rise() is None and track.best == 1.0
    track.add(math.inf)
    assert track.last is None
    track.add(3.0)
    assert track.rise() == 3.0
    negative = MetricTrack()
    negative.add(-1.0)
    assert negative.rise() is None  # a factor over a best at or below 0 means nothing


def test_first_steps_median_waits_for_the_run_to_pass_its_baseline() -> None:
    first = FirstSteps(horizon_s=10.0)
    first.add([100.0 + i for i in range(5)], [0.5, 0.1, 0.1, 0.1, 0.1])  # the first is tracing
    assert first.median_s(10.0) is None  # not past its first 10 s yet
    first.add([105.0 + i for i in range(10)], [0.2] * 10)
    assert first.median_s(4.0) == 0.1
    assert first.median_s(10.0) == 0.2  # 0.5, 4 x 0.1, 6 x 0.2 (t <= 110)
    assert len(first.t) == 11  # nothing past the horizon is kept


def test_rule_fields_are_checked() -> None:
    base = {"name": "n", "metric": "throughput_drop", "comparison": ">=", "threshold": 0.3}
    assert AlertRuleCreate(**base, baseline_s=60, profile_steps=20).profile_steps == 20
    for bad in ({"profile_steps": 0}, {"baseline_s": 0}, {"baseline_run_id": 0},
                {"metric_name": ""}, {"metric_name": "x" * 101}):  # fmt: skip
        with pytest.raises(ValidationError):
            AlertRuleCreate(**base, **bad)


def test_a_fresh_database_gets_every_default_rule_once(tmp_path: Path) -> None:
    engine = make_engine(Settings(data_dir=tmp_path))
    with Session(engine) as session:
        created = seed_default_rules(session=session)
        rules = {r.builtin: r for r in session.exec(select(AlertRule)).all()}
        session.delete(rules["run_finished"])  # the user deletes one: it stays deleted
        session.commit()
        assert seed_default_rules(session=session) == 0
        left = {r.builtin for r in session.exec(select(AlertRule)).all()}
        markers = {m.key for m in session.exec(select(SeedMarker)).all()}
    engine.dispose()
    specs = DEFAULT_RULES + END_AND_METRIC_RULES + DISK_RULES
    assert created == len(specs) == len(rules) == 9
    assert left == set(rules) - {"run_finished"}
    assert {b for b, r in rules.items() if r.enabled} == {
        "low_gpu_util", "highly_input_bound", "stalled", "run_failed", "disk_low",
    }  # fmt: skip
    assert rules["highly_input_bound"].profile_steps == 20
    assert markers == {"default_alert_rules"}
