"""Webhook delivery, off the ingest path.

Alert transitions are queued (bounded; a full queue drops and records the drop) and a named
lifespan task posts them with a timeout and capped retries. The outcome of every delivery,
success or failure, is recorded on the alert, so a dead receiver is visible in the UI and
never slows ingest.
"""

import asyncio
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

import httpx

log = logging.getLogger(__name__)

RETRYABLE_STATUS = {408, 425, 429, 500, 502, 503, 504}


@dataclass
class Delivery:
    alert_id: int
    url: str
    format: str  # "json" | "slack"
    event: str  # "firing" | "resolved"
    payload: dict[str, Any]


def json_payload(
    alert: dict[str, Any], *, event: str, run: dict[str, Any], value: str, reason: str | None
) -> dict[str, Any]:
    """The generic JSON body: the alert, the transition, the run it concerns, the value as the
    UI writes it and, once resolved, why (alerting.Resolution: "run_ended", ...)."""
    body = {"source": "stoker", "event": event, "alert": alert, "run": run, "value": value}
    return body | ({"reason": reason} if reason is not None else {})


def slack_payload(
    alert: dict[str, Any], *, event: str, run: dict[str, Any], value: str, reason: str | None
) -> dict[str, Any]:
    """A Slack incoming-webhook body (also understood by Mattermost, Rocket.Chat, Teams' Slack
    compatibility): a `text` fallback (the alert's message, which says why a resolved alert
    resolved) and one section block."""
    emoji = ":rotating_light:" if event == "firing" else ":white_check_mark:"
    text = f"{emoji} {alert.get('message', '')}"
    if alert.get("run_id") is None:  # a server alert (the disk)
        where = [{"type": "mrkdwn", "text": "*Server*\nthis Stoker server"}]
    else:
        where = [
            {"type": "mrkdwn", "text": f"*Run*\n{run.get('name', '')} (#{alert.get('run_id')})"},
            {"type": "mrkdwn", "text": f"*Project*\n{run.get('project', '')}"},
        ]
    fields = [
        *where,
        {"type": "mrkdwn", "text": f"*State*\n{event}"},
        {"type": "mrkdwn", "text": f"*Value*\n{value}"},
    ]
    if alert.get("profile_id") is not None:  # the rule's action captured one
        fields.append({"type": "mrkdwn", "text": f"*Profile*\n#{alert['profile_id']} captured"})
    return {
        "text": text,
        "blocks": [
            {"type": "section", "text": {"type": "mrkdwn", "text": text}},
            {"type": "section", "fields": fields},
        ],
    }


Record = Callable[[Delivery, dict[str, Any]], Awaitable[None]]


class WebhookSender:
    """A bounded queue and the task that drains it."""

    def __init__(
        self,
        *,
        record: Record,
        timeout_s: float,
        attempts: int,
        backoff_s: float,
        queue_size: int,
    ) -> None:
        self._record = record
        self._timeout_s = timeout_s
        self._attempts = attempts
        self._backoff_s = backoff_s
        self._queue: asyncio.Queue[Delivery] = asyncio.Queue(maxsize=queue_size)
        self.dropped = 0

    def submit(self, delivery: Delivery) -> bool:
        """Queue a delivery without waiting. False (and recorded) when the queue is full."""
        try:
            self._queue.put_nowait(delivery)
            return True
        except asyncio.QueueFull:
            self.dropped += 1
            log.warning(
                "webhook queue full; dropping %s delivery to %s", delivery.event, delivery.url
            )
            return False

    async def run_forever(self) -> None:
        async with httpx.AsyncClient(timeout=self._timeout_s, follow_redirects=False) as client:
            while True:
                delivery = await self._queue.get()
                outcome = await self._deliver(client, delivery)
                try:
                    await self._record(delivery, outcome)
                except Exception:
                    log.exception(
                        "recording the webhook delivery for alert %s failed", delivery.alert_id
                    )

    async def _deliver(self, client: httpx.AsyncClient, delivery: Delivery) -> dict[str, Any]:
        error = ""
        status: int | None = None
        for attempt in range(1, self._attempts + 1):
            try:
                response = await client.post(delivery.url, json=delivery.payload)
                status = response.status_code
                if response.is_success:
                    return _outcome(delivery, "delivered", attempt, status, "")
                error = f"HTTP {status}"
                if status not in RETRYABLE_STATUS:
                    break
            except httpx.HTTPError as exc:
                error = f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__
            if attempt < self._attempts:
                await asyncio.sleep(min(30.0, self._backoff_s * 2 ** (attempt - 1)))
        log.warning("webhook to %s failed after %d attempts: %s", delivery.url, attempt, error)
        return _outcome(delivery, "failed", attempt, status, error)


def _outcome(
    delivery: Delivery, status: str, attempts: int, http_status: int | None, error: str
) -> dict[str, Any]:
    from stoker_server.core.models import utc_now

    return {
        "url": delivery.url,
        "format": delivery.format,
        "event": delivery.event,
        "status": status,
        "attempts": attempts,
        "http_status": http_status,
        "error": error[:500],
        "at": utc_now().isoformat(),
    }
