"""Alert rules and alerts against a real `stoker serve`: REST, the default rules, the
pending → firing → resolved path with live pushes, and webhooks to a loopback receiver."""

import re
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.conftest import DATABASES
from tests.harness.detect_support import (
    FAST_DETECTORS,
    LiveListener,
    ScriptedAgent,
    WebhookReceiver,
)
from tests.harness.support import ServerProcess, free_port, wait_for

pytestmark = pytest.mark.parametrize("database", DATABASES, indirect=True)
END_AND_METRIC = {"run_failed", "run_finished", "run_interrupted", "loss_nonfinite", "loss_rise"}


@pytest.fixture
def fast_server(tmp_path: Path, database: str) -> Iterator[ServerProcess]:
    env = {**FAST_DETECTORS, "STOKER_WEBHOOK_ATTEMPTS": "2", "STOKER_DATABASE_URL": database}
    process = ServerProcess(data_dir=tmp_path / "server", env=env).start()
    yield process
    process.stop()


def _rules(server: ServerProcess) -> list[dict[str, Any]]:
    return server.get("/api/v1/alert-rules")["data"]


def _builtin(server: ServerProcess, key: str) -> dict[str, Any]:
    return next(r for r in _rules(server) if r["builtin"] == key)


def _patch(server: ServerProcess, rule_id: int, **changes: Any) -> dict[str, Any]:
    response = httpx.patch(f"{server.url}/api/v1/alert-rules/{rule_id}", json=changes)
    assert response.status_code == 200, response.text
    return response.json()


class Feeder:
    """Keeps a scripted run stepping, with the GPU utilization the test sets."""

    def __init__(self, agent: ScriptedAgent, util: float) -> None:
        self.agent = agent
        self.util = util
        self.batches = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.is_set():
            self.agent.steps(5, dur=0.02, wait=0.0, device_util=self.util)
            self.batches += 1
            self._stop.wait(0.05)  # the pace of a training loop's flushes

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(10)


def test_default_rules_are_created_once_and_stay_deleted(tmp_path: Path, database: str) -> None:
    env = {"STOKER_DATABASE_URL": database}
    server = ServerProcess(data_dir=tmp_path / "server", env=env).start()
    try:
        rules = _rules(server)
        assert {r["builtin"] for r in rules} == {"low_gpu_util", "highly_input_bound", "stalled",
                                                 "disk_low", *END_AND_METRIC}  # fmt: skip
        enabled = {r["builtin"] for r in rules if r["enabled"]}
        assert enabled == {"low_gpu_util", "highly_input_bound", "stalled", "run_failed",
                           "disk_low"}  # fmt: skip
        assert _builtin(server, "highly_input_bound")["profile_steps"] == 20
        low = _builtin(server, "low_gpu_util")
        assert (low["metric"], low["comparison"], low["threshold"], low["for_s"]) == (
            "gpu_util", "<", 70.0, 30.0,
        )  # fmt: skip
        assert low["only_while_stepping"] is True
        stalled = _builtin(server, "stalled")
        assert httpx.delete(f"{server.url}/api/v1/alert-rules/{stalled['id']}").status_code == 204
    finally:
        server.stop()
    again = ServerProcess(data_dir=tmp_path / "server", env=env).start()
    try:
        assert {r["builtin"] for r in _rules(again)} == {"low_gpu_util", "highly_input_bound",
                                                         "disk_low", *END_AND_METRIC}  # fmt: skip
    finally:
        again.stop()


def test_alert_rule_validation_errors_are_clear_422s(fast_server: ServerProcess) -> None:
    url = f"{fast_server.url}/api/v1/alert-rules"
    base = {"name": "hot", "metric": "temperature", "comparison": ">", "threshold": 85}
    cases = [
        ({**base, "metric": "fan_speed"}, "metric"),
        ({**base, "comparison": "!="}, "comparison"),
        ({**base, "scope": "project"}, "needs a 'project'"),
        ({**base, "scope": "run"}, "needs a 'run_id'"),
        ({**base, "for_s": -1}, "for_s"),
        ({**base, "channels": [{"type": "webhook", "url": "not a url"}]}, "url"),
        ({**base, "channels": [{"type": "pager"}]}, "channels"),
        ({**base, "surprise": 1}, "surprise"),
    ]
    for body, mentioned in cases:
        response = httpx.post(url, json=body)
        assert response.status_code == 422, (body, response.text)
        assert mentioned in response.text, (mentioned, response.text)

    created = httpx.post(url, json={**base, "scope": "project", "project": "vision"})
    assert created.status_code == 201, created.text
    rule = created.json()
    assert rule["channels"] == [{"type": "browser"}] and rule["enabled"] is True
    assert _patch(fast_server, rule["id"], threshold=90, enabled=False)["threshold"] == 90
    bad = httpx.patch(f"{url}/{rule['id']}", json={"scope": "run"})
    assert bad.status_code == 422 and "run_id" in bad.json()["detail"]
    assert httpx.patch(f"{url}/9999", json={"enabled": False}).status_code == 404
    assert httpx.delete(f"{url}/{rule['id']}").status_code == 204
    assert httpx.delete(f"{url}/{rule['id']}").status_code == 404


def test_low_utilization_goes_pending_firing_resolved_and_webhooks_get_both(
    fast_server: ServerProcess,
) -> None:
    receiver = WebhookReceiver()
    live = LiveListener(fast_server)
    rule = _builtin(fast_server, "low_gpu_util")
    _patch(
        fast_server,
        rule["id"],
        for_s=1.0,
        keep_firing_for_s=0.5,
        channels=[
            {"type": "browser"},
            {"type": "webhook", "url": f"{receiver.url}/json"},
            {"type": "webhook", "url": f"{receiver.url}/slack", "format": "slack"},
        ],
    )
    agent = ScriptedAgent(fast_server, name="util-drop")
    feeder = Feeder(agent, util=95.0)
    try:
        wait_for(lambda: feeder.batches >= 20, what="a busy stretch at 95 %")
        assert fast_server.get("/api/v1/alerts", run_id=agent.run_id)["count"] == 0

        feeder.util = 30.0
        onset = time.monotonic()
        firing = wait_for(
            lambda: fast_server.get("/api/v1/alerts", run_id=agent.run_id, state="firing")["data"],
            what="the low-utilization alert firing",
        )[0]
        print(f"condition → firing: {time.monotonic() - onset:.2f} s (for_s = 1)")
        assert firing["rule_id"] == rule["id"]
        assert firing["value"] < 70  # the mean of the last second of samples
        assert firing["fired_at"] is not None
        # Written as the UI writes a utilization, its window named, beside the rule.
        assert firing["message"].endswith(
            ": GPU utilization 30 % over the last 1 s (rule: < 70 % for 1 s)"
        ), firing["message"]

        feeder.util = 95.0
        resolved = wait_for(
            lambda: fast_server.get("/api/v1/alerts", run_id=agent.run_id, state="resolved")[
                "data"
            ],
            what="the alert resolved",
        )[0]
        assert resolved["id"] == firing["id"] and resolved["resolved_at"] is not None
        # It says why: the condition cleared (at a time), and what the reading then was.
        assert re.search(
            r": the condition cleared at \d\d:\d\d:\d\d UTC; last reading: GPU utilization "
            r"95 % over the last 1 s$",
            resolved["message"],
        ), resolved["message"]

        def live_states() -> list[str]:
            states: list[str] = []  # delivery updates repeat a state; keep the transitions
            for m in live.of_type("alert", lambda m: m["alert"]["id"] == firing["id"]):
                if not states or states[-1] != m["alert"]["state"]:
                    states.append(m["alert"]["state"])
            return states

        wait_for(lambda: "resolved" in live_states(), what="the resolution pushed live")
        assert live_states() == ["pending", "firing", "resolved"]

        wait_for(lambda: len(receiver.at("/json")) >= 2, what="both JSON webhooks")
        wait_for(lambda: len(receiver.at("/slack")) >= 2, what="both Slack webhooks")
        generic = receiver.at("/json")
        assert [p["event"] for p in generic] == ["firing", "resolved"]
        assert [p.get("reason") for p in generic] == [None, "condition_cleared"]
        assert [p["value"] for p in generic] == [
            "GPU utilization 30 % over the last 1 s",
            "GPU utilization 95 % over the last 1 s",
        ]
        assert generic[1]["alert"]["message"] == resolved["message"]
        assert generic[0]["alert"]["run_id"] == agent.run_id
        assert generic[0]["run"]["name"] == "util-drop"
        slack = receiver.at("/slack")
        assert "FIRING" in slack[0]["text"] and "resolved" in slack[1]["text"]
        assert "the condition cleared at" in slack[1]["text"]
        assert {"type": "mrkdwn", "text": "*Value*\nGPU utilization 30 % over the last 1 s"} in (
            slack[0]["blocks"][1]["fields"]
        )
        assert slack[0]["blocks"][0]["type"] == "section"

        deliveries = wait_for(
            lambda: (
                d
                if len(
                    d := fast_server.get("/api/v1/alerts", run_id=agent.run_id)["data"][0][
                        "deliveries"
                    ]
                )
                == 4
                else None
            ),
            what="four deliveries recorded on the alert",
        )
        assert {d["status"] for d in deliveries} == {"delivered"}
        events = fast_server.get(f"/api/v1/runs/{agent.run_id}/events", kind="alert")["data"]
        assert [e["data"]["state"] for e in events] == ["pending", "firing", "resolved"]
        assert events[-1]["data"]["reason"] == "condition_cleared"
        assert events[-1]["message"] == resolved["message"]
    finally:
        feeder.stop()
        agent.close()
        live.close()
        receiver.close()


def test_an_alert_whose_run_ends_resolves_saying_the_run_ended(
    fast_server: ServerProcess,
) -> None:
    # Starved steps hold an input-wait rule; the run ends while the condition still holds.
    receiver = WebhookReceiver()
    agent = ScriptedAgent(fast_server, name="ends-starved")
    created = httpx.post(
        f"{fast_server.url}/api/v1/alert-rules",
        json={
            "name": "input-bound", "metric": "input_wait_share", "comparison": ">=",
            "threshold": 0.2, "for_s": 0, "keep_firing_for_s": 0.3, "scope": "run",
            "run_id": agent.run_id, "only_while_stepping": False,
            "channels": [{"type": "webhook", "url": f"{receiver.url}/json"}],
        },
    )  # fmt: skip
    assert created.status_code == 201, created.text
    try:
        for _ in range(4):
            agent.steps(10, dur=0.1, wait=0.0937)
        firing = wait_for(
            lambda: fast_server.get("/api/v1/alerts", rule_id=created.json()["id"])["data"],
            what="the input-wait alert firing",
        )[0]
        # The share as every surface writes it (93.7 %), its window named: not "0.937".
        assert firing["message"].endswith(
            ": input wait 93.7 % of step time over the last 30 s (rule: ≥ 20.0 %)"
        ), firing["message"]
        assert firing["value"] == 0.937
        agent.end("finished")

        def resolved() -> dict[str, Any] | None:
            alerts = fast_server.get("/api/v1/alerts", rule_id=created.json()["id"])["data"]
            return alerts[0] if alerts and alerts[0]["state"] == "resolved" else None

        alert = wait_for(resolved, what="the alert resolved once its run ended")
        assert alert["message"] == (
            "[resolved] input-bound on run 'ends-starved': the run ended; last reading: "
            "input wait 93.7 % of step time over the last 30 s"
        )
        events = fast_server.get(f"/api/v1/runs/{agent.run_id}/events", kind="alert")["data"]
        assert events[-1]["data"]["reason"] == "run_ended"
        assert events[-1]["message"] == alert["message"]
        hooks = wait_for(lambda: len(receiver.at("/json")) >= 2 and receiver.at("/json"),
                         what="the firing and resolved webhooks")  # fmt: skip
        assert [(p["event"], p.get("reason")) for p in hooks] == [
            ("firing", None),
            ("resolved", "run_ended"),
        ]
    finally:
        agent.close()
        receiver.close()


def test_failed_webhooks_are_recorded_and_never_block_ingest(fast_server: ServerProcess) -> None:
    failing = WebhookReceiver(status=500)
    dead_url = f"http://127.0.0.1:{free_port()}/hook"
    agent = ScriptedAgent(fast_server, name="hooks-down")
    created = httpx.post(
        f"{fast_server.url}/api/v1/alert-rules",
        json={
            "name": "always", "metric": "step_time", "comparison": ">", "threshold": 0,
            "scope": "run", "run_id": agent.run_id,
            "channels": [{"type": "webhook", "url": f"{failing.url}/x"},
                         {"type": "webhook", "url": dead_url}],
        },
    )  # fmt: skip
    assert created.status_code == 201, created.text
    try:
        agent.steps(10, dur=0.02, wait=0.0)

        def failed_deliveries() -> list[dict[str, Any]]:
            alerts = fast_server.get("/api/v1/alerts", rule_id=created.json()["id"])["data"]
            deliveries = alerts[0]["deliveries"] if alerts else []
            return deliveries if len(deliveries) == 2 else []

        deliveries = wait_for(failed_deliveries, what="both deliveries recorded as failed")
        by_url = {d["url"]: d for d in deliveries}  # stored redacted: the path is a secret
        assert by_url[f"{failing.url}/…"]["status"] == "failed"
        assert by_url[f"{failing.url}/…"]["http_status"] == 500
        assert by_url[f"{failing.url}/…"]["attempts"] == 2
        dead = by_url[dead_url.removesuffix("/hook") + "/…"]
        assert dead["status"] == "failed" and dead["error"] == "could not connect"
        assert len(failing.received) == 2  # retried once
        # Ingest carried on throughout (every batch acknowledged after commit).
        agent.steps(10, dur=0.02, wait=0.0)
    finally:
        agent.close()
        failing.close()
