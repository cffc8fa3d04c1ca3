"""How fast does Stoker notice? Onset → verdict and condition → alert firing, measured.

A real `stoker serve` on a loopback port with its shipped defaults (30 s diagnosis window,
0.5 s detector tick, 20 measured steps before a first verdict, default alert rules); a real
browser-side live connection (`/api/v1/live`) timestamps each pushed message on arrival.

1. Real Keras fit, starved from its first step (serial pipeline, 40 ms per batch, wrapped
   with `cb.wrap`): time from the first training step to the live `highly_input_bound`.
2. The real agent (`RunSession`, its sender thread and 0.5 s flush) reporting a loop that
   runs fed for `--fed-s` seconds and then starves (80 % of each step waiting): time from
   the first starved step to the live verdict. With the 30 s sliding window the share has to
   climb past 20 %, so this depends on how much fed history the window holds.
3. Alerts: GPU utilization scripted at 95 % then 30 % through the agent WebSocket; the
   default rule (`< 70 %` for 30 s, keep firing 10 s): time from the first 30 % sample to
   `firing` (the figure minus `for_s` is Stoker's own delay), and from the first 95 % sample
   back to `resolved` (minus `keep_firing_for_s`).

Usage: .venv/bin/python -m bench.diagnosis_latency [--fed-s 10] [--repeat 3]
"""

import argparse
import os
import statistics
import tempfile
import threading
import time
from pathlib import Path

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

from tests.harness.detect_support import LiveListener, ScriptedAgent
from tests.harness.support import ServerProcess, wait_for


def _arrival(live: LiveListener, kind: str, match, timeout_s: float = 300) -> float:
    """Monotonic arrival time of the first live message of `kind` matching `match`."""

    def found():
        with live._lock:
            for arrived, message in zip(live.arrivals, live.messages, strict=True):
                if message.get("type") == kind and match(message):
                    return arrived
        return None

    return wait_for(found, timeout_s=timeout_s, interval_s=0.005, what=kind)


class TimedListener(LiveListener):
    def __init__(self, server: ServerProcess) -> None:
        self.arrivals: list[float] = []
        super().__init__(server)

    def _read(self) -> None:
        import json

        try:
            for text in self.ws:
                with self._lock:
                    self.arrivals.append(time.monotonic())
                    self.messages.append(json.loads(text))
        except Exception:
            pass


def _is_verdict(run_id: int, verdict: str):
    return lambda m: m["run_id"] == run_id and m["diagnosis"]["verdict"] == verdict


def keras_cold_start(server: ServerProcess, live: TimedListener, name: str) -> float:
    import numpy as np
    import tensorflow as tf

    from trainer_agent import StokerCallback

    x = np.random.default_rng(0).normal(size=(128 * 200, 256)).astype("float32")

    def slow(a):
        time.sleep(0.04)
        return a

    def delay(a, b):
        return tf.ensure_shape(tf.numpy_function(slow, [a], tf.float32), a.shape), b

    ds = tf.data.Dataset.from_tensor_slices((x, x[:, :1])).batch(128).map(delay)
    model = tf.keras.Sequential(
        [tf.keras.Input(shape=(256,)), tf.keras.layers.Dense(256, activation="relu"),
         tf.keras.layers.Dense(1)]
    )  # fmt: skip
    model.compile(optimizer="sgd", loss="mse")

    first_step: list[float] = []

    class FirstStep(tf.keras.callbacks.Callback):
        def on_train_batch_begin(self, batch, logs=None):
            if batch == 1 and not first_step:  # step 0 traces the function
                first_step.append(time.monotonic())

    cb = StokerCallback(run_name=name, project="bench", server=server.url)
    result: dict[str, float] = {}

    def watch() -> None:
        run_id = wait_for(
            lambda: cb.run_session.sender.run_id if cb.run_session else None, timeout_s=120
        )
        assert run_id is not None  # wait_for returns a truthy value
        result["verdict_at"] = _arrival(live, "verdict", _is_verdict(run_id, "highly_input_bound"))

    watcher = threading.Thread(target=watch, daemon=True)
    watcher.start()
    model.fit(cb.wrap(ds), epochs=1, callbacks=[FirstStep(), cb], verbose=0)
    watcher.join(60)
    return result["verdict_at"] - first_step[0]


def agent_fed_then_starved(server: ServerProcess, live: TimedListener, fed_s: float) -> float:
    from trainer_agent.capture.session import RunSession
    from trainer_agent.config import AgentConfig

    session = RunSession(AgentConfig(server=server.url, run_name="fed-then-starved"))
    session.start()
    step = 0
    step_s = 0.01

    def run_for(seconds: float, wait_share: float) -> float:
        nonlocal step
        started = time.monotonic()
        while time.monotonic() - started < seconds:
            begin = time.perf_counter()
            time.sleep(step_s)  # the step: compute plus (for starved steps) waiting
            session.record_step(step, begin, time.perf_counter() - begin, step_s * wait_share)
            step += 1
        return started

    try:
        run_for(fed_s, 0.0)
        run_id = session.sender.run_id
        assert run_id is not None, "the agent has no run after its fed phase"
        onset = time.monotonic()
        done = threading.Event()

        def starve() -> None:
            run_for(60, 0.8)
            done.set()

        threading.Thread(target=starve, daemon=True).start()  # keeps starving while we wait
        arrived = _arrival(live, "verdict", _is_verdict(run_id, "highly_input_bound"))
        return arrived - onset
    finally:
        session.close()


def alert_latency(server: ServerProcess, live: TimedListener) -> tuple[float, float]:
    agent = ScriptedAgent(server, name="util-drop", project="bench")
    state = {"util": 95.0, "stop": False}

    def feed() -> None:
        while not state["stop"]:
            agent.steps(10, dur=0.01, wait=0.0, device_util=state["util"])
            time.sleep(0.1)

    feeder = threading.Thread(target=feed, daemon=True)
    feeder.start()
    try:
        time.sleep(3)  # a busy stretch first (not waiting for anything)
        state["util"] = 30.0
        onset = time.monotonic()
        firing = _arrival(
            live, "alert", lambda m: m["alert"]["run_id"] == agent.run_id
            and m["alert"]["state"] == "firing",
        )  # fmt: skip
        state["util"] = 95.0
        recovered = time.monotonic()
        resolved = _arrival(
            live, "alert", lambda m: m["alert"]["run_id"] == agent.run_id
            and m["alert"]["state"] == "resolved",
        )  # fmt: skip
        return firing - onset, resolved - recovered
    finally:
        state["stop"] = True
        feeder.join(10)
        agent.close()


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--fed-s", type=float, default=10.0)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        server = ServerProcess(data_dir=Path(tmp) / "server").start()
        live = TimedListener(server)
        try:
            cold = [keras_cold_start(server, live, f"cold-{i}") for i in range(args.repeat)]
            print(
                "1. Keras fit starved from the start, first step → live highly_input_bound: "
                f"median {statistics.median(cold):.2f} s  (runs: "
                + ", ".join(f"{v:.2f}" for v in cold)
                + ")",
                flush=True,
            )
            onset = [agent_fed_then_starved(server, live, args.fed_s) for _ in range(args.repeat)]
            print(
                f"2. {args.fed_s:g} s fed then starved (80 % wait), first starved step → "
                f"live highly_input_bound: median {statistics.median(onset):.2f} s  (runs: "
                + ", ".join(f"{v:.2f}" for v in onset)
                + ")",
                flush=True,
            )
            firing, resolved = alert_latency(server, live)
            print(
                f"3. GPU util 95 % → 30 %, default rule (< 70 % for 30 s): condition → firing "
                f"{firing:.2f} s (Stoker's own delay {firing - 30:.2f} s); back to 95 % → "
                f"resolved {resolved:.2f} s (keep_firing_for 10 s; own delay "
                f"{resolved - 10:.2f} s)",
                flush=True,
            )
        finally:
            live.close()
            server.stop()


if __name__ == "__main__":
    main()
