"""Alert rules and their evaluation, like Prometheus alerting: pending → firing → resolved.

A rule names a metric, a comparison, a threshold, how long the condition must hold (`for_s`)
and how long a firing alert keeps firing after the condition clears (`keep_firing_for_s`),
so one blip neither fires nor flaps. One `Instance` per (rule, run) holds the state; each
tick evaluates every enabled rule against every watched run's current metric values, which
are computed once per run per tick. The engine is pure: it returns transitions, and the
caller stores, pushes and delivers them.
"""

import math
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Annotated, Any, Literal

from pydantic import (
    AfterValidator,
    AnyHttpUrl,
    BaseModel,
    ConfigDict,
    Field,
    StringConstraints,
    field_validator,
    model_validator,
)
from sqlalchemy.exc import IntegrityError
from sqlmodel import Session, col, select

from backend.core.models import (
    AlertMetric,
    AlertRule,
    AlertScope,
    AlertState,
    Comparison,
    SeedMarker,
)
from backend.diagnosis.levels import HIGHLY_INPUT_BOUND
from backend.ingest.protocol import no_nul

UNITS = {
    AlertMetric.gpu_util: "%",
    AlertMetric.input_wait_share: "",
    AlertMetric.step_time: "s",
    AlertMetric.samples_per_s: "samples/s",
    AlertMetric.memory_share: "",
    AlertMetric.temperature: "°C",
    AlertMetric.no_data: "s",
    AlertMetric.stalled: "",
    AlertMetric.straggler_ratio: "x",
    AlertMetric.sm_util: "%",
    AlertMetric.tensor_util: "%",
}


# -- REST shapes -----------------------------------------------------------------------------


class BrowserChannel(BaseModel):
    model_config = ConfigDict(extra="forbid")
    type: Literal["browser"]


class WebhookChannel(BaseModel):
    model_config = ConfigDict(extra="forbid")
    type: Literal["webhook"]
    url: AnyHttpUrl
    format: Literal["json", "slack"] = "json"


Channel = Annotated[BrowserChannel | WebhookChannel, Field(discriminator="type")]
# Text both databases can store (PostgreSQL text cannot hold NUL), and ids in a row id's range.
RuleText = Annotated[str, StringConstraints(min_length=1, max_length=200), AfterValidator(no_nul)]
RuleRunId = Annotated[int, Field(ge=1, le=2**31 - 1)]


class _RuleFields(BaseModel):
    model_config = ConfigDict(extra="forbid")

    @field_validator("threshold", check_fields=False)
    @classmethod
    def _finite(cls, value: float | None) -> float | None:
        if value is not None and not math.isfinite(value):
            raise ValueError("threshold must be a finite number")
        return value


class AlertRuleCreate(_RuleFields):
    name: RuleText
    metric: AlertMetric
    comparison: Comparison
    threshold: float
    for_s: float = Field(default=0.0, ge=0, le=86_400)
    keep_firing_for_s: float = Field(default=0.0, ge=0, le=86_400)
    only_while_stepping: bool = False
    scope: AlertScope = AlertScope.all
    project: RuleText | None = None
    run_id: RuleRunId | None = None
    channels: list[Channel] = Field(
        default_factory=lambda: [BrowserChannel(type="browser")], max_length=20
    )
    enabled: bool = True

    @model_validator(mode="after")
    def _scope_names_its_target(self) -> "AlertRuleCreate":
        check_scope(self.scope, self.project, self.run_id)
        return self


class AlertRuleUpdate(_RuleFields):
    name: RuleText | None = None
    metric: AlertMetric | None = None
    comparison: Comparison | None = None
    threshold: float | None = None
    for_s: float | None = Field(default=None, ge=0, le=86_400)
    keep_firing_for_s: float | None = Field(default=None, ge=0, le=86_400)
    only_while_stepping: bool | None = None
    scope: AlertScope | None = None
    project: RuleText | None = None
    run_id: RuleRunId | None = None
    channels: list[Channel] | None = Field(default=None, max_length=20)
    enabled: bool | None = None


def check_scope(scope: AlertScope, project: str | None, run_id: int | None) -> None:
    if scope == AlertScope.project and not project:
        raise ValueError("scope 'project' needs a 'project' name")
    if scope == AlertScope.run and run_id is None:
        raise ValueError("scope 'run' needs a 'run_id'")


# -- default rules ---------------------------------------------------------------------------

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


def seed_default_rules(*, session: Session) -> int:
    """Create the default rules on first start; once created they are the user's to edit."""
    if session.get(SeedMarker, "default_alert_rules") is not None:
        return 0
    for spec in DEFAULT_RULES:
        session.add(AlertRule(**spec, channels=[{"type": "browser"}]))
    session.add(SeedMarker(key="default_alert_rules"))
    try:
        session.commit()
    except IntegrityError:  # another server sharing the database seeded them first
        session.rollback()
        return 0
    return len(DEFAULT_RULES)


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


@dataclass
class Instance:
    rule_id: int
    run_id: int
    state: AlertState
    active_since: float
    alert_id: int | None = None
    last_true_at: float = 0.0
    value: float | None = None


@dataclass
class Transition:
    rule: AlertRule
    run_id: int
    state: AlertState
    previous: AlertState | None
    value: float | None
    instance: Instance
    message: str = ""


def _applies(rule: Any, facts: RunFacts) -> bool:
    if rule.scope == AlertScope.project:
        return facts.project == rule.project
    if rule.scope == AlertScope.run:
        return facts.run_id == rule.run_id
    return True


def describe_condition(rule: AlertRule, value: float | None) -> str:
    unit = UNITS.get(AlertMetric(rule.metric), "")
    shown = "no value" if value is None else f"{value:.3g}{(' ' + unit) if unit else ''}"
    return f"{rule.metric} {rule.comparison} {rule.threshold:g} (now {shown})"


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
            )
            for rule in self.rules
            if rule.enabled and rule.id is not None
        ]

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
                value = run.values.get(metric)
                holds = (
                    run.running
                    and value is not None
                    and (run.stepping or not compiled.only_while_stepping)
                    and op(float(value), threshold)
                )
                key = (rule_id, run.run_id)
                if not holds and key not in instances:
                    continue
                seen.add(key)
                transition = self._step(compiled.rule, run.run_id, holds, value, now)
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
                    message="rule no longer applies",
                )
            )
        return transitions

    def _step(
        self, rule: AlertRule, run_id: int, holds: bool, value: float | None, now: float
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
            if rule.for_s <= 0:
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
                    message=f"never fired: pending, cleared before it held for {rule.for_s:g} s",
                )  # fmt: skip
            instance.last_true_at = now
            if now - instance.active_since >= rule.for_s:
                instance.state = AlertState.firing
                return Transition(
                    rule, run_id, AlertState.firing, AlertState.pending, value, instance
                )
            return None
        # firing
        if holds:
            instance.last_true_at = now
            return None
        if now - instance.last_true_at >= rule.keep_firing_for_s:
            del self.instances[key]
            return Transition(rule, run_id, AlertState.resolved, AlertState.firing, value, instance)
        return None


def alert_message(rule: AlertRule, state: AlertState, value: float | None, run_name: str) -> str:
    verb = {
        AlertState.pending: "pending",
        AlertState.firing: "FIRING",
        AlertState.resolved: "resolved",
    }[state]
    return f"[{verb}] {rule.name} on run {run_name!r}: {describe_condition(rule, value)}"
