"""The rule and event store: alert rules (CRUD), alert records and run events.

Writes run in the writer thread."""

from datetime import datetime
from typing import Any

from sqlalchemy import func
from sqlmodel import Session, col, select

from stoker_server.core.errors import StokerError
from stoker_server.core.models import (
    Alert,
    AlertPublic,
    AlertRule,
    AlertRuleCreate,
    AlertRulePublic,
    AlertRulesPublic,
    AlertRuleUpdate,
    AlertScope,
    AlertsPublic,
    AlertState,
    Run,
    RunEvent,
    RunEventPublic,
    RunEventsPublic,
    check_scope,
    utc_now,
)


class AlertRuleNotFound(StokerError):
    status_code = 404

    def __init__(self, rule_id: int) -> None:
        super().__init__(f"alert rule {rule_id} not found")


class InvalidAlertRule(StokerError):
    status_code = 422


NULLABLE_RULE_FIELDS = ("project", "run_id", "metric_name", "baseline_run_id", "baseline_s",
                        "profile_steps")  # fmt: skip


# -- events ----------------------------------------------------------------------------------


def add_event(
    *, session: Session, run_id: int, kind: str, message: str, data: dict[str, Any]
) -> RunEventPublic:
    event = RunEvent(run_id=run_id, kind=kind, message=message[:2000], data=data)
    session.add(event)
    session.commit()
    session.refresh(event)
    return RunEventPublic.model_validate(event, from_attributes=True)


def list_events(
    *, session: Session, run_id: int, kind: str | None = None, limit: int = 500
) -> RunEventsPublic:
    where = [RunEvent.run_id == run_id]
    if kind:
        where.append(RunEvent.kind == kind)
    count = session.exec(select(func.count()).select_from(RunEvent).where(*where)).one()
    rows = session.exec(
        select(RunEvent).where(*where).order_by(col(RunEvent.at), col(RunEvent.id)).limit(limit)
    ).all()
    return RunEventsPublic(
        data=[RunEventPublic.model_validate(r, from_attributes=True) for r in rows], count=count
    )


# -- alert rules -----------------------------------------------------------------------------


def _rule_public(rule: AlertRule) -> AlertRulePublic:
    return AlertRulePublic.model_validate(rule, from_attributes=True)


def list_rules(*, session: Session) -> AlertRulesPublic:
    rules = session.exec(select(AlertRule).order_by(col(AlertRule.id))).all()
    return AlertRulesPublic(data=[_rule_public(r) for r in rules], count=len(rules))


def create_rule(*, session: Session, spec: AlertRuleCreate) -> AlertRulePublic:
    rule = AlertRule(**spec.model_dump(mode="json"))
    session.add(rule)
    session.commit()
    session.refresh(rule)
    return _rule_public(rule)


def update_rule(*, session: Session, rule_id: int, patch: AlertRuleUpdate) -> AlertRulePublic:
    rule = session.get(AlertRule, rule_id)
    if rule is None:
        raise AlertRuleNotFound(rule_id)
    changes = patch.model_dump(mode="json", exclude_unset=True)
    for name, value in changes.items():
        if value is None and name not in NULLABLE_RULE_FIELDS:
            raise InvalidAlertRule(f"{name}: may not be null")
        setattr(rule, name, value)
    try:
        check_scope(AlertScope(rule.scope), rule.project, rule.run_id)
    except ValueError as error:
        session.rollback()
        raise InvalidAlertRule(str(error)) from None
    rule.updated_at = utc_now()
    session.add(rule)
    session.commit()
    session.refresh(rule)
    return _rule_public(rule)


def delete_rule(*, session: Session, rule_id: int) -> None:
    rule = session.get(AlertRule, rule_id)
    if rule is None:
        raise AlertRuleNotFound(rule_id)
    session.delete(rule)
    session.commit()


# -- alerts ----------------------------------------------------------------------------------


def alert_public(alert: Alert) -> AlertPublic:
    return AlertPublic.model_validate(alert, from_attributes=True)


def list_alerts(
    *,
    session: Session,
    run_id: int | None = None,
    state: AlertState | None = None,
    rule_id: int | None = None,
    limit: int = 200,
) -> AlertsPublic:
    where = []
    if run_id is not None:
        where.append(Alert.run_id == run_id)
    if state is not None:
        where.append(Alert.state == state)
    if rule_id is not None:
        where.append(Alert.rule_id == rule_id)
    count = session.exec(select(func.count()).select_from(Alert).where(*where)).one()
    rows = session.exec(
        select(Alert).where(*where).order_by(col(Alert.id).desc()).limit(limit)
    ).all()
    return AlertsPublic(data=[alert_public(r) for r in rows], count=count)


def apply_transition(
    *,
    session: Session,
    alert_id: int | None,
    rule_id: int | None,
    run_id: int | None,
    rule_name: str,
    state: AlertState,
    value: float | None,
    message: str,
    reason: str | None = None,
) -> tuple[AlertPublic, RunEventPublic | None] | None:
    """Store one alert state change and its run event (a server alert, `run_id` None, has no
    run and no event); a resolved one's event keeps why (`reason`, alerting.Resolution).
    None when the run is gone."""
    if run_id is not None and session.get(Run, run_id) is None:
        return None
    now: datetime = utc_now()
    alert = session.get(Alert, alert_id) if alert_id is not None else None
    if alert is None:
        rule = session.get(AlertRule, rule_id) if rule_id is not None else None
        alert = Alert(
            rule_id=rule.id if rule is not None else None,
            run_id=run_id,
            rule_name=rule_name,
            state=state,
            started_at=now,
        )
    alert.state = state
    alert.value = value
    alert.message = message[:2000]
    if state == AlertState.firing:
        alert.fired_at = now
    elif state == AlertState.resolved:
        alert.resolved_at = now
    session.add(alert)
    session.flush()
    assert alert.id is not None
    if run_id is None:
        session.commit()
        session.refresh(alert)
        return alert_public(alert), None
    event = RunEvent(
        run_id=run_id,
        kind="alert",
        message=message[:2000],
        data={"alert_id": alert.id, "rule_id": alert.rule_id, "state": state, "value": value}
        | ({"reason": reason} if reason is not None else {}),
    )
    session.add(event)
    session.commit()
    session.refresh(alert)
    session.refresh(event)
    return alert_public(alert), RunEventPublic.model_validate(event, from_attributes=True)


def record_delivery(
    *, session: Session, alert_id: int, outcome: dict[str, Any]
) -> AlertPublic | None:
    alert = session.get(Alert, alert_id)
    if alert is None:
        return None
    alert.deliveries = [*alert.deliveries, outcome]
    session.add(alert)
    session.commit()
    session.refresh(alert)
    return alert_public(alert)


def link_profile(
    *, session: Session, alert_id: int, event_id: int, profile_id: int | None, error: str = ""
) -> tuple[AlertPublic, RunEventPublic] | None:
    """The profile an alert's firing captured (or why none was): on the alert and on its
    firing event."""
    alert = session.get(Alert, alert_id)
    event = session.get(RunEvent, event_id)
    if alert is None or event is None:
        return None
    if profile_id is not None:
        alert.profile_id = profile_id
        session.add(alert)
    extra = {"profile_id": profile_id} if profile_id is not None else {"profile_error": error}
    event.data = {**event.data, **extra}
    session.add(event)
    session.commit()
    session.refresh(alert)
    session.refresh(event)
    return alert_public(alert), RunEventPublic.model_validate(event, from_attributes=True)


def baseline_step_s(*, session: Session, run_id: int) -> float | None:
    """A baseline run's median step time in seconds (its summary's), for throughput_drop."""
    run = session.get(Run, run_id)
    median_ms = (run.summary or {}).get("step_time_ms_median") if run is not None else None
    return float(median_ms) / 1000 if median_ms else None


def run_brief(*, session: Session, run_id: int) -> dict[str, Any] | None:
    run = session.get(Run, run_id)
    if run is None:
        return None
    return {"id": run.id, "name": run.name, "project": run.project, "status": run.status}
