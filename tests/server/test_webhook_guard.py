"""Webhooks against a real server (issue 39): no internal destinations, at save and again at
delivery; URLs shown redacted except to admins and never logged in clear; generic stored
errors; one destination's slow receiver delays no other's."""

import hashlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.harness.detect_support import FAST_DETECTORS, ScriptedAgent, WebhookReceiver
from tests.harness.support import ServerProcess, wait_for

VIEW, ADMIN = "hook-viewer", "hook-admin"
INTERNAL = [
    "http://127.0.0.1:9/hook",
    "http://[::1]:9/hook",
    "http://localhost:9/hook",  # a name: resolved, to loopback
    "http://169.254.169.254/latest/meta-data/",  # the cloud metadata service
    "http://metadata.google.internal/computeMetadata/v1/",
    "http://10.1.2.3/hook",
    "http://192.168.0.10:8080/hook",
    "http://[::ffff:127.0.0.1]/hook",  # loopback, written as IPv6
    "http://0.0.0.0:9/hook",
]


def _rule(*urls: str, **extra: Any) -> dict[str, Any]:
    return {
        "name": "hooked", "metric": "step_time", "comparison": ">", "threshold": 0,
        "channels": [{"type": "webhook", "url": url} for url in urls], **extra,
    }  # fmt: skip


@pytest.fixture(scope="module")
def guarded_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    """Viewer and admin tokens, and no webhook host allowed (the default)."""
    env = {"STOKER_VIEW_TOKEN": VIEW, "STOKER_ADMIN_TOKEN": ADMIN}
    process = ServerProcess(data_dir=tmp_path_factory.mktemp("hooks"), env=env).start()
    yield process
    process.stop()


def _as(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


def test_internal_destinations_are_refused_when_a_rule_is_saved(
    guarded_server: ServerProcess,
) -> None:
    rules = f"{guarded_server.url}/api/v1/alert-rules"
    before = httpx.get(rules, headers=_as(ADMIN)).json()["count"]
    for url in INTERNAL:
        refused = httpx.post(rules, json=_rule(url), headers=_as(ADMIN))
        assert refused.status_code == 422, (url, refused.text)
        assert "STOKER_WEBHOOK_ALLOWED_HOSTS" in refused.json()["detail"], url
    kept = httpx.post(rules, json=_rule(), headers=_as(ADMIN)).json()
    changed = httpx.patch(f"{rules}/{kept['id']}", json=_rule(INTERNAL[3]), headers=_as(ADMIN))
    assert changed.status_code == 422 and "metadata" in changed.json()["detail"]
    assert httpx.get(rules, headers=_as(ADMIN)).json()["count"] == before + 1


def test_webhook_urls_are_shown_redacted_except_to_admins(guarded_server: ServerProcess) -> None:
    """A Slack URL's path is its secret: viewers (and a Prometheus scrape config holding the
    viewer token) see the host only. A public literal address: nothing is resolved."""
    secret = "https://93.184.216.34/services/T000/B000/very-secret"
    rules = f"{guarded_server.url}/api/v1/alert-rules"
    created = httpx.post(rules, json=_rule(secret, name="slack"), headers=_as(ADMIN))
    assert created.status_code == 201, created.text
    as_viewer = httpx.get(rules, headers=_as(VIEW)).json()["data"]
    as_admin = httpx.get(rules, headers=_as(ADMIN)).json()["data"]
    shown = next(r for r in as_viewer if r["id"] == created.json()["id"])
    assert shown["channels"][0]["url"] == "https://93.184.216.34/…"
    assert next(r for r in as_admin if r["id"] == created.json()["id"])["channels"] == [
        {"type": "webhook", "url": secret, "format": "json"}
    ]
    assert "very-secret" not in httpx.get(rules, headers=_as(VIEW)).text


def _alert_deliveries(server: ServerProcess, rule_id: int, count: int) -> list[dict[str, Any]]:
    def recorded() -> list[dict[str, Any]]:
        alerts = server.get("/api/v1/alerts", rule_id=rule_id)["data"]
        deliveries = alerts[0]["deliveries"] if alerts else []
        return deliveries if len(deliveries) >= count else []

    return wait_for(recorded, what=f"{count} deliveries recorded")


def test_a_destination_is_checked_again_at_delivery(tmp_path: Path) -> None:
    """A rule saved while its host was allowed (or stored before this check existed) is
    refused at delivery once it is not: the receiver gets nothing, the alert records a
    generic error, and the log never holds the URL's secret path."""
    receiver = WebhookReceiver()
    secret_path = "/hook/" + hashlib.sha256(b"t").hexdigest()
    allowed = ServerProcess(data_dir=tmp_path, env=FAST_DETECTORS).start()
    try:
        created = httpx.post(
            f"{allowed.url}/api/v1/alert-rules", json=_rule(receiver.url + secret_path)
        )
        assert created.status_code == 201, created.text
    finally:
        allowed.stop()
    env = {**FAST_DETECTORS, "STOKER_WEBHOOK_ALLOWED_HOSTS": ""}
    server = ServerProcess(data_dir=tmp_path, env=env).start()
    agent = ScriptedAgent(server, name="hooked-run")
    try:
        agent.steps(10, dur=0.02, wait=0.0)
        (delivery,) = _alert_deliveries(server, created.json()["id"], 1)
        assert delivery["status"] == "failed"
        assert delivery["error"].startswith("refused: not a public address")
        assert delivery["url"] == f"{receiver.url}/…"
        assert receiver.received == []
        assert secret_path not in server.log_text()
        assert f"{receiver.url}/…" in server.log_text()  # said, redacted
    finally:
        agent.close()
        server.stop()
        receiver.close()


def test_a_hanging_receiver_delays_no_other_destination(tmp_path: Path) -> None:
    """Deliveries go concurrently per destination: with the hanging receiver listed first,
    the other receives its firing while the hanging one's delivery is still unsettled (one
    at a time, it would have waited for the hanging one's timeouts and retries)."""
    hanging, other = WebhookReceiver(hold=True), WebhookReceiver()
    env = {**FAST_DETECTORS, "STOKER_WEBHOOK_TIMEOUT_S": "60", "STOKER_WEBHOOK_DEADLINE_S": "90"}
    server = ServerProcess(data_dir=tmp_path, env=env).start()
    agent = ScriptedAgent(server, name="two-receivers")
    try:
        rule = _rule(f"{hanging.url}/slow", f"{other.url}/fast", scope="run", run_id=agent.run_id)
        created = httpx.post(f"{server.url}/api/v1/alert-rules", json=rule)
        assert created.status_code == 201, created.text
        agent.steps(10, dur=0.02, wait=0.0)
        wait_for(hanging.arrived.is_set, what="the hanging receiver's request")
        wait_for(lambda: other.at("/fast"), what="the other receiver's firing")
        (recorded,) = _alert_deliveries(server, created.json()["id"], 1)
        assert recorded["url"] == f"{other.url}/…" and recorded["status"] == "delivered"
        hanging.release.set()
        deliveries = _alert_deliveries(server, created.json()["id"], 2)
        assert {d["status"] for d in deliveries} == {"delivered"}
    finally:
        agent.close()
        server.stop()
        hanging.close()
        other.close()
