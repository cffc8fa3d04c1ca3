"""Database reads and writes for diagnosis and alerts. Writes run in the writer thread."""

from datetime import datetime
from itertools import groupby
from typing import Any

from sqlalchemy import func
from sqlmodel import Session, col, select

from backend.alerting import AlertRuleCreate, AlertRuleUpdate, check_scope
from backend.diagnosis import RunWindow, worker_hosts
from backend.errors import StokerError
from backend.models import (
    Alert,
    AlertPublic,
    AlertRule,
    AlertRulePublic,
    AlertRulesPublic,
    AlertScope,
    AlertsPublic,
    AlertState,
    DeviceSample,
    HostSample,
    Run,
    RunEvent,
    RunEventPublic,
    RunEventsPublic,
    RunStatus,
    Step,
    utc_now,
)


class AlertRuleNotFound(StokerError):
    status_code = 404

    def __init__(self, rule_id: int) -> None:
        super().__init__(f"alert rule {rule_id} not found")


class InvalidAlertRule(StokerError):
    status_code = 422


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


# -- starvation marks ------------------------------------------------------------------------


def starved_ranges(
    *, session: Session, run_id: int, threshold: float, rank: int = 0, max_gap: int = 0
) -> dict[str, Any]:
    """Stretches of consecutive steps whose input wait is at least `threshold` of step time.

    Steps without a measured wait are neither starved nor fed. Ranges separated by at most
    `max_gap` fed steps are merged, so the UI can shade a noisy stretch as one band.
    """
    where = [Step.run_id == run_id, Step.rank == rank, col(Step.wait).is_not(None)]
    measured = session.exec(select(func.count()).select_from(Step).where(*where)).one()
    rows = session.exec(
        select(Step.step, Step.t, Step.dur, Step.wait)
        .where(*where, col(Step.wait) >= threshold * col(Step.dur), Step.step > 0)
        .order_by(col(Step.step))
    ).all()
    ranges: list[dict[str, Any]] = []
    for step, t, dur, wait in rows:
        if ranges and step - ranges[-1]["end"] <= max_gap + 1:
            current = ranges[-1]
            current["end"] = step
            current["t_end"] = t + dur
            current["steps"] += 1
            current["_wait"] += min(wait, dur)
            current["_dur"] += dur
        else:
            ranges.append(
                {"start": step, "end": step, "t_start": t, "t_end": t + dur, "steps": 1,
                 "_wait": min(wait, dur), "_dur": dur}
            )  # fmt: skip
    for item in ranges:
        wait_s, dur_s = item.pop("_wait"), item.pop("_dur")
        item["wait_share"] = round(wait_s / dur_s, 4) if dur_s > 0 else None
    return {
        "run_id": run_id,
        "rank": rank,
        "threshold": threshold,
        "measured_steps": measured,
        "starved_steps": len(rows),
        "ranges": ranges,
    }


# -- a window rebuilt from storage (runs not watched in memory) ------------------------------


def window_from_db(*, session: Session, run: Run, window_s: float) -> RunWindow:
    """The run's last `window_s` seconds of steps and samples, as a window."""
    assert run.id is not None
    window = RunWindow(
        run_id=run.id,
        window_s=window_s,
        project=run.project,
        name=run.name,
        running=run.status == RunStatus.running,
        environment=run.environment,
    )
    window.hosts = worker_hosts(run)
    last_t = run.stats.get("last_t")
    if last_t is not None:
        rows = session.exec(
            select(Step.rank, Step.step, Step.t, Step.dur, Step.wait, Step.batch_size)
            .where(Step.run_id == run.id, Step.t >= last_t - window_s - 1)
            .order_by(col(Step.rank), col(Step.step))
        ).all()
        for rank, group in groupby(rows, key=lambda r: r[0]):
            steps = list(group)
            window.add_steps(
                now=0.0,
                step=[r[1] for r in steps],
                t=[r[2] for r in steps],
                dur=[r[3] for r in steps],
                wait=[r[4] for r in steps],
                batch_size=[r[5] for r in steps],
                rank=rank,
            )
    newest_device = session.exec(
        select(func.max(DeviceSample.t)).where(DeviceSample.run_id == run.id)
    ).one()
    if newest_device is not None:
        rows = session.exec(
            select(DeviceSample)
            .where(DeviceSample.run_id == run.id, DeviceSample.t >= newest_device - window_s)
            .order_by(col(DeviceSample.t))
        ).all()
        window.add_device(
            now=0.0,
            t=[r.t for r in rows],
            gpu=[r.gpu for r in rows],
            util=[r.util for r in rows],
            mem_used=[r.mem_used for r in rows],
            mem_total=[r.mem_total for r in rows],
            temp_c=[r.temp_c for r in rows],
        )
    newest_host = session.exec(
        select(func.max(HostSample.t)).where(HostSample.run_id == run.id)
    ).one()
    if newest_host is not None:
        rows = session.exec(
            select(HostSample)
            .where(HostSample.run_id == run.id, HostSample.t >= newest_host - window_s)
            .order_by(col(HostSample.t))
        ).all()
        window.add_host(
            now=0.0,
            t=[r.t for r in rows],
            proc_cpu=[r.proc_cpu for r in rows],
            sys_cpu=[r.sys_cpu for r in rows],
        )
    return window


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
        if value is None and name not in ("project", "run_id"):
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
    run_id: int,
    rule_name: str,
    state: AlertState,
    value: float | None,
    message: str,
) -> tuple[AlertPublic, RunEventPublic] | None:
    """Store one alert state change and its run event. None when the run is gone."""
    if session.get(Run, run_id) is None:
        return None
    now: datetime = utc_now()
    alert = session.get(Alert, alert_id) if alert_id is not None else None
    if alert is None:
        alert = Alert(
            rule_id=rule_id if rule_id is not None and session.get(AlertRule, rule_id) else None,
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
    event = RunEvent(
        run_id=run_id,
        kind="alert",
        message=message[:2000],
        data={"alert_id": alert.id, "rule_id": alert.rule_id, "state": state, "value": value},
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


def run_brief(*, session: Session, run_id: int) -> dict[str, Any] | None:
    run = session.get(Run, run_id)
    if run is None:
        return None
    return {"id": run.id, "name": run.name, "project": run.project, "status": run.status}
