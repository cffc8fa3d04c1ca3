"""The disk alert against a real `stoker serve`: the seeded rule on the free share of
the data directory's disk fires while the real free share is under its threshold and resolves
once the threshold is lowered under it; the alert belongs to no run, is pushed live and
delivered to webhooks like any other."""

import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.conftest import DATABASES
from tests.harness.detect_support import FAST_DETECTORS, LiveListener, WebhookReceiver
from tests.harness.support import ServerProcess, wait_for

pytestmark = pytest.mark.parametrize("database", DATABASES, indirect=True)


@pytest.fixture
def fast_server(tmp_path: Path, database: str) -> Iterator[ServerProcess]:
    env = {**FAST_DETECTORS, "STOKER_DATABASE_URL": database}
    process = ServerProcess(data_dir=tmp_path / "server", env=env).start()
    yield process
    process.stop()


def _patch(server: ServerProcess, rule_id: int, **changes: Any) -> dict[str, Any]:
    response = httpx.patch(f"{server.url}/api/v1/alert-rules/{rule_id}", json=changes)
    assert response.status_code == 200, response.text
    return response.json()


def test_disk_rule_is_seeded_on_and_fires_and_resolves_on_the_real_free_share(
    fast_server: ServerProcess,
) -> None:
    rules = fast_server.get("/api/v1/alert-rules")["data"]
    rule = next(r for r in rules if r["builtin"] == "disk_low")
    assert (rule["metric"], rule["comparison"], rule["threshold"], rule["enabled"]) == (
        "disk_free_share", "<", 0.05, True,
    )  # fmt: skip
    usage = shutil.disk_usage(fast_server.data_dir)
    share = usage.free / usage.total
    assert 0 < share < 1, "the test needs a disk neither empty nor full"

    receiver = WebhookReceiver()
    live = LiveListener(fast_server)
    try:
        # A threshold above the real free share: the condition holds.
        _patch(
            fast_server,
            rule["id"],
            threshold=(share + 1) / 2,
            for_s=0.0,
            keep_firing_for_s=0.0,
            channels=[
                {"type": "browser"},
                {"type": "webhook", "url": f"{receiver.url}/json"},
                {"type": "webhook", "url": f"{receiver.url}/slack", "format": "slack"},
            ],
        )
        firing = wait_for(
            lambda: fast_server.get("/api/v1/alerts", rule_id=rule["id"], state="firing")["data"],
            what="the disk alert firing",
        )[0]
        assert firing["run_id"] is None  # the server's, not a run's
        assert firing["value"] == pytest.approx(share, abs=0.01)
        assert "on the server" in firing["message"] and "free disk space" in firing["message"]

        # Lowered under the real free share: the condition clears, the alert resolves.
        _patch(fast_server, rule["id"], threshold=share / 2)
        resolved = wait_for(
            lambda: fast_server.get("/api/v1/alerts", rule_id=rule["id"], state="resolved")["data"],
            what="the disk alert resolved",
        )[0]
        assert resolved["id"] == firing["id"] and resolved["resolved_at"] is not None

        def live_states() -> list[str]:
            states: list[str] = []
            for m in live.of_type("alert", lambda m: m["alert"]["id"] == firing["id"]):
                if not states or states[-1] != m["alert"]["state"]:
                    states.append(m["alert"]["state"])
            return states

        wait_for(lambda: "resolved" in live_states(), what="the resolution pushed live")
        assert live_states() == ["firing", "resolved"]

        wait_for(lambda: len(receiver.at("/json")) >= 2, what="both JSON webhooks")
        wait_for(lambda: len(receiver.at("/slack")) >= 2, what="both Slack webhooks")
        generic = receiver.at("/json")
        assert [p["event"] for p in generic] == ["firing", "resolved"]
        assert generic[0]["alert"]["run_id"] is None and generic[0]["run"] == {}
        slack = receiver.at("/slack")
        assert "FIRING" in slack[0]["text"] and "resolved" in slack[1]["text"]
        fields = [f["text"] for f in slack[0]["blocks"][1]["fields"]]
        assert fields[0].startswith("*Server*") and not any("*Run*" in f for f in fields)
        # Only one episode: the rule is judged once per tick on the server, not once per run.
        assert fast_server.get("/api/v1/alerts", rule_id=rule["id"])["count"] == 1
    finally:
        live.close()
        receiver.close()
