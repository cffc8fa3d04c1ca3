"""Alerts for how training ends and misbehaves, on real Keras training against a real
`stoker serve` (SQLite and PostgreSQL): a finished run, a crashed process (the training child
killed), a NaN loss, a throughput drop. (An input-bound run whose alert captures a profile:
tests/fit/test_alerts_profile.py.)

Each test keeps to its own project, with its own rules scoped to it. Delays come from the step
time measured here (tests/harness/gpu_like.py), never from a constant."""

import os
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

import numpy as np
import pytest
import tensorflow as tf

from tests.harness.alert_training import (
    FEATURES,
    HOLD_S,
    Pace,
    Training,
    alert_data,
    alerts_of,
    create_rule,
    fired_then_resolved,
    new_project,
    paced_model,
    steps_in_summary,
)
from tests.harness.detect_support import WebhookReceiver
from tests.harness.gpu_like import MARGIN, measure_step_s
from tests.harness.support import ServerProcess, wait_for

REPO = Path(__file__).resolve().parents[2]


pytestmark = pytest.mark.usefixtures("alert_server")


def test_a_finished_run_fires_once_and_resolves_with_webhooks(
    alert_server: ServerProcess,
) -> None:
    server = alert_server
    receiver = WebhookReceiver()
    project = new_project()
    rule = create_rule(
        server, name="finished", metric="run_finished", comparison=">=", threshold=1,
        keep_firing_for_s=0.5, scope="project", project=project,
        channels=[{"type": "browser"}, {"type": "webhook", "url": f"{receiver.url}/json"},
                  {"type": "webhook", "url": f"{receiver.url}/slack", "format": "slack"}],
    )  # fmt: skip
    failed = create_rule(
        server, name="failed here", metric="run_failed", comparison=">=", threshold=1,
        scope="project", project=project,
    )  # fmt: skip
    try:
        model = paced_model(Pace(HOLD_S))
        training = Training(server, model, alert_data().repeat(), project=project, name="ends")
        run_id = training.run_id()
        wait_for(lambda: steps_in_summary(server, run_id) >= 20, timeout_s=60, what="steps")
        assert alerts_of(server, rule["id"]) == []  # nothing while it runs
        training.stop()  # the fit returns normally: the run finished
        assert training.error is None
        alert = fired_then_resolved(server, rule["id"])
        assert alert["run_id"] == run_id and "finished" in alert["message"]
        wait_for(lambda: receiver.at("/json") and receiver.at("/slack"), what="the webhooks")
        time.sleep(1.0)  # a resolved message would have come by now
        # A run's end is an event: told once, when it fires.
        assert [p["event"] for p in receiver.at("/json")] == ["firing"]
        assert receiver.at("/json")[0]["run"]["name"] == "ends"
        slack = receiver.at("/slack")
        assert len(slack) == 1 and "FIRING" in slack[0]["text"]
        assert "the run finished" in slack[0]["text"]
        assert alerts_of(server, failed["id"]) == []
    finally:
        receiver.close()


def _child(server: ServerProcess, project: str, name: str, *args: str) -> subprocess.Popen[bytes]:
    """tests/harness/train_script.py in a process of its own, as a user's training script runs."""
    return subprocess.Popen(
        [sys.executable, "-m", "tests.harness.train_script", "--server", server.url, "--name", name,
         "--project", project, *args],
        cwd=REPO, env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2"},
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip


def test_a_training_script_that_raises_is_failed(alert_server: ServerProcess) -> None:
    server = alert_server
    project = new_project()
    rule = create_rule(
        server, name="failed", metric="run_failed", comparison=">=", threshold=1,
        keep_firing_for_s=0.5, scope="project", project=project,
    )  # fmt: skip
    child = _child(server, project, "raises", "--epochs", "3", "--fail-at-batch", "10")
    assert child.wait(180) != 0
    alert = fired_then_resolved(server, rule["id"])
    assert "the run failed" in alert["message"]
    assert "process died" not in alert["message"]  # its agent said so


def test_a_killed_training_process_fires_the_failed_alert(alert_server: ServerProcess) -> None:
    server = alert_server
    project = new_project()
    rule = create_rule(
        server, name="crashed", metric="run_failed", comparison=">=", threshold=1,
        keep_firing_for_s=0.5, scope="project", project=project,
    )  # fmt: skip
    seeded = next(
        r for r in server.get("/api/v1/alert-rules")["data"] if r["builtin"] == "run_failed"
    )
    assert seeded["enabled"] is True  # "failed" is on by default
    name = f"killed-{uuid.uuid4().hex[:6]}"
    child = _child(server, project, name, "--epochs", "100000", "--batch-delay-s", "0.01")
    try:

        def stepping() -> int | None:
            runs = server.get("/api/v1/runs", project=project)["data"]
            return runs[0]["id"] if runs and runs[0]["summary"]["steps"] >= 20 else None

        run_id = wait_for(stepping, timeout_s=120, what="the child training")
    finally:
        child.send_signal(signal.SIGKILL)
        child.wait(30)
    alert = fired_then_resolved(server, rule["id"])
    assert alert["run_id"] == run_id
    assert "its process died" in alert["message"], alert["message"]
    assert server.get(f"/api/v1/runs/{run_id}")["status"] == "interrupted"
    # The seeded rule fired for it too.
    assert [a for a in alerts_of(server, seeded["id"]) if a["run_id"] == run_id and a["fired_at"]]


def test_a_loss_going_nan_fires_and_resolves_when_the_run_ends(
    alert_server: ServerProcess,
) -> None:
    server = alert_server
    project = new_project()
    rule = create_rule(
        server, name="nan loss", metric="metric_nonfinite", metric_name="loss",
        comparison=">=", threshold=1, keep_firing_for_s=0.5, scope="project", project=project,
    )  # fmt: skip
    # Real data that turns bad: from batch 40 on, the inputs hold a NaN, the loss is NaN, and
    # the weights it updates are NaN from then on.
    x = np.random.default_rng(0).random((16 * 120, FEATURES), dtype=np.float32)
    x[16 * 40 :: 16, 0] = np.nan
    y = np.random.default_rng(1).random((16 * 120, 1), dtype=np.float32)
    data = tf.data.Dataset.from_tensor_slices((x, y)).batch(16)
    training = Training(server, paced_model(Pace(HOLD_S)), data, project=project, name="nan",
                        steps=120, every_n_batches=5)  # fmt: skip
    run_id = training.run_id()
    training.thread.join(120)
    assert training.error is None
    # The run may end within keep_firing_for_s of the NaN: the alert fired, then resolved.
    alert = fired_then_resolved(server, rule["id"])
    assert alert["run_id"] == run_id and "loss is NaN or infinite" in alert["message"]
    # The finite loss before it never fired.
    assert len(alerts_of(server, rule["id"])) == 1


def _paces(step_s: float) -> tuple[float, float]:
    """The device hold of a run's normal steps and of its slowed ones, from the step time
    measured here: the hold is most of a normal step (MARGIN x the measured compute), so the
    CPU's load moves the step time little; a slowed step holds MARGIN + 1 times a whole
    normal step, a drop of at least 75 % however loaded the machine."""
    normal = MARGIN * step_s
    return normal, (MARGIN + 1) * (normal + step_s)


# The throughput rule is judged on the server's in-memory windows, whatever the database; the
# alert's storage on PostgreSQL is the other tests' (each of these is ~35 s of pacing).
@pytest.mark.parametrize("alert_server", ["sqlite"], indirect=True)
def test_throughput_drop_below_the_first_steps_fires_and_resolves(
    alert_server: ServerProcess,
) -> None:
    server = alert_server
    project = new_project()
    pace = Pace(HOLD_S)
    model = paced_model(pace)
    step_s = measure_step_s(model, alert_data())
    normal, slowed = _paces(step_s)
    pace.hold_s = normal
    baseline_steps = 60
    rule = create_rule(
        server, name="slower", metric="throughput_drop", comparison=">=", threshold=0.5,
        baseline_s=baseline_steps * (normal + step_s), for_s=0.3, keep_firing_for_s=0.3,
        only_while_stepping=True, scope="project", project=project,
    )  # fmt: skip
    training = Training(server, model, alert_data().repeat(), project=project, name="slows")
    try:
        run_id = training.run_id()
        # Past its first baseline_s, and past 256 more steps at the first pace: no alert.
        wait_for(lambda: steps_in_summary(server, run_id) >= baseline_steps + 300, timeout_s=120,
                 what="the first steps")  # fmt: skip
        assert alerts_of(server, rule["id"]) == []
        pace.hold_s = slowed
        fired = wait_for(
            lambda: alerts_of(server, rule["id"], "firing"), timeout_s=120, what="the drop alert"
        )[0]
        assert fired["run_id"] == run_id and fired["value"] >= 0.5
        pace.hold_s = normal  # back to its pace: the recent steps' median recovers
        fired_then_resolved(server, rule["id"])
    finally:
        training.stop()
    assert training.error is None


# The throughput rule is judged on the server's in-memory windows, whatever the database; the
# alert's storage on PostgreSQL is the other tests' (each of these is ~35 s of pacing).
@pytest.mark.parametrize("alert_server", ["sqlite"], indirect=True)
def test_throughput_drop_below_a_baseline_run(alert_server: ServerProcess) -> None:
    server = alert_server
    project = new_project()
    pace = Pace(HOLD_S)
    model = paced_model(pace)
    step_s = measure_step_s(model, alert_data())
    normal, slowed = _paces(step_s)
    pace.hold_s = normal
    fast = Training(server, model, alert_data(), project=project, name="baseline", steps=60)
    baseline_id = fast.run_id()
    fast.thread.join(120)
    wait_for(lambda: server.get(f"/api/v1/runs/{baseline_id}")["status"] == "finished",
             what="the baseline run's end")  # fmt: skip
    rule = create_rule(
        server, name="slower than baseline", metric="throughput_drop", comparison=">=",
        threshold=0.5, baseline_run_id=baseline_id, keep_firing_for_s=0.3, scope="project",
        project=project, only_while_stepping=True,
    )  # fmt: skip
    pace.hold_s = slowed
    slow = Training(server, model, alert_data().repeat(), project=project, name="slow")
    try:
        run_id = slow.run_id()
        fired = wait_for(
            lambda: alerts_of(server, rule["id"], "firing"), timeout_s=120, what="the drop alert"
        )[0]
        assert fired["run_id"] == run_id and f"run #{baseline_id}" in fired["message"]
    finally:
        slow.stop()
    fired_then_resolved(server, rule["id"])  # the run ended
