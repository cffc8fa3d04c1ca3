"""What follows from a detector tick's evaluation, in one place and in this order: store it,
push it to browsers, deliver it to webhooks; and an alert rule's action, a profile capture.

Everything with an effect is handed in when `DiagnosisEffects` is built (service/build.py):
the writer that stores, the publisher that pushes, the webhook queue and the capture. Tests
hand in fakes.
"""

import logging
from collections.abc import Awaitable, Callable
from typing import Any, Protocol

from stoker_server.core.levels import VERDICT_WORDS
from stoker_server.core.models import AlertMetric, AlertPublic, AlertState, RunEventPublic
from stoker_server.diagnosis.alerting import END_METRICS, SERVER_RUN_ID
from stoker_server.diagnosis.alerts_and_events import (
    add_event,
    apply_transition,
    link_profile,
    record_delivery,
    run_brief,
)
from stoker_server.diagnosis.evaluation import AlertChange, Evaluation, VerdictChange
from stoker_server.diagnosis.verdict import Diagnosis
from stoker_server.diagnosis.webhooks import Delivery, json_payload, slack_payload
from stoker_server.ingest.writer import Writer
from trainer_agent.figures import share_text

log = logging.getLogger(__name__)

# Asks a live run's agents for a profile of `steps` steps for alert `alert_id`; returns the
# profile's id (api/profile_captures.py), or raises with why it could not.
CaptureProfile = Callable[[int, int, int], Awaitable[int]]
# Queues one webhook delivery; False when the queue is full (diagnosis/webhooks.py).
SubmitDelivery = Callable[[Delivery], bool]


class Publisher(Protocol):
    """Pushes to the browsers (live.hub.LiveHub)."""

    def publish_verdict(self, diagnosis: Diagnosis) -> None: ...

    def publish_event(self, run_id: int, event: RunEventPublic) -> None: ...

    def publish_alert(self, alert: AlertPublic) -> None: ...


def verdict_event_message(diagnosis: Diagnosis, previous: Diagnosis | None) -> str:
    """A verdict change as its event says it, in the words and the rounding every surface uses
    (levels.VERDICT_WORDS, figures.share_text), its window named: "verdict not input-bound →
    moderately input-bound (input wait 5.0 % of step time over the last 30 s)"; a run's first
    verdict has no "from"."""
    words = VERDICT_WORDS[diagnosis.verdict]
    if previous is not None:
        words = f"{VERDICT_WORDS[previous.verdict]} → {words}"
    share = diagnosis.input_wait_share
    over = f" over the {diagnosis.window_label}" if diagnosis.window_label else ""
    detail = f" (input wait {share_text(share)} of step time{over})" if share is not None else ""
    return f"verdict {words}{detail}"


def delivery_recorder(
    writer: Writer, publisher: Publisher
) -> Callable[[Delivery, dict[str, Any]], Awaitable[None]]:
    """What the webhook sender does with each delivery's outcome: store it on its alert and
    push the alert again."""

    async def record(delivery: Delivery, outcome: dict[str, Any]) -> None:
        alert = await writer.run(record_delivery, alert_id=delivery.alert_id, outcome=outcome)
        if alert is not None:
            publisher.publish_alert(alert)

    return record


class DiagnosisEffects:
    """Stores, pushes and delivers what an evaluation found.

    Args:
        writer: Stores events and alerts.
        publisher: Pushes verdicts, events and alerts to the browsers.
        submit_delivery: Queues a webhook delivery.
        capture_profile: An alert rule's profile action; None where this server cannot send
            commands to agents.
    """

    def __init__(
        self,
        *,
        writer: Writer,
        publisher: Publisher,
        submit_delivery: SubmitDelivery,
        capture_profile: CaptureProfile | None,
    ) -> None:
        self.writer = writer
        self.publisher = publisher
        self.submit_delivery = submit_delivery
        self.capture_profile = capture_profile

    async def apply(self, evaluation: Evaluation) -> None:
        for change in evaluation.verdicts:
            await self.verdict_changed(change)
        for alert in evaluation.alerts:
            await self.alert_changed(alert)

    async def verdict_changed(self, change: VerdictChange) -> None:
        diagnosis = change.diagnosis
        self.publisher.publish_verdict(diagnosis)
        message = verdict_event_message(diagnosis, change.previous)
        try:
            event = await self.writer.run(
                add_event, run_id=diagnosis.run_id, kind="verdict", message=message,
                data=diagnosis.model_dump(mode="json"),
            )  # fmt: skip
        except Exception:
            log.exception("storing the verdict of run %s failed", diagnosis.run_id)
            return
        self.publisher.publish_event(diagnosis.run_id, event)

    async def alert_changed(self, change: AlertChange) -> None:
        transition = change.transition
        rule, instance = transition.rule, transition.instance
        run_id = None if transition.run_id == SERVER_RUN_ID else transition.run_id
        stored = await self.writer.run(
            apply_transition,
            alert_id=instance.alert_id,
            rule_id=rule.id,
            run_id=run_id,
            rule_name=rule.name,
            state=transition.state,
            value=transition.value,
            message=change.message,
            reason=change.reason,
        )
        if stored is None:
            return
        alert, event = stored
        instance.alert_id = alert.id
        if event is not None and transition.state == AlertState.firing and rule.profile_steps:
            alert, event = await self._capture_profile(change, alert, event)
        self.publisher.publish_alert(alert)
        if event is not None:  # a server alert has no run, and no run event
            self.publisher.publish_event(transition.run_id, event)
        # A run's end is an event: its alert resolving later is not news worth a message.
        notify = transition.state == AlertState.firing or (
            transition.state == AlertState.resolved
            and transition.previous == AlertState.firing
            and AlertMetric(rule.metric) not in END_METRICS
        )
        if notify:
            await self._deliver(change, alert, run_id)

    async def _deliver(self, change: AlertChange, alert: AlertPublic, run_id: int | None) -> None:
        rule, state = change.transition.rule, str(change.transition.state)
        webhooks = [c for c in rule.channels if c.get("type") == "webhook" and c.get("url")]
        if not webhooks:
            return
        run: dict[str, Any] = {}  # a server alert concerns no run
        if run_id is not None:
            brief = await self.writer.run(run_brief, run_id=run_id)
            run = brief or {}
        alert_json = alert.model_dump(mode="json")
        for channel in webhooks:
            fmt = channel.get("format", "json")
            build = slack_payload if fmt == "slack" else json_payload
            self.submit_delivery(
                Delivery(
                    alert_id=alert.id,
                    url=str(channel["url"]),
                    format=fmt,
                    event=state,
                    payload=build(
                        alert_json, event=state, run=run, value=change.value, reason=change.reason
                    ),
                )
            )

    async def _capture_profile(
        self, change: AlertChange, alert: AlertPublic, event: RunEventPublic
    ) -> tuple[AlertPublic, RunEventPublic]:
        """The rule's action: capture `profile_steps` steps of profile, once per firing and only
        while the run is live, through the same path as a user's request. The alert and its
        firing event then link the profile (or say why there is none)."""
        rule, run_id = change.transition.rule, change.transition.run_id
        profile_id: int | None = None
        error = ""
        if self.capture_profile is None:
            error = "profile not captured: this server cannot send commands to agents"
        elif not change.live:
            error = "profile not captured: the run is no longer live"
        else:
            try:
                profile_id = await self.capture_profile(
                    run_id, int(rule.profile_steps or 0), alert.id
                )
            except Exception as exc:  # a capture already running (409), no agent, ...
                error = f"profile not captured: {getattr(exc, 'detail', None) or exc}"
        try:
            linked = await self.writer.run(
                link_profile, alert_id=alert.id, event_id=event.id, profile_id=profile_id,
                error=error,
            )  # fmt: skip
        except Exception:
            log.exception("linking the profile of alert %s failed", alert.id)
            return alert, event
        return linked if linked is not None else (alert, event)
