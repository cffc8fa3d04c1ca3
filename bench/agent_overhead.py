"""What does Stoker cost a training step? The same CPU Keras fit with and without it.

Configurations, interleaved in a random order within each trial, one fresh model each:
  baseline     no extra callback
  stoker       StokerCallback + cb.wrap(dataset), GPU sampling every 1 s against the fake
               NVML (tests/fake_nvml), streaming to a real `stoker serve`
  callback     StokerCallback alone (no wrap)
  tensorboard  keras.callbacks.TensorBoard(update_freq="batch")
A minimal timer callback (the same in every configuration) measures the steady-state step
period from batch 10 to the end of the epoch, in wall-clock time and in this process's CPU
time (all threads: the agent's threads and TensorFlow's), so per-run start and flush costs
are not spread over the steps; they are reported separately as the fixed cost of a fit.
Figures are medians over trials of the paired difference to the baseline of the same
trial. CPU time is far less disturbed by other processes on a shared machine.

The machine this runs on is shared and small: read the IQR column before the medians.

Usage: .venv/bin/python bench/agent_overhead.py [--trials 25]
"""

import argparse
import os
import random
import statistics
import sys
import tempfile
import time
from pathlib import Path

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import numpy as np
import tensorflow as tf

from tests.fake_nvml import FakeNvml, build
from tests.support import ServerProcess
from trainer_agent import StokerCallback

SKIP = 10  # steps before the timed window (tracing, warm-up)


class Timer(tf.keras.callbacks.Callback):
    """Wall-clock and process CPU time per step, from batch SKIP to the end of the epoch."""

    def __init__(self) -> None:
        super().__init__()
        self.start = self.start_cpu = 0.0
        self.period_s = self.cpu_s = 0.0
        self._batch = 0

    def on_train_batch_begin(self, batch: int, logs: object = None) -> None:
        if batch == SKIP:
            self.start, self.start_cpu = time.perf_counter(), time.process_time()
        self._batch = batch

    def on_epoch_end(self, epoch: int, logs: object = None) -> None:
        steps = self._batch + 1 - SKIP
        self.period_s = (time.perf_counter() - self.start) / steps
        self.cpu_s = (time.process_time() - self.start_cpu) / steps


MODELS = {
    # name: (input features, hidden widths, batch size, steps per fit)
    "small MLP": (32, [256, 256], 64, 160),
    "wide": (512, [1024, 1024], 128, 40),
}


def make_model(features: int, widths: list[int]) -> tf.keras.Model:
    layers = [tf.keras.Input(shape=(features,))]
    layers += [tf.keras.layers.Dense(w, activation="relu") for w in widths]
    model = tf.keras.Sequential([*layers, tf.keras.layers.Dense(1)])
    model.compile(optimizer="sgd", loss="mse")
    return model


def dataset(features: int, batch: int, steps: int) -> tf.data.Dataset:
    x = np.random.default_rng(0).normal(size=(steps, batch, features)).astype("float32")
    return tf.data.Dataset.from_tensor_slices((x, x[..., :1].copy()))


def run_fit(config: str, model: tf.keras.Model, ds: tf.data.Dataset, server: str, logdir: str):
    timer = Timer()
    callbacks: list[tf.keras.callbacks.Callback] = [timer]
    data = ds
    if config in ("stoker", "callback"):
        cb = StokerCallback(run_name=f"bench-{config}", server=server, sample_interval_s=1.0)
        callbacks.append(cb)
        if config == "stoker":
            data = cb.wrap(ds)
    elif config == "tensorboard":
        callbacks.append(tf.keras.callbacks.TensorBoard(log_dir=logdir, update_freq="batch"))
    started = time.perf_counter()
    model.fit(data, epochs=1, callbacks=callbacks, verbose=0)
    return timer.period_s, timer.cpu_s, time.perf_counter() - started


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--trials", type=int, default=25)
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="stoker-bench-"))
    fake = FakeNvml(build(work / "nvml"), work / "nvml-control.txt")
    fake.write(gpu0={"util": 90})
    fake.preload()
    os.environ["STOKER_SPOOL_DIR"] = str(work / "spool")
    server = ServerProcess(data_dir=work / "server").start()
    configs = ["baseline", "stoker", "callback", "tensorboard"]
    print(f"load average at start: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    try:
        for name, (features, widths, batch, steps) in MODELS.items():
            ds = dataset(features, batch, steps)
            models = {c: make_model(features, widths) for c in configs}
            for config in configs:  # warm-up: trace every model once
                run_fit(config, models[config], ds, server.url, str(work / "tb"))
            periods: dict[str, list[float]] = {c: [] for c in configs}
            cpus: dict[str, list[float]] = {c: [] for c in configs}
            totals: dict[str, list[float]] = {c: [] for c in configs}
            for _ in range(args.trials):
                for config in random.sample(configs, len(configs)):
                    logdir = str(work / "tb")
                    period, cpu, total = run_fit(config, models[config], ds, server.url, logdir)
                    periods[config].append(period)
                    cpus[config].append(cpu)
                    totals[config].append(total)
            report(name, steps, configs, periods, cpus, totals)
        hook_costs(server.url)
        print(f"load average at end: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    finally:
        server.stop()


def hook_costs(server: str) -> None:
    """The agent's own per-step work, timed directly: no fit, no noise from TensorFlow."""
    from trainer_agent.callback import READ_EVERY_CALLS
    from trainer_agent.input_wait import StampRing

    model = make_model(8, [8])
    callback = StokerCallback(run_name="bench-hooks", server=server)
    callback.set_model(model)
    callback.set_params({"epochs": 1, "steps": 10**6, "verbose": 0})
    callback.on_train_begin()
    logs = {"loss": 0.5}
    per_step = []
    for _ in range(7):
        started = time.perf_counter()
        for i in range(20_000):
            callback.on_train_batch_begin(i)
            callback.on_train_batch_end(i, logs)
        per_step.append((time.perf_counter() - started) / 20_000)
    callback.on_train_end()
    ring = StampRing()
    reads = []
    for _ in range(50):
        started = time.perf_counter()
        ring.read(0.0)
        reads.append(time.perf_counter() - started)
    read = statistics.median(reads)
    print(
        f"\nhooks in isolation (batch begin + end, recording a step): "
        f"{statistics.median(per_step) * 1e6:.1f} µs/step (target ≤ 20 µs); "
        f"reading the stamp ring: {read * 1e6:.0f} µs every {READ_EVERY_CALLS} steps "
        f"= {read / READ_EVERY_CALLS * 1e6:.1f} µs/step"
    )


def paired(values: dict[str, list[float]], config: str) -> list[float]:
    return [v - b for v, b in zip(values[config], values["baseline"], strict=True)]


def report(
    name: str,
    steps: int,
    configs: list[str],
    periods: dict[str, list[float]],
    cpus: dict[str, list[float]],
    totals: dict[str, list[float]],
) -> None:
    base = statistics.median(periods["baseline"])
    base_cpu = statistics.median(cpus["baseline"])
    print(
        f"\n{name}: baseline step {base * 1e3:.2f} ms wall, {base_cpu * 1e3:.2f} ms CPU "
        f"({steps} steps per fit, timed from step {SKIP})"
    )
    print(
        f"{'configuration':12} {'wall µs/step':>12} {'(IQR)':>17} {'CPU µs/step':>12} "
        f"{'(IQR)':>17} {'fixed ms/fit':>12}"
    )
    wall, cpu = {}, {}
    for config in configs[1:]:
        diffs, cpu_diffs = paired(periods, config), paired(cpus, config)
        fixed = [
            (t - p * (steps - SKIP)) - (tb - pb * (steps - SKIP))
            for t, p, tb, pb in zip(
                totals[config], periods[config], totals["baseline"], periods["baseline"],
                strict=True,
            )
        ]  # fmt: skip
        wall[config], cpu[config] = statistics.median(diffs), statistics.median(cpu_diffs)
        w1, _, w3 = statistics.quantiles(diffs, n=4)
        c1, _, c3 = statistics.quantiles(cpu_diffs, n=4)
        print(
            f"{config:12} {wall[config] * 1e6:12.1f} {w1 * 1e6:8.0f}..{w3 * 1e6:<7.0f} "
            f"{cpu[config] * 1e6:12.1f} {c1 * 1e6:8.0f}..{c3 * 1e6:<7.0f} "
            f"{statistics.median(fixed) * 1e3:12.1f}"
        )
    for label, cost, step in (("wall", wall, base), ("CPU", cpu, base_cpu)):
        tb = cost["tensorboard"]
        ratio = cost["stoker"] / tb if tb > 0 else float("nan")
        print(
            f"{label}: stoker/tensorboard {ratio:.2f} (target ≤ 0.25, small MLP); "
            f"stoker {cost['stoker'] / step * 100:.2f} % of the step (target ≤ 1 %, wide); "
            f"callback alone {cost['callback'] * 1e6:.1f} µs (target ≤ 20 µs)"
        )


if __name__ == "__main__":
    main()
