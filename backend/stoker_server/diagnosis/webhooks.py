"""Webhook delivery, off the ingest path.

Alert transitions are queued (bounded across all destinations; a full queue drops and records
the drop) and delivered by one task per destination (scheme, host and port), started when
its first delivery is queued and ended once its queue is empty: a slow or dead receiver
delays its own deliveries only. Within a destination, deliveries go in order (firing before
resolved). Each delivery has a timeout per attempt, capped retries and a total deadline for
all of them; at most `max_response_bytes` of an answer is read.

A destination must be public (core/net_guard.py), unless its host is listed in
`STOKER_WEBHOOK_ALLOWED_HOSTS`: its name is resolved at every delivery and the request goes to
the very address that was checked. The outcome of every delivery is recorded on the alert, with
the URL redacted and the error in a few fixed words (never the receiver's text or the
exception's, which would make the alerts page a port scanner); the URL is never logged in
clear.
"""

import asyncio
import contextlib
import logging
from collections import deque
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass
from typing import Any

import httpx

from stoker_server.core.net_guard import (
    DestinationRefused,
    Resolver,
    redact_url,
    system_resolver,
    vet_destination,
)

log = logging.getLogger(__name__)

RETRYABLE_STATUS = {408, 425, 429, 500, 502, 503, 504}
REFUSED = "refused: not a public address (STOKER_WEBHOOK_ALLOWED_HOSTS allows one)"


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


@dataclass
class _Progress:
    """How far one delivery got, for its outcome when its deadline cuts it short."""

    attempt: int = 0
    status: int | None = None


def destination(url: str) -> str:
    """What deliveries are grouped by: the receiver's scheme, host and port."""
    try:
        parts = httpx.URL(url)
        return f"{parts.scheme}://{parts.host}:{parts.port or ''}"
    except (httpx.InvalidURL, ValueError):
        return url


class WebhookSender:
    """The deliveries queued per destination, and one task per destination draining them."""

    def __init__(
        self,
        *,
        record: Record,
        timeout_s: float,
        attempts: int,
        backoff_s: float,
        queue_size: int,
        deadline_s: float = 30.0,
        max_response_bytes: int = 64 * 1024,
        allowed_hosts: Iterable[str] = (),
        resolver: Resolver = system_resolver,
    ) -> None:
        self._record = record
        self._timeout_s = timeout_s
        self._attempts = attempts
        self._backoff_s = backoff_s
        self._queue_size = queue_size
        self._deadline_s = deadline_s
        self._max_response_bytes = max_response_bytes
        self._allowed_hosts = tuple(allowed_hosts)
        self._resolver = resolver
        self._queues: dict[str, deque[Delivery]] = {}
        self._workers: dict[str, asyncio.Task[None]] = {}
        self._queued = 0
        self._client: httpx.AsyncClient | None = None
        self.dropped = 0

    @property
    def queued(self) -> int:
        return self._queued

    def submit(self, delivery: Delivery) -> bool:
        """Queue a delivery without waiting (on the event loop). False (and recorded) when the
        queues hold `queue_size` deliveries already."""
        if self._queued >= self._queue_size:
            self.dropped += 1
            log.warning(
                "webhook queue full; dropping %s delivery to %s",
                delivery.event, redact_url(delivery.url),
            )  # fmt: skip
            return False
        key = destination(delivery.url)
        self._queues.setdefault(key, deque()).append(delivery)
        self._queued += 1
        if key not in self._workers:
            self._workers[key] = asyncio.get_running_loop().create_task(
                self._drain(key), name=f"stoker-webhook {redact_url(key)}"
            )
        return True

    async def run_forever(self) -> None:
        """The `stoker-webhooks` lifespan task: holds the HTTP client; cancelled, it stops the
        destinations' tasks."""
        try:
            await asyncio.Event().wait()
        finally:
            workers = list(self._workers.values())
            for task in workers:
                task.cancel()
            for task in workers:
                with contextlib.suppress(asyncio.CancelledError, Exception):
                    await task
            if self._client is not None:
                await self._client.aclose()

    def _http(self) -> httpx.AsyncClient:
        if self._client is None:
            self._client = httpx.AsyncClient(timeout=self._timeout_s, follow_redirects=False)
        return self._client

    async def _drain(self, key: str) -> None:
        queue = self._queues[key]
        try:
            while queue:
                delivery = queue.popleft()
                self._queued -= 1
                outcome = await self.deliver(delivery)
                try:
                    await self._record(delivery, outcome)
                except Exception:
                    log.exception(
                        "recording the webhook delivery for alert %s failed", delivery.alert_id
                    )
        finally:
            del self._workers[key]
            if not queue:
                del self._queues[key]

    async def deliver(self, delivery: Delivery) -> dict[str, Any]:
        """Post one delivery, retried, within the total deadline; the outcome to record."""
        progress = _Progress()
        try:
            async with asyncio.timeout(self._deadline_s):
                return await self._attempts_until_done(delivery, progress)
        except TimeoutError:
            pass
        log.warning(
            "webhook to %s: no answer within its %.0f s deadline",
            redact_url(delivery.url), self._deadline_s,
        )  # fmt: skip
        return _outcome(delivery, "failed", progress.attempt, progress.status, "timed out")

    async def _attempts_until_done(self, delivery: Delivery, progress: _Progress) -> dict[str, Any]:
        error = ""
        status: int | None = None
        for attempt in range(1, self._attempts + 1):
            progress.attempt = attempt
            try:
                status = await self._post(delivery)
                progress.status = status
                if 200 <= status < 300:
                    return _outcome(delivery, "delivered", attempt, status, "")
                error = f"the receiver answered HTTP {status}"
                if status not in RETRYABLE_STATUS:
                    break
            except DestinationRefused as refused:
                log.warning("webhook not sent: %s", refused)
                return _outcome(delivery, "failed", attempt, None, REFUSED)
            except httpx.TimeoutException:
                error = "timed out"
            except (httpx.HTTPError, OSError) as exc:
                log.debug("webhook to %s: %s", redact_url(delivery.url), type(exc).__name__)
                error = "could not connect" if _connecting(exc) else "the delivery failed"
            if attempt < self._attempts:
                await asyncio.sleep(min(30.0, self._backoff_s * 2 ** (attempt - 1)))
        log.warning(
            "webhook to %s failed after %d attempts: %s", redact_url(delivery.url), attempt, error
        )
        return _outcome(delivery, "failed", attempt, status, error)

    async def _post(self, delivery: Delivery) -> int:
        """One attempt, to the checked address: the answer's status, its body read up to
        `max_response_bytes` and dropped."""
        url = httpx.URL(delivery.url)
        addresses = await vet_destination(
            delivery.url, allowed_hosts=self._allowed_hosts, resolver=self._resolver
        )
        # To the checked address: no second lookup between the check and the connection.
        headers = {"Host": url.netloc.decode("ascii")}
        extensions = {"sni_hostname": url.host}
        url = url.copy_with(host=addresses[0])
        async with self._http().stream(
            "POST", url, json=delivery.payload, headers=headers, extensions=extensions
        ) as response:
            read = 0
            async for chunk in response.aiter_raw():
                read += len(chunk)
                if read >= self._max_response_bytes:
                    break
            return response.status_code


def _connecting(error: BaseException) -> bool:
    return isinstance(error, (httpx.ConnectError, OSError))


def _outcome(
    delivery: Delivery, status: str, attempts: int, http_status: int | None, error: str
) -> dict[str, Any]:
    from stoker_server.core.models import utc_now

    return {
        "url": redact_url(delivery.url),
        "format": delivery.format,
        "event": delivery.event,
        "status": status,
        "attempts": attempts,
        "http_status": http_status,
        "error": error,
        "at": utc_now().isoformat(),
    }
