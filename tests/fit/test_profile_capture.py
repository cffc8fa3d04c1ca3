"""A TensorFlow profiler capture asked for over the API, taken by the agent of a
real Keras fit on the CPU, uploaded, and analysed by xprof beside Stoker's own input wait."""

import os
import threading
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import pytest
import tensorflow as tf

from tests.harness.faults import fail_profile_start
from tests.harness.gpu_like import (
    MARGIN,
    collect_here,
    held_model,
    measure_step_s,
    sleep_per_batch,
    starving_delay_s,
)
from tests.harness.support import ServerProcess, wait_for
from trainer_agent import StokerCallback

FEATURES = 8
HOLD_S = 0.005  # the "device" step (a sleep, not CPU)


class _Stopper(tf.keras.callbacks.Callback):
    """Trains until the test says stop (the data repeats without end)."""

    def __init__(self) -> None:
        super().__init__()
        self.stop = threading.Event()

    def on_train_batch_end(self, batch: int, logs: Any = None) -> None:
        if self.stop.is_set():
            self.model.stop_training = True


def small_dataset() -> tf.data.Dataset:
    x = np.random.default_rng(0).random((256, FEATURES), dtype=np.float32)
    y = np.random.default_rng(1).random((256, 1), dtype=np.float32)
    return tf.data.Dataset.from_tensor_slices((x, y)).batch(16)


class Training:
    """A fit on its own thread, monitored by Stoker, until `stop()`."""

    def __init__(
        self, server: ServerProcess, dataset: Any, name: str, steps_per_execution: int = 1
    ) -> None:
        self.model = held_model(FEATURES, HOLD_S, steps_per_execution=steps_per_execution)
        self.callback = StokerCallback(run_name=name, server=server.url)
        self.stopper = _Stopper()
        self.error: BaseException | None = None
        data = self.callback.wrap(dataset.repeat())
        self.thread = threading.Thread(target=self._fit, args=(data,), daemon=True)
        self.thread.start()

    def _fit(self, data: Any) -> None:
        try:
            self.model.fit(
                data, epochs=1, steps_per_epoch=100_000, verbose=0,
                callbacks=[self.callback, self.stopper],
            )  # fmt: skip
        except BaseException as error:  # the test asserts on it
            self.error = error
        finally:
            collect_here()

    def run_id(self) -> int:
        session = wait_for(lambda: self.callback.run_session, what="the run's session")
        return wait_for(lambda: session.sender.run_id, what="the run's id")

    def stop(self) -> None:
        self.stopper.stop.set()
        self.thread.join(60)


def _request(server: ServerProcess, run_id: int, steps: int = 20) -> httpx.Response:
    url = f"{server.url}/api/v1/runs/{run_id}/profiles"
    return httpx.post(url, json={"steps": steps}, timeout=10)


def _settled(server: ServerProcess, run_id: int, pid: int) -> dict[str, Any]:
    def done() -> dict[str, Any] | None:
        profile = server.get(f"/api/v1/runs/{run_id}/profiles/{pid}")
        return profile if profile["status"] in ("ready", "failed") else None

    return wait_for(done, timeout_s=180, interval_s=0.2, what=f"profile {pid} to settle")


def _profile(
    server: ServerProcess, dataset: Any, name: str, steps_per_execution: int = 1
) -> dict[str, Any]:
    training = Training(server, dataset, name, steps_per_execution)
    try:
        run_id = training.run_id()
        wait_for(lambda: steps_stored(server, run_id) >= 30, timeout_s=60, what="steps")
        response = _request(server, run_id)
        assert response.status_code == 202, response.text
        pid = response.json()["id"]
        assert response.json()["status"] == "requested"
        second = _request(server, run_id)
        assert second.status_code == 409, second.text
        assert "one at a time" in second.json()["detail"]
        profile = _settled(server, run_id, pid)
        if profile["status"] == "ready":  # Stoker's share comes once the steps are stored
            profile = wait_for(
                lambda: _with_stoker_share(server, run_id, pid), what="Stoker's input share"
            )
        trace = httpx.get(f"{server.url}/api/v1/runs/{run_id}/profiles/{pid}/trace", timeout=30)
    finally:
        training.stop()
    assert training.error is None
    assert profile["status"] == "ready", profile
    assert trace.status_code == 200 and len(trace.content) == profile["trace_bytes"] > 0
    assert profile["input_share_profiler"] is not None, profile["analysis"]["conclusion"]
    print(
        f"\n{name}: profiler input share {profile['input_share_profiler']:.3f}, stoker "
        f"{profile['input_share_stoker']:.3f}; overhead {profile['overhead']}; trace "
        f"{profile['trace_bytes'] / profile['steps'] / 1024:.1f} KiB/step"
    )
    return profile


def _with_stoker_share(server: ServerProcess, run_id: int, pid: int) -> dict[str, Any] | None:
    profile = server.get(f"/api/v1/runs/{run_id}/profiles/{pid}")
    return profile if profile["input_share_stoker"] is not None else None


def steps_stored(server: ServerProcess, run_id: int) -> int:
    (count,) = server.rows("SELECT coalesce(sum(n), 0) FROM stepchunk WHERE run_id = ?", run_id)[0]
    return count


def test_starved_and_fed_fits_profiled_from_the_api_agree_with_stoker(
    server: ServerProcess,
) -> None:
    step_s = measure_step_s(held_model(FEATURES, HOLD_S), small_dataset())
    # At least 60 ms a batch: a capture's own cost and a loaded machine lengthen the step, and
    # the share floor below must hold for the step the capture sees, not only the one measured.
    slow = sleep_per_batch(small_dataset(), starving_delay_s(step_s, floor_s=0.06))
    starved = _profile(server, slow, "starved")
    fed = _profile(server, small_dataset().cache().prefetch(8), "fed")
    for profile in (starved, fed):
        analysis = profile["analysis"]
        assert analysis["available"] and len(analysis["steps"]) >= profile["steps"] // 2
        assert analysis["top_ops"] and analysis["iterators"]
        assert profile["overhead"]["steps"] == profile["steps"]
    # A delay of MARGIN steps per batch leaves the step waiting most of its time; a cached,
    # prefetched pipeline leaves it waiting little. Both measures must say so, and agree.
    starved_floor = (MARGIN - 1) / (MARGIN + 1)
    assert starved["input_share_profiler"] > starved_floor
    assert starved["input_share_stoker"] > starved_floor
    assert fed["input_share_profiler"] < starved_floor / 2
    assert fed["input_share_stoker"] < starved_floor / 2
    for profile in (starved, fed):
        difference = abs(profile["input_share_profiler"] - profile["input_share_stoker"])
        assert difference < 0.1, profile


def test_failing_capture_is_reported_and_training_goes_on(
    server: ServerProcess, monkeypatch: pytest.MonkeyPatch
) -> None:
    fail_profile_start(monkeypatch)
    training = Training(server, small_dataset(), "faulty")
    try:
        run_id = training.run_id()
        response = _request(server, run_id, steps=5)
        assert response.status_code == 202, response.text
        profile = _settled(server, run_id, response.json()["id"])
        before = steps_stored(server, run_id)
        wait_for(lambda: steps_stored(server, run_id) > before + 10, what="training going on")
        assert training.thread.is_alive()
    finally:
        training.stop()
    assert training.error is None
    assert profile["status"] == "failed"
    assert profile["error"].startswith("profile failed: InjectedFault")


def test_profile_of_a_run_without_agent_is_refused(server: ServerProcess) -> None:
    assert _request(server, 999).status_code == 404
    training = Training(server, small_dataset(), "ended")
    run_id = training.run_id()
    training.stop()
    wait_for(lambda: server.get(f"/api/v1/runs/{run_id}")["status"] != "running", what="end")
    response = _request(server, run_id)
    assert response.status_code == 409
    assert "no connected agent" in response.json()["detail"]


def test_trace_arrives_after_the_server_comes_back(server: ServerProcess) -> None:
    training = Training(server, small_dataset(), "outage")
    try:
        run_id = training.run_id()
        wait_for(lambda: steps_stored(server, run_id) >= 20, timeout_s=60, what="steps")
        response = _request(server, run_id, steps=200)
        assert response.status_code == 202, response.text
        pid = response.json()["id"]
        server.kill()  # the capture starts, ends and is uploaded while the server is away
        stored_before = steps_stored(server, run_id)
        session = training.callback.run_session
        assert session is not None
        wait_for(lambda: not session.sender.connected.is_set(), what="the agent to notice")
        server.start()
        profile = _settled(server, run_id, pid)
    finally:
        training.stop()
    assert training.error is None
    assert profile["status"] == "ready", profile
    # The premise: the capture ended after the server went away.
    assert profile["last_step"] > stored_before, (profile["last_step"], stored_before)
    trace = httpx.get(f"{server.url}/api/v1/runs/{run_id}/profiles/{pid}/trace", timeout=30)
    assert len(trace.content) == profile["trace_bytes"] > 0


@pytest.mark.parametrize(
    ("setting", "expect"),
    [("STOKER_PROFILE_QUOTA_BYTES", "evicted"), ("STOKER_PROFILE_MAX_TRACE_BYTES", "refused")],
)
def test_trace_over_the_quota_is_evicted_and_over_the_cap_refused(
    tmp_path, setting: str, expect: str
) -> None:
    server = ServerProcess(data_dir=tmp_path / "server", env={setting: "1"}).start()
    training = Training(server, small_dataset(), expect)
    try:
        run_id = training.run_id()
        response = _request(server, run_id, steps=5)
        assert response.status_code == 202, response.text
        pid = response.json()["id"]
        profile = _settled(server, run_id, pid)
        trace = httpx.get(f"{server.url}/api/v1/runs/{run_id}/profiles/{pid}/trace", timeout=30)
    finally:
        training.stop()
        server.stop()
    assert trace.status_code == 404
    if expect == "evicted":  # the newest trace alone is over a 1-byte quota: checked before
        assert profile["status"] == "failed" and profile["trace_evicted"], profile  # analysing
        assert "over the server's profile quota" in profile["error"]
    else:
        assert profile["status"] == "failed", profile
        assert "over the server's 1-byte cap" in profile["error"]


def test_custom_loop_with_monitor_is_profiled(server: ServerProcess) -> None:
    from trainer_agent import Monitor

    model = held_model(FEATURES, HOLD_S)
    step = tf.function(lambda x: model(x))
    stop = threading.Event()
    monitor = Monitor(run_name="custom-loop", server=server.url)

    def loop() -> None:
        with monitor:
            for x, _y in monitor.iterate(small_dataset().repeat()):
                step(x)
                if stop.is_set():
                    break
        collect_here()

    thread = threading.Thread(target=loop, daemon=True)
    thread.start()
    try:
        session = wait_for(lambda: monitor.session, what="the monitor's session")
        run_id = wait_for(lambda: session.sender.run_id, what="the run's id")
        response = _request(server, run_id, steps=10)
        assert response.status_code == 202, response.text
        profile = _settled(server, run_id, response.json()["id"])
    finally:
        stop.set()
        thread.join(60)
    assert profile["status"] == "ready", profile
    assert profile["analysis"]["steps"] and profile["overhead"]["steps"] == 10


def test_fit_with_steps_per_execution_is_captured(server: ServerProcess) -> None:
    """With steps_per_execution > 1 each marker spans one execution: the capture, Stoker's
    share over its steps and the download work; xprof's input-pipeline analyzer then measures
    no step time (it groups steps by the tf.while_loop's iterations and ignores the markers:
    docs/agent.md), and the analysis says why."""
    training = Training(server, small_dataset(), "spe4", steps_per_execution=4)
    try:
        run_id = training.run_id()
        response = _request(server, run_id, steps=20)
        assert response.status_code == 202, response.text
        pid = response.json()["id"]
        profile = _settled(server, run_id, pid)
        profile = wait_for(lambda: _with_stoker_share(server, run_id, pid), what="Stoker's share")
    finally:
        training.stop()
    assert profile["status"] == "ready", profile
    assert (profile["last_step"] - profile["first_step"] + 1) % 4 == 0  # whole executions
    assert profile["overhead"]["steps"] == 20
    assert profile["trace_bytes"] > 0 and profile["analysis"]["conclusion"]
    assert profile["overhead"]["steps_per_execution"] == 4
    if not profile["analysis"]["steps"]:  # xprof took the while-loop iterations for steps
        assert "tf.while_loop" in profile["analysis"]["note"]


def test_without_xprof_the_trace_is_kept_and_the_analysis_says_how_to_get_it(
    tmp_path: Path,
) -> None:
    # A server where `import xprof` fails, as on an install without the profile extra.
    blocker = tmp_path / "no-xprof" / "xprof"
    blocker.mkdir(parents=True)
    (blocker / "__init__.py").write_text("raise ImportError('xprof is not installed here')\n")
    path = os.pathsep.join([str(blocker.parent), os.environ.get("PYTHONPATH", "")])
    server = ServerProcess(data_dir=tmp_path / "server", env={"PYTHONPATH": path}).start()
    training = Training(server, small_dataset(), "no-xprof")
    try:
        run_id = training.run_id()
        response = _request(server, run_id, steps=5)
        assert response.status_code == 202, response.text
        pid = response.json()["id"]
        profile = _settled(server, run_id, pid)
        trace = httpx.get(f"{server.url}/api/v1/runs/{run_id}/profiles/{pid}/trace", timeout=30)
    finally:
        training.stop()
        server.stop()
    assert profile["status"] == "ready", profile
    assert profile["analysis"] == {
        "available": False,
        "message": "install stoker[profile] to analyse on the server",
    }
    assert profile["input_share_profiler"] is None
    assert len(trace.content) == profile["trace_bytes"] > 0
