"""Real Keras training against a real `stoker serve` for the alert tests: a step held like a
device's at a pace the test changes mid-run, a fit on its own thread, and the alert API."""

import threading
import time
import uuid
from typing import Any

import httpx
import numpy as np
import tensorflow as tf

from tests.harness.gpu_like import collect_here
from tests.harness.support import ServerProcess, wait_for
from trainer_agent import StokerCallback

FEATURES = 8
HOLD_S = 0.005  # the "device" part of a step (a sleep, not CPU)


def create_rule(server: ServerProcess, **spec: Any) -> dict[str, Any]:
    response = httpx.post(f"{server.url}/api/v1/alert-rules", json=spec, timeout=10)
    assert response.status_code == 201, response.text
    return response.json()


def new_project() -> str:
    return f"p-{uuid.uuid4().hex[:8]}"


def alerts_of(server: ServerProcess, rule_id: int, state: str | None = None) -> list[Any]:
    params: dict[str, Any] = {"rule_id": rule_id}
    if state:
        params["state"] = state
    return server.get("/api/v1/alerts", **params)["data"]


def fired_then_resolved(server: ServerProcess, rule_id: int) -> dict[str, Any]:
    fired = wait_for(
        lambda: [a for a in alerts_of(server, rule_id) if a["fired_at"]], timeout_s=120,
        what=f"rule {rule_id}'s alert firing",
    )[0]  # fmt: skip
    resolved = wait_for(
        lambda: alerts_of(server, rule_id, "resolved"), timeout_s=120,
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


def paced_model(pace: Pace, lr: float = 0.01) -> Any:
    model = tf.keras.Sequential(
        [tf.keras.Input(shape=(FEATURES,)), PacedHold(pace), tf.keras.layers.Dense(16),
         tf.keras.layers.Dense(1)]
    )  # fmt: skip
    model.compile(optimizer=tf.keras.optimizers.SGD(lr), loss="mse")
    return model


def alert_data(n: int = 256) -> tf.data.Dataset:
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
        finally:
            collect_here()

    def run_id(self) -> int:
        session = wait_for(lambda: self.callback.run_session, what="the run's session")
        return wait_for(lambda: session.sender.run_id, what="the run's id")

    def stop(self) -> None:
        self.halt.set()
        self.thread.join(120)


def steps_in_summary(server: ServerProcess, run_id: int) -> int:
    return int(server.get(f"/api/v1/runs/{run_id}")["summary"]["steps"])
