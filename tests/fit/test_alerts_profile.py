"""An input-bound run whose alert captures a profile, on real Keras training against a real
`stoker serve` (SQLite and PostgreSQL).

Apart from tests/fit/test_alerts_training.py: a profiler capture in a pytest process has been
followed, later in the same process, by a thread stalled for a minute or more (the test that
happened to run next: no step stored, a run never ended, a migration that never returned).
`make test` runs this module in a process of its own, like the other profiled fits.
"""

from typing import Any

from tests.harness.alert_training import (
    HOLD_S,
    Pace,
    Training,
    alert_data,
    alerts_of,
    create_rule,
    new_project,
    paced_model,
)
from tests.harness.detect_support import WebhookReceiver
from tests.harness.gpu_like import measure_step_s, sleep_per_batch, starving_delay_s
from tests.harness.support import ServerProcess, wait_for


def test_an_input_bound_run_gets_its_profile_captured_by_the_alert(
    alert_server: ServerProcess,
) -> None:
    server = alert_server
    project = new_project()
    pace = Pace(HOLD_S)
    model = paced_model(pace)
    step_s = measure_step_s(model, alert_data())
    receiver = WebhookReceiver()
    rule = create_rule(
        server, name="input-bound", metric="input_wait_share", comparison=">=", threshold=0.5,
        for_s=0.5, keep_firing_for_s=0.5, only_while_stepping=True, profile_steps=10,
        scope="project", project=project,
        channels=[{"type": "webhook", "url": f"{receiver.url}/json"},
                  {"type": "webhook", "url": f"{receiver.url}/slack", "format": "slack"}],
    )  # fmt: skip
    starved = sleep_per_batch(alert_data().repeat(), starving_delay_s(step_s))
    training = Training(server, model, starved, project=project, name="starved")
    try:
        run_id = training.run_id()
        fired = wait_for(
            lambda: [a for a in alerts_of(server, rule["id"]) if a["profile_id"]], timeout_s=120,
            what="the alert with its profile",
        )[0]  # fmt: skip
        pid = fired["profile_id"]
        assert fired["run_id"] == run_id

        def settled() -> dict[str, Any] | None:
            profile = server.get(f"/api/v1/runs/{run_id}/profiles/{pid}")
            return profile if profile["status"] in ("ready", "failed") else None

        profile = wait_for(settled, timeout_s=180, interval_s=0.2, what="the profile")
        # The webhooks sent on firing name the profile.
        wait_for(lambda: receiver.at("/json") and receiver.at("/slack"), what="the webhooks")
    finally:
        training.stop()
        receiver.close()
    assert training.error is None
    assert receiver.at("/json")[0]["alert"]["profile_id"] == pid
    slack_fields = receiver.at("/slack")[0]["blocks"][1]["fields"]
    assert {"type": "mrkdwn", "text": f"*Profile*\n#{pid} captured"} in slack_fields
    assert profile["alert_id"] == fired["id"], profile
    assert profile["status"] == "ready", profile
    assert profile["steps"] == 10 and profile["trace_bytes"] > 0
    events = server.get(f"/api/v1/runs/{run_id}/events", kind="alert")["data"]
    firing = [e for e in events if e["data"]["state"] == "firing"]
    assert firing[0]["data"]["profile_id"] == pid
    # Once per firing: one profile for this one firing.
    profiles = server.get(f"/api/v1/runs/{run_id}/profiles")["data"]
    assert [p["id"] for p in profiles if p["alert_id"] == fired["id"]] == [pid]
