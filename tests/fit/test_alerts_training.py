"""Alerts for how training ends and misbehaves, on real Keras training against a real
`stoker serve` (SQLite and PostgreSQL): a finished run, a crashed process (the training child
killed), a NaN loss, a throughput drop, and an input-bound run whose alert captures a profile.

Each test keeps to its own project, with its own rules scoped to it. Delays come from the step
time measured here (tests/harness/gpu_like.py), never from a constant."""

import os
import signal
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import pytest
import tensorflow as tf

from tests.conftest import DATABASES
from tests.harness.detect_support import FAST_DETECTORS, WebhookReceiver
from tests.harness.gpu_like import MARGIN, measure_step_s, sleep_per_batch, starving_delay_s
from tests.harness.support import ServerProcess, wait_for
from trainer_agent import StokerCallback

FEATURES = 8
HOLD_S = 0.005  # the "device" part of a step (a sleep, not CPU)
REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module", params=DATABASES)
def alert_server(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[ServerProcess]:
    """One server per database for the module; a silent run is reaped after 2 s."""
    data_dir = tmp_path_factory.mktemp(f"alerts-{request.param}")
    if request.param == "sqlite":
        url = f"sqlite:///{data_dir / 'stoker.db'}"
    else:
        url = request.getfixturevalue("postgres_server").create_database()
    env = {**FAST_DETECTORS, "STOKER_DATABASE_URL": url, "STOKER_HEARTBEAT_TIMEOUT_S": "2"}
    process = ServerProcess(data_dir=data_dir, env=env).start()
    yield process
    process.stop()


def _rule(server: ServerProcess, **spec: Any) -> dict[str, Any]:
    response = httpx.post(f"{server.url}/api/v1/alert-rules", json=spec, timeout=10)
    assert response.status_code == 201, response.text
    return response.json()


def _project() -> str:
    return f"p-{uuid.uuid4().hex[:8]}"


def _alerts(server: ServerProcess, rule_id: int, state: str | None = None) -> list[Any]:
    params: dict[str, Any] = {"rule_id": rule_id}
    if state:
        params["state"] = state
    return server.get("/api/v1/alerts", **params)["data"]


def _fired_then_resolved(server: ServerProcess, rule_id: int) -> dict[str, Any]:
    fired = wait_for(
        lambda: [a for a in _alerts(server, rule_id) if a["fired_at"]], timeout_s=120,
        what=f"rule {rule_id}'s alert firing",
    )[0]  # fmt: skip
    resolved = wait_for(
        lambda: _alerts(server, rule_id, "resolved"), timeout_s=120,
        what=f"rule {rule_id}'s alert resolving",
    )[0]  # fmt: skip
    assert resolved["id"] == fired["id"] and resolved["resolved_at"] is not None
    events = server.get(f"/api/v1/runs/{fired['run_id']}/events", kind="alert")["data"]
    states = [e["data"]["state"] for e in events if e["data"]["alert_id"] == fired["id"]]
    assert states[-2:] == ["firing", "resolved"], states
    return resolved


class Pace:
    """How long the "device" holds each step; the test changes it mid-run. (A plain object:
    Keras would copy a list set on a layer into a tracked one.)"""

    def __init__(self, hold_s: float) -> None:
        self.hold_s = hold_s


class PacedHold(tf.keras.layers.Layer):
    """Holds each train step for `pace.hold_s` seconds without the CPU, like a device (see
    tests/harness/gpu_like.DeviceHold), read at run time: the test can make the step slower."""

    def __init__(self, pace: Pace, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.pace = pace

    def call(self, x: Any) -> Any:
        pace = self.pace

        def hold(first: np.ndarray) -> np.float32:
            time.sleep(pace.hold_s)
            return np.float32(0.0)

        held = tf.numpy_function(hold, [tf.reshape(x, [-1])[0]], tf.float32, stateful=True)
        return x + tf.stop_gradient(tf.ensure_shape(held, []))


def _model(pace: Pace, lr: float = 0.01) -> Any:
    model = tf.keras.Sequential(
        [tf.keras.Input(shape=(FEATURES,)), PacedHold(pace), tf.keras.layers.Dense(16),
         tf.keras.layers.Dense(1)]
    )  # fmt: skip
    model.compile(optimizer=tf.keras.optimizers.SGD(lr), loss="mse")
    return model


def _data(n: int = 256) -> tf.data.Dataset:
    x = np.random.default_rng(0).random((n, FEATURES), dtype=np.float32)
    y = np.random.default_rng(1).random((n, 1), dtype=np.float32)
    return tf.data.Dataset.from_tensor_slices((x, y)).batch(16)


class Training:
    """A fit on its own thread, monitored by Stoker, until `stop()` (or its steps ran out)."""

    def __init__(
        self, server: ServerProcess, model: Any, data: Any, *, project: str, name: str,
        steps: int = 100_000, every_n_batches: int = 50,
    ) -> None:  # fmt: skip
        self.callback = StokerCallback(
            run_name=name, project=project, server=server.url, every_n_batches=every_n_batches
        )
        self.model = model
        self.halt = threading.Event()
        self.error: BaseException | None = None
        halt = self.halt

        class Stop(tf.keras.callbacks.Callback):
            def on_train_batch_end(self, batch: int, logs: Any = None) -> None:
                if halt.is_set():
                    self.model.stop_training = True

        self._stop = Stop()
        self.thread = threading.Thread(
            target=self._fit, args=(self.callback.wrap(data), steps), daemon=True
        )
        self.thread.start()

    def _fit(self, data: Any, steps: int) -> None:
        try:
            self.model.fit(
                data, epochs=1, steps_per_epoch=steps, verbose=0,
                callbacks=[self.callback, self._stop],
            )  # fmt: skip
        except BaseException as error:  # the test asserts on it
            self.error = error

    def run_id(self) -> int:
        session = wait_for(lambda: self.callback.run_session, what="the run's session")
        return wait_for(lambda: session.sender.run_id, what="the run's id")

    def stop(self) -> None:
        self.halt.set()
        self.thread.join(120)


def _steps_stored(server: ServerProcess, run_id: int) -> int:
    return int(server.get(f"/api/v1/runs/{run_id}")["summary"]["steps"])


pytestmark = pytest.mark.usefixtures("alert_server")


def test_a_finished_run_fires_once_and_resolves_with_webhooks(
    alert_server: ServerProcess,
) -> None:
    server = alert_server
    receiver = WebhookReceiver()
    project = _project()
    rule = _rule(
        server, name="finished", metric="run_finished", comparison=">=", threshold=1,
        keep_firing_for_s=0.5, scope="project", project=project,
        channels=[{"type": "browser"}, {"type": "webhook", "url": f"{receiver.url}/json"},
                  {"type": "webhook", "url": f"{receiver.url}/slack", "format": "slack"}],
    )  # fmt: skip
    failed = _rule(
        server, name="failed here", metric="run_failed", comparison=">=", threshold=1,
        scope="project", project=project,
    )  # fmt: skip
    try:
        training = Training(server, _model(Pace(HOLD_S)), _data().repeat(), project=project,
                            name="ends")  # fmt: skip
        run_id = training.run_id()
        wait_for(lambda: _steps_stored(server, run_id) >= 20, timeout_s=60, what="steps")
        assert _alerts(server, rule["id"]) == []  # nothing while it runs
        training.stop()  # the fit returns normally: the run finished
        assert training.error is None
        alert = _fired_then_resolved(server, rule["id"])
        assert alert["run_id"] == run_id and "finished" in alert["message"]
        wait_for(lambda: receiver.at("/json") and receiver.at("/slack"), what="the webhooks")
        time.sleep(1.0)  # a resolved message would have come by now
        # A run's end is an event: told once, when it fires.
        assert [p["event"] for p in receiver.at("/json")] == ["firing"]
        assert receiver.at("/json")[0]["run"]["name"] == "ends"
        slack = receiver.at("/slack")
        assert len(slack) == 1 and "FIRING" in slack[0]["text"]
        assert "the run finished" in slack[0]["text"]
        assert _alerts(server, failed["id"]) == []
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
    project = _project()
    rule = _rule(
        server, name="failed", metric="run_failed", comparison=">=", threshold=1,
        keep_firing_for_s=0.5, scope="project", project=project,
    )  # fmt: skip
    child = _child(server, project, "raises", "--epochs", "3", "--fail-at-batch", "10")
    assert child.wait(180) != 0
    alert = _fired_then_resolved(server, rule["id"])
    assert "the run failed" in alert["message"]
    assert "process died" not in alert["message"]  # its agent said so


def test_a_killed_training_process_fires_the_failed_alert(alert_server: ServerProcess) -> None:
    server = alert_server
    project = _project()
    rule = _rule(
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
    alert = _fired_then_resolved(server, rule["id"])
    assert alert["run_id"] == run_id
    assert "its process died" in alert["message"], alert["message"]
    assert server.get(f"/api/v1/runs/{run_id}")["status"] == "interrupted"
    # The seeded rule fired for it too.
    assert [a for a in _alerts(server, seeded["id"]) if a["run_id"] == run_id and a["fired_at"]]


def test_a_loss_going_nan_fires_and_resolves_when_the_run_ends(
    alert_server: ServerProcess,
) -> None:
    server = alert_server
    project = _project()
    rule = _rule(
        server, name="nan loss", metric="metric_nonfinite", metric_name="loss",
        comparison=">=", threshold=1, keep_firing_for_s=0.5, scope="project", project=project,
    )  # fmt: skip
    # Real data that turns bad: from batch 40 on, the inputs hold a NaN, the loss is NaN, and
    # the weights it updates are NaN from then on.
    x = np.random.default_rng(0).random((16 * 120, FEATURES), dtype=np.float32)
    x[16 * 40 :: 16, 0] = np.nan
    y = np.random.default_rng(1).random((16 * 120, 1), dtype=np.float32)
    data = tf.data.Dataset.from_tensor_slices((x, y)).batch(16)
    training = Training(server, _model(Pace(HOLD_S)), data, project=project, name="nan",
                        steps=120, every_n_batches=5)  # fmt: skip
    run_id = training.run_id()
    training.thread.join(120)
    assert training.error is None
    # The run may end within keep_firing_for_s of the NaN: the alert fired, then resolved.
    alert = _fired_then_resolved(server, rule["id"])
    assert alert["run_id"] == run_id and "metric_nonfinite(loss)" in alert["message"]
    # The finite loss before it never fired.
    assert len(_alerts(server, rule["id"])) == 1


def _paces(step_s: float) -> tuple[float, float]:
    """The device hold of a run's normal steps and of its slowed ones, from the step time
    measured here: the hold is most of a normal step (MARGIN x the measured compute), so the
    CPU's load moves the step time little; a slowed step holds MARGIN + 1 times a whole
    normal step, a drop of at least 75 % however loaded the machine."""
    normal = MARGIN * step_s
    return normal, (MARGIN + 1) * (normal + step_s)


def test_throughput_drop_below_the_first_steps_fires_and_resolves(
    alert_server: ServerProcess,
) -> None:
    server = alert_server
    project = _project()
    pace = Pace(HOLD_S)
    model = _model(pace)
    step_s = measure_step_s(model, _data())
    normal, slowed = _paces(step_s)
    pace.hold_s = normal
    baseline_steps = 60
    rule = _rule(
        server, name="slower", metric="throughput_drop", comparison=">=", threshold=0.5,
        baseline_s=baseline_steps * (normal + step_s), for_s=0.3, keep_firing_for_s=0.3,
        only_while_stepping=True, scope="project", project=project,
    )  # fmt: skip
    training = Training(server, model, _data().repeat(), project=project, name="slows")
    try:
        run_id = training.run_id()
        # Past its first baseline_s, and past 256 more steps at the first pace: no alert.
        wait_for(lambda: _steps_stored(server, run_id) >= baseline_steps + 300, timeout_s=120,
                 what="the first steps")  # fmt: skip
        assert _alerts(server, rule["id"]) == []
        pace.hold_s = slowed
        fired = wait_for(
            lambda: _alerts(server, rule["id"], "firing"), timeout_s=120, what="the drop alert"
        )[0]
        assert fired["run_id"] == run_id and fired["value"] >= 0.5
        pace.hold_s = normal  # back to its pace: the recent steps' median recovers
        _fired_then_resolved(server, rule["id"])
    finally:
        training.stop()
    assert training.error is None


def test_throughput_drop_below_a_baseline_run(alert_server: ServerProcess) -> None:
    server = alert_server
    project = _project()
    pace = Pace(HOLD_S)
    model = _model(pace)
    step_s = measure_step_s(model, _data())
    normal, slowed = _paces(step_s)
    pace.hold_s = normal
    fast = Training(server, model, _data(), project=project, name="baseline", steps=60)
    baseline_id = fast.run_id()
    fast.thread.join(120)
    wait_for(lambda: server.get(f"/api/v1/runs/{baseline_id}")["status"] == "finished",
             what="the baseline run's end")  # fmt: skip
    rule = _rule(
        server, name="slower than baseline", metric="throughput_drop", comparison=">=",
        threshold=0.5, baseline_run_id=baseline_id, keep_firing_for_s=0.3, scope="project",
        project=project, only_while_stepping=True,
    )  # fmt: skip
    pace.hold_s = slowed
    slow = Training(server, model, _data().repeat(), project=project, name="slow")
    try:
        run_id = slow.run_id()
        fired = wait_for(
            lambda: _alerts(server, rule["id"], "firing"), timeout_s=120, what="the drop alert"
        )[0]
        assert fired["run_id"] == run_id and f"run #{baseline_id}" in fired["message"]
    finally:
        slow.stop()
    _fired_then_resolved(server, rule["id"])  # the run ended


def test_an_input_bound_run_gets_its_profile_captured_by_the_alert(
    alert_server: ServerProcess,
) -> None:
    server = alert_server
    project = _project()
    pace = Pace(HOLD_S)
    model = _model(pace)
    step_s = measure_step_s(model, _data())
    receiver = WebhookReceiver()
    rule = _rule(
        server, name="input-bound", metric="input_wait_share", comparison=">=", threshold=0.5,
        for_s=0.5, keep_firing_for_s=0.5, only_while_stepping=True, profile_steps=10,
        scope="project", project=project,
        channels=[{"type": "webhook", "url": f"{receiver.url}/json"},
                  {"type": "webhook", "url": f"{receiver.url}/slack", "format": "slack"}],
    )  # fmt: skip
    starved = sleep_per_batch(_data().repeat(), starving_delay_s(step_s))
    training = Training(server, model, starved, project=project, name="starved")
    try:
        run_id = training.run_id()
        fired = wait_for(
            lambda: [a for a in _alerts(server, rule["id"]) if a["profile_id"]], timeout_s=120,
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
