"""Alert rules and their evaluation, like Prometheus alerting: pending → firing → resolved.

A rule names a metric, a comparison, a threshold, how long the condition must hold (`for_s`)
and how long a firing alert keeps firing after the condition clears (`keep_firing_for_s`),
so one blip neither fires nor flaps. One `Instance` per (rule, run) holds the state; each
tick evaluates every enabled rule against every watched run's current metric values, which
are computed once per run per tick. The engine is pure: it returns transitions, and the
caller stores, pushes and delivers them.
"""

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from datetime import datetime
from enum import StrEnum
from typing import Any

from sqlalchemy.exc import IntegrityError
from sqlmodel import Session, col, select

from stoker_server.core.levels import HIGHLY_INPUT_BOUND
from stoker_server.core.models import (
    AlertMetric,
    AlertRule,
    AlertScope,
    AlertState,
    Comparison,
    SeedMarker,
)
from trainer_agent.figures import ms_text, percent_text, rate_text, share_text

# How a run ended: events, not conditions. Such a rule holds at the tick the end is seen (on a
# run no longer running), fires at once (its for_s is not waited), and resolves after its
# keep_firing_for_s, or when the run resumes.
END_METRICS = frozenset(
    {AlertMetric.run_finished, AlertMetric.run_failed, AlertMetric.run_interrupted}
)
# Metrics whose last values on a run that just ended still count (once, firing at once): a
# loss that went NaN in the run's last moments is news.
FINAL_METRICS = frozenset({AlertMetric.metric_nonfinite, AlertMetric.metric_rise})
# Metrics whose value depends on the rule's own parameters (see `param_key`).
PARAM_METRICS = frozenset(
    {AlertMetric.metric_nonfinite, AlertMetric.metric_rise, AlertMetric.throughput_drop}
)
# Metrics of the server, not of a run: their rules are judged once per tick on the
# server's own facts (run id SERVER_RUN_ID), and their alerts belong to no run.
SERVER_METRICS = frozenset({AlertMetric.disk_free_share})
SERVER_RUN_ID = 0
DEFAULT_METRIC_NAME = "loss"
DEFAULT_BASELINE_S = 120.0  # "the run's own first minutes"
ParamKey = tuple[str, str | int | float]


def param_key(metric: AlertMetric, rule: Any) -> ParamKey | None:
    """What a parametrized rule's value is computed for: ("metric", name) for the metric
    rules, ("run", baseline run id) or ("first", seconds) for the throughput drop."""
    if metric in (AlertMetric.metric_nonfinite, AlertMetric.metric_rise):
        return ("metric", rule.metric_name or DEFAULT_METRIC_NAME)
    if metric == AlertMetric.throughput_drop:
        if rule.baseline_run_id is not None:
            return ("run", int(rule.baseline_run_id))
        return ("first", float(rule.baseline_s or DEFAULT_BASELINE_S))
    return None


# -- default rules ---------------------------------------------------------------------------

PROFILE_STEPS_ON_INPUT_BOUND = 20

DEFAULT_RULES: list[dict[str, Any]] = [
    {
        "builtin": "low_gpu_util",
        "name": "GPU utilization below 70 % while steps run",
        "metric": AlertMetric.gpu_util,
        "comparison": Comparison.lt,
        "threshold": 70.0,
        "for_s": 30.0,
        "keep_firing_for_s": 10.0,
        "only_while_stepping": True,
    },
    {
        "builtin": "highly_input_bound",
        "name": f"Highly input-bound (input wait ≥ {HIGHLY_INPUT_BOUND * 100:g} % of step time)",
        "metric": AlertMetric.input_wait_share,
        "comparison": Comparison.ge,
        "threshold": HIGHLY_INPUT_BOUND,
        "for_s": 60.0,
        "keep_firing_for_s": 10.0,
        "only_while_stepping": True,
        # On by default: the evidence a user wants next is a profile of those very steps, and
        # 20 steps, once per firing, cost little (captures are one at a time per run and
        # their traces bounded by the server's quota). Set null to turn it off.
        "profile_steps": PROFILE_STEPS_ON_INPUT_BOUND,
    },
    {
        "builtin": "stalled",
        "name": "Training stalled (no steps while the process is alive)",
        "metric": AlertMetric.stalled,
        "comparison": Comparison.ge,
        "threshold": 1.0,
        "for_s": 0.0,
        "keep_firing_for_s": 0.0,
        "only_while_stepping": False,
    },
]


# How training ends and misbehaves. Off by default except "failed": a finished or
# interrupted run, or a loss going wrong, is something some users want told and others not.
END_AND_METRIC_RULES: list[dict[str, Any]] = [
    {
        "builtin": "run_failed",
        "name": "Run failed (an error, or its process died)",
        "metric": AlertMetric.run_failed,
        "comparison": Comparison.ge,
        "threshold": 1.0,
        "keep_firing_for_s": 60.0,
    },
    {
        "builtin": "run_finished",
        "name": "Run finished",
        "metric": AlertMetric.run_finished,
        "comparison": Comparison.ge,
        "threshold": 1.0,
        "keep_firing_for_s": 60.0,
        "enabled": False,
    },
    {
        "builtin": "run_interrupted",
        "name": "Run interrupted",
        "metric": AlertMetric.run_interrupted,
        "comparison": Comparison.ge,
        "threshold": 1.0,
        "keep_firing_for_s": 60.0,
        "enabled": False,
    },
    {
        "builtin": "loss_nonfinite",
        "name": "Loss is NaN or infinite",
        "metric": AlertMetric.metric_nonfinite,
        "metric_name": DEFAULT_METRIC_NAME,
        "comparison": Comparison.ge,
        "threshold": 1.0,
        "keep_firing_for_s": 10.0,
        "enabled": False,
    },
    {
        "builtin": "loss_rise",
        "name": "Loss rose to 2x its best",
        "metric": AlertMetric.metric_rise,
        "metric_name": DEFAULT_METRIC_NAME,
        "comparison": Comparison.ge,
        "threshold": 2.0,
        "for_s": 30.0,
        "keep_firing_for_s": 10.0,
        "enabled": False,
    },
]


# A disk that fills refuses new rows (agents spool them). On by default: told at 5 %
# free, while there is still room to act.
DISK_RULES: list[dict[str, Any]] = [
    {
        "builtin": "disk_low",
        "name": "Disk nearly full (under 5 % free where the data directory is)",
        "metric": AlertMetric.disk_free_share,
        "comparison": Comparison.lt,
        "threshold": 0.05,
        "for_s": 60.0,
        "keep_firing_for_s": 60.0,
    },
]


SEEDED_MARKER = "default_alert_rules"


def seed_default_rules(*, session: Session) -> int:
    """Create the default rules on a database's first start; once created they are the user's
    to edit or delete, and never created again (the seed marker says so). A rule added to the
    defaults later reaches databases seeded before it through a migration (0018 did so for
    the run-end, metric and disk rules). Returns how many were created."""
    if session.get(SeedMarker, SEEDED_MARKER) is not None:
        return 0
    specs = DEFAULT_RULES + END_AND_METRIC_RULES + DISK_RULES
    for spec in specs:
        session.add(AlertRule(**spec, channels=[{"type": "browser"}]))
    session.add(SeedMarker(key=SEEDED_MARKER))
    try:
        session.commit()
    except IntegrityError:  # another server sharing the database seeded them first
        session.rollback()
        return 0
    return len(specs)


def load_rules(*, session: Session) -> list[AlertRule]:
    return list(session.exec(select(AlertRule).order_by(col(AlertRule.id))).all())


# -- evaluation ------------------------------------------------------------------------------


def compare(value: float, comparison: Comparison, threshold: float) -> bool:
    if comparison == Comparison.lt:
        return value < threshold
    if comparison == Comparison.le:
        return value <= threshold
    if comparison == Comparison.gt:
        return value > threshold
    return value >= threshold


@dataclass
class RunFacts:
    """What the engine needs to know about one watched run at one tick."""

    run_id: int
    project: str
    running: bool
    stepping: bool
    values: dict[AlertMetric, float | None]
    # The parametrized metrics' values, by (metric, param_key): those the rules ask for.
    params: dict[tuple[AlertMetric, ParamKey], float | None] = field(default_factory=dict)
    # The run ended since the last tick: its last metric values still count, once.
    just_ended: bool = False


class Resolution(StrEnum):
    """Why an alert resolved."""

    run_ended = "run_ended"
    condition_cleared = "condition_cleared"
    steps_stopped = "steps_stopped"  # a rule judged only while steps run
    no_value = "no_value"  # its reading stopped coming (no GPU sample, no measured wait)
    rule_changed = "rule_changed"  # the rule was disabled, deleted or no longer applies


@dataclass
class Instance:
    rule_id: int
    run_id: int
    state: AlertState
    active_since: float
    alert_id: int | None = None
    last_true_at: float = 0.0
    value: float | None = None
    # When the condition last stopped holding while firing (None while it holds).
    cleared_at: float | None = None


@dataclass
class Transition:
    rule: AlertRule
    run_id: int
    state: AlertState
    previous: AlertState | None
    value: float | None
    instance: Instance
    # A resolved alert's why, and when its condition stopped holding (the engine's clock).
    resolution: Resolution | None = None
    cleared_at: float | None = None


def _param(rule: AlertRule) -> tuple[AlertMetric, ParamKey] | None:
    metric = AlertMetric(rule.metric)
    if metric not in PARAM_METRICS:
        return None
    key = param_key(metric, rule)
    assert key is not None
    return (metric, key)


def _why_not(run: RunFacts, value: float | None, rule: "_Compiled", *, final: bool) -> Resolution:
    """Why a rule's condition does not hold on this run at this tick."""
    if not (run.running or rule.end or final):
        return Resolution.run_ended
    if value is None:
        return Resolution.no_value
    if rule.only_while_stepping and not run.stepping:
        return Resolution.steps_stopped
    return Resolution.condition_cleared


def _applies(rule: Any, facts: RunFacts) -> bool:
    if rule.scope == AlertScope.project:
        return facts.project == rule.project
    if rule.scope == AlertScope.run:
        return facts.run_id == rule.run_id
    return True


@dataclass(frozen=True)
class ValueWindows:
    """The spans the rules' values are read over (the server's settings): the diagnosis
    window for input wait, step time and throughput, the alert value window for device
    readings."""

    wait_s: float = 30.0
    device_s: float = 5.0


_SYMBOLS = {Comparison.lt: "<", Comparison.le: "≤", Comparison.gt: ">", Comparison.ge: "≥"}
# Metrics whose value is a yes/no (1/0): said in words, without a threshold.
_FLAGS = frozenset({AlertMetric.stalled, AlertMetric.metric_nonfinite}) | END_METRICS


def _measure(rule: Any, windows: ValueWindows) -> tuple[str, Callable[[float], str], str]:
    """What a rule's value is, how it is written (as the UI writes that quantity) and over
    which span: ("input wait", share_text, "of step time over the last 30 s")."""
    metric = AlertMetric(rule.metric)
    wait = f"over the last {windows.wait_s:g} s"
    device = f"over the last {windows.device_s:g} s"
    key = param_key(metric, rule)
    if metric == AlertMetric.metric_rise and key is not None:
        return f"{key[1]} over its best", lambda v: f"{v:.2f}x", ""
    if metric == AlertMetric.throughput_drop and key is not None:
        base = f"run #{key[1]}" if key[0] == "run" else f"its first {key[1]:g} s"
        return f"throughput below {base}'s by", share_text, "(median step times)"
    return {
        AlertMetric.gpu_util: ("GPU utilization", percent_text, device),
        AlertMetric.input_wait_share: ("input wait", share_text, f"of step time {wait}"),
        AlertMetric.step_time: ("mean step time", ms_text, wait),
        AlertMetric.samples_per_s: ("throughput", lambda v: f"{rate_text(v)} samples/s", wait),
        AlertMetric.memory_share: ("GPU memory used", share_text, f"(fullest GPU, {device})"),
        AlertMetric.temperature: ("GPU temperature", lambda v: f"{v:.0f} °C", device),
        AlertMetric.no_data: ("no data for", lambda v: f"{v:.0f} s", ""),
        AlertMetric.straggler_ratio: ("straggler ratio", lambda v: f"{v:.2f}x", wait),
        AlertMetric.sm_util: ("SM active", percent_text, device),
        AlertMetric.tensor_util: ("tensor active", percent_text, device),
        AlertMetric.disk_free_share: ("free disk space", share_text, ""),
    }.get(metric, (str(rule.metric), lambda v: f"{v:.3g}", ""))


def _flag_words(rule: Any, value: float | None) -> str:
    metric = AlertMetric(rule.metric)
    if metric in END_METRICS:
        return f"the run {metric.removeprefix('run_')}"
    if metric == AlertMetric.stalled:
        return "training stalled: no step while the process is alive"
    name = rule.metric_name or DEFAULT_METRIC_NAME
    return f"{name} is {'NaN or infinite' if value else 'finite'}"


def value_text(rule: Any, value: float | None, windows: ValueWindows = ValueWindows()) -> str:
    """A rule's value as the alert says it, written as the UI writes that quantity:
    "input wait 93.7 % of step time over the last 30 s", "GPU utilization 45 % over the last
    5 s"; "no value" when there is none."""
    if AlertMetric(rule.metric) in _FLAGS:
        return _flag_words(rule, value)
    subject, written, over = _measure(rule, windows)
    shown = "no value" if value is None else written(value)
    return " ".join(part for part in (subject, shown, over) if part)


def describe_condition(
    rule: AlertRule, value: float | None, windows: ValueWindows = ValueWindows()
) -> str:
    """The value and the rule it is held against: "input wait 93.7 % of step time over the
    last 30 s (rule: ≥ 20.0 % for 60 s)"."""
    if AlertMetric(rule.metric) in _FLAGS:
        return _flag_words(rule, value)
    written = _measure(rule, windows)[1]
    held = f" for {rule.for_s:g} s" if rule.for_s else ""
    threshold = f"{_SYMBOLS[Comparison(rule.comparison)]} {written(float(rule.threshold))}"
    return f"{value_text(rule, value, windows)} (rule: {threshold}{held})"


def resolution_text(
    rule: AlertRule,
    resolution: Resolution,
    cleared_at: datetime | None = None,
    *,
    fired: bool = True,
) -> str:
    """Why an alert resolved: "the run ended", "the condition cleared at 07:46:20 UTC"; one
    that was pending only (`fired` False) "never fired: the run ended before it held for 60 s"."""
    at = "" if cleared_at is None else f" at {cleared_at.strftime('%H:%M:%S')} UTC"
    why = {
        Resolution.run_ended: "the run ended",
        Resolution.condition_cleared: f"the condition cleared{at}",
        Resolution.steps_stopped: f"steps stopped{at} (the rule holds only while steps run)",
        Resolution.no_value: f"its value stopped coming{at}",
        Resolution.rule_changed: "the rule no longer applies (disabled, deleted or changed)",
    }[resolution]
    return why if fired else f"never fired: {why} before it held for {rule.for_s:g} s"


_OPS = {
    Comparison.lt: float.__lt__,
    Comparison.le: float.__le__,
    Comparison.gt: float.__gt__,
    Comparison.ge: float.__ge__,
}


@dataclass(slots=True)
class _Compiled:
    """A rule's fields as plain values, read once per rule change instead of per tick."""

    rule: AlertRule
    id: int
    metric: AlertMetric
    op: Any
    threshold: float
    only_while_stepping: bool
    scope: AlertScope
    project: str | None
    run_id: int | None
    param: tuple[AlertMetric, ParamKey] | None = None
    end: bool = False  # an END_METRICS rule: holds on a run no longer running, fires at once
    final: bool = False  # a FINAL_METRICS rule: judged once more on a run that just ended


@dataclass
class AlertEngine:
    rules: list[AlertRule] = field(default_factory=list)
    instances: dict[tuple[int, int], Instance] = field(default_factory=dict)
    _compiled: list[_Compiled] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.set_rules(self.rules)

    def set_rules(self, rules: Iterable[AlertRule]) -> None:
        self.rules = list(rules)
        self._compiled = [
            _Compiled(
                rule=rule,
                id=rule.id,
                metric=AlertMetric(rule.metric),
                op=_OPS[Comparison(rule.comparison)],
                threshold=float(rule.threshold),
                only_while_stepping=bool(rule.only_while_stepping),
                scope=AlertScope(rule.scope),
                project=rule.project,
                run_id=rule.run_id,
                param=_param(rule),
                end=AlertMetric(rule.metric) in END_METRICS,
                final=AlertMetric(rule.metric) in FINAL_METRICS,
            )
            for rule in self.rules
            if rule.enabled and rule.id is not None
        ]

    def wanted_params(self) -> set[tuple[AlertMetric, ParamKey]]:
        """The parametrized values the enabled rules need (RunFacts.params)."""
        return {c.param for c in self._compiled if c.param is not None}

    def active_for(self, run_id: int) -> bool:
        return any(key[1] == run_id for key in self.instances)

    def evaluate(self, facts: list[RunFacts], *, now: float) -> list[Transition]:
        """One tick: every enabled rule against every run. Returns the state changes.

        Cost: one comparison per (rule, run) and a dict lookup; state lives only for the
        few (rule, run) pairs whose condition holds or recently held."""
        transitions: list[Transition] = []
        instances = self.instances
        seen: set[tuple[int, int]] = set()
        for compiled in self._compiled:
            rule_id, metric, op, threshold = (
                compiled.id, compiled.metric, compiled.op, compiled.threshold
            )  # fmt: skip
            for run in facts:
                if compiled.scope is not AlertScope.all and not _applies(compiled, run):
                    continue
                if compiled.param is not None:
                    value = run.params.get(compiled.param)
                else:
                    value = run.values.get(metric)
                # A loss that went NaN as the run ended (TerminateOnNaN, or in its last
                # flush) still fires: once, at once, on the run's last values.
                final = compiled.final and run.just_ended and not run.running
                holds = (
                    (run.running or compiled.end or final)
                    and value is not None
                    and (run.stepping or not compiled.only_while_stepping)
                    and op(float(value), threshold)
                )
                key = (rule_id, run.run_id)
                if not holds and key not in instances:
                    continue
                seen.add(key)
                why = None
                if not holds:
                    why = _why_not(run, value, compiled, final=final)
                transition = self._step(
                    compiled.rule, run.run_id, holds, value, now,
                    at_once=compiled.end or final, why=why,
                )  # fmt: skip
                if transition is not None:
                    transitions.append(transition)
        # Instances whose rule was disabled, deleted or no longer applies, or whose run is
        # no longer watched: resolve them.
        rules = {rule.id: rule for rule in self.rules if rule.id is not None}
        for key in [k for k in instances if k not in seen]:
            instance = instances.pop(key)
            rule = rules.get(key[0])
            if rule is None:
                rule = AlertRule(
                    id=key[0], name="(deleted rule)", metric=AlertMetric.no_data,
                    comparison=Comparison.gt, threshold=0.0,
                )  # fmt: skip
            transitions.append(
                Transition(
                    rule=rule,
                    run_id=key[1],
                    state=AlertState.resolved,
                    previous=instance.state,
                    value=instance.value,
                    instance=instance,
                    resolution=Resolution.rule_changed,
                )
            )
        return transitions

    def _step(
        self,
        rule: AlertRule,
        run_id: int,
        holds: bool,
        value: float | None,
        now: float,
        *,
        at_once: bool = False,
        why: Resolution | None = None,
    ) -> Transition | None:
        assert rule.id is not None
        key = (rule.id, run_id)
        instance = self.instances.get(key)
        if instance is None:
            if not holds:
                return None
            instance = Instance(
                rule.id, run_id, AlertState.pending, active_since=now, last_true_at=now
            )
            instance.value = value
            self.instances[key] = instance
            if rule.for_s <= 0 or at_once:
                instance.state = AlertState.firing
                return Transition(rule, run_id, AlertState.firing, None, value, instance)
            return Transition(rule, run_id, AlertState.pending, None, value, instance)
        if value is not None:
            instance.value = value
        if instance.state == AlertState.pending:
            if not holds:
                del self.instances[key]
                return Transition(
                    rule, run_id, AlertState.resolved, AlertState.pending, value, instance,
                    resolution=why or Resolution.condition_cleared, cleared_at=now,
                )  # fmt: skip
            instance.last_true_at = now
            if now - instance.active_since >= rule.for_s or at_once:
                instance.state = AlertState.firing
                return Transition(
                    rule, run_id, AlertState.firing, AlertState.pending, value, instance
                )
            return None
        # firing
        if holds:
            instance.last_true_at = now
            instance.cleared_at = None
            return None
        if instance.cleared_at is None:
            instance.cleared_at = now
        if now - instance.last_true_at >= rule.keep_firing_for_s:
            del self.instances[key]
            return Transition(
                rule, run_id, AlertState.resolved, AlertState.firing, value, instance,
                resolution=why or Resolution.condition_cleared, cleared_at=instance.cleared_at,
            )  # fmt: skip
        return None


def alert_message(
    rule: AlertRule,
    state: AlertState,
    value: float | None,
    run_name: str | None,
    *,
    windows: ValueWindows = ValueWindows(),
    why: str = "",
) -> str:
    """The alert's one line; `run_name` None: a server alert. A resolved alert says `why`
    (resolution_text) and what its value was."""
    verb = {
        AlertState.pending: "pending",
        AlertState.firing: "FIRING",
        AlertState.resolved: "resolved",
    }[state]
    where = "on the server" if run_name is None else f"on run {run_name!r}"
    metric = AlertMetric(rule.metric)
    if state == AlertState.resolved and why and metric not in END_METRICS:
        body = f"{why}; last reading: {value_text(rule, value, windows)}"
    else:
        body = describe_condition(rule, value, windows)
    return f"[{verb}] {rule.name} {where}: {body}"
