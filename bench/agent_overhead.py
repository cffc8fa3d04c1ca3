"""What does Stoker cost a training step? The same CPU Keras fit with and without it.

Configurations, interleaved in a random order within each trial, one fresh model each:
  baseline     no extra callback
  stoker       StokerCallback + cb.wrap(dataset), GPU sampling every 1 s against the fake
               NVML (tests/fake_nvml), streaming to a real `stoker serve`
  callback     StokerCallback alone (no wrap)
  tensorboard  keras.callbacks.TensorBoard(update_freq="batch")
A minimal timer callback (the same in every configuration) measures the steady-state step
period from batch 10 to the end of the epoch, so per-run start and flush costs are not
spread over the steps; they are reported separately as the fixed cost of a fit.
Figures are medians over trials of the paired difference to the baseline of the same trial.

The machine this runs on is shared and small: read the IQR column before the medians.

Usage: .venv/bin/python bench/agent_overhead.py [--trials 11]
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
    def __init__(self) -> None:
        super().__init__()
        self.start = 0.0
        self.period_s = 0.0
        self._batch = 0

    def on_train_batch_begin(self, batch: int, logs: object = None) -> None:
        if batch == SKIP:
            self.start = time.perf_counter()
        self._batch = batch

    def on_epoch_end(self, epoch: int, logs: object = None) -> None:
        self.period_s = (time.perf_counter() - self.start) / (self._batch + 1 - SKIP)


MODELS = {
    # name: (input features, hidden widths, batch size, steps per fit)
    "small MLP": (32, [256, 256], 64, 300),
    "wide": (512, [1024, 1024], 128, 60),
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
    return timer.period_s, time.perf_counter() - started


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--trials", type=int, default=11)
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="stoker-bench-"))
    fake = FakeNvml(build(work / "nvml"), work / "nvml-control.txt")
    fake.write(gpu0={"util": 90})
    fake.preload()
    os.environ["STOKER_SPOOL_DIR"] = str(work / "spool")
    server = ServerProcess(data_dir=work / "server").start()
    configs = ["baseline", "stoker", "callback", "tensorboard"]
    try:
        for name, (features, widths, batch, steps) in MODELS.items():
            ds = dataset(features, batch, steps)
            models = {c: make_model(features, widths) for c in configs}
            for config in configs:  # warm-up: trace every model once
                run_fit(config, models[config], ds, server.url, str(work / "tb"))
            periods: dict[str, list[float]] = {c: [] for c in configs}
            totals: dict[str, list[float]] = {c: [] for c in configs}
            for _ in range(args.trials):
                for config in random.sample(configs, len(configs)):
                    period, total = run_fit(
                        config, models[config], ds, server.url, str(work / "tb")
                    )
                    periods[config].append(period)
                    totals[config].append(total)
            report(name, steps, configs, periods, totals)
    finally:
        server.stop()


def report(
    name: str,
    steps: int,
    configs: list[str],
    periods: dict[str, list[float]],
    totals: dict[str, list[float]],
) -> None:
    base = statistics.median(periods["baseline"])
    print(f"\n{name}: baseline step {base * 1e3:.2f} ms ({steps} steps per fit)")
    print(
        f"{'configuration':14} {'µs/step':>9} {'IQR µs':>15} {'% of step':>10} {'fixed ms/fit':>13}"
    )
    cost = {}
    for config in configs[1:]:
        diffs = [p - b for p, b in zip(periods[config], periods["baseline"], strict=True)]
        fixed = [
            (t - p * (steps - SKIP)) - (tb - pb * (steps - SKIP))
            for t, p, tb, pb in zip(
                totals[config], periods[config], totals["baseline"], periods["baseline"],
                strict=True,
            )
        ]  # fmt: skip
        cost[config] = statistics.median(diffs)
        q1, _, q3 = statistics.quantiles(diffs, n=4)
        print(
            f"{config:14} {cost[config] * 1e6:9.1f} {q1 * 1e6:7.1f}..{q3 * 1e6:<7.1f}"
            f"{cost[config] / base * 100:9.2f}% {statistics.median(fixed) * 1e3:13.1f}"
        )
    tb = cost["tensorboard"]
    ratio = cost["stoker"] / tb if tb > 0 else float("nan")
    print(f"stoker / tensorboard per-step cost: {ratio:.2f} (target ≤ 0.25 on the small MLP)")
    print(f"stoker share of the step: {cost['stoker'] / base * 100:.2f} % (target ≤ 1 % wide)")
    print(f"callback alone: {cost['callback'] * 1e6:.1f} µs/step (target ≤ 20 µs)")


if __name__ == "__main__":
    main()
