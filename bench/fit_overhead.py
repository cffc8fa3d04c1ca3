"""What does StokerCallback add to each `fit()` call, besides its per-step cost?

Many short CPU fits of one tiny model, 2 to 128 steps each, in three configurations
interleaved in a random order within each round:
  plain     no callback
  stoker    StokerCallback streaming to a real `stoker serve` started here; fits follow each
            other back to back, so a fit's background drain overlaps the next fit (a fit per
            epoch, active learning, RL loops)
  settled   the same, but `trainer_agent.flush()` runs after the timed fit, so each fit
            starts with no earlier run still draining
Whole-fit wall time is fitted against the step count by least squares per configuration:
the intercept is the fixed cost of a fit, the slope its cost per step. Stoker's fixed cost
per fit is its intercept minus plain's, its per-step cost its slope minus plain's. The
median paired difference at each step count is printed beside them, and the time the hooks
that open and end a run take on the training thread (on_train_begin, on_train_end).

Usage: .venv/bin/python bench/fit_overhead.py [--rounds 30] [--steps 2,8,32,128]
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

import trainer_agent
from tests.support import ServerProcess
from trainer_agent import StokerCallback

BATCH = 8
TARGET_FIXED_MS = 30.0


class TimedStokerCallback(StokerCallback):
    """StokerCallback, timing the two hooks that open and end a run."""

    begin_s: list[float] = []
    end_s: list[float] = []

    def on_train_begin(self, logs=None):  # type: ignore[no-untyped-def]
        started = time.perf_counter()
        super().on_train_begin(logs)
        TimedStokerCallback.begin_s.append(time.perf_counter() - started)

    def on_train_end(self, logs=None):  # type: ignore[no-untyped-def]
        started = time.perf_counter()
        super().on_train_end(logs)
        TimedStokerCallback.end_s.append(time.perf_counter() - started)


def least_squares(points: list[tuple[int, float]]) -> tuple[float, float]:
    """(intercept, slope) of time against steps."""
    xs = np.array([p[0] for p in points], dtype=float)
    ys = np.array([p[1] for p in points], dtype=float)
    slope, intercept = np.polyfit(xs, ys, 1)
    return float(intercept), float(slope)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=30)
    parser.add_argument("--steps", default="2,8,32,128")
    args = parser.parse_args()
    step_counts = [int(s) for s in args.steps.split(",")]

    work = Path(tempfile.mkdtemp(prefix="stoker-fit-overhead-"))
    os.environ["STOKER_SPOOL_DIR"] = str(work / "spool")
    server = ServerProcess(data_dir=work / "server").start()
    rng = np.random.default_rng(0)
    data = {
        n: (x := rng.normal(size=(n * BATCH, 8)).astype("float32"), x.sum(axis=1, keepdims=True))
        for n in step_counts
    }
    model = tf.keras.Sequential(
        [
            tf.keras.Input((8,)),
            tf.keras.layers.Dense(16, activation="relu"),
            tf.keras.layers.Dense(1),
        ]
    )
    model.compile(optimizer="sgd", loss="mse")

    def fit(config: str, steps: int) -> float:
        x, y = data[steps]
        callbacks = [] if config == "plain" else [TimedStokerCallback(server=server.url)]
        started = time.perf_counter()
        model.fit(x, y, batch_size=BATCH, epochs=1, verbose=0, callbacks=callbacks)
        elapsed = time.perf_counter() - started
        if config == "settled":
            trainer_agent.flush()
        return elapsed

    configs = ("plain", "stoker", "settled")
    try:
        for config in configs:  # tracing, the first connection, imports
            for steps in step_counts:
                fit(config, steps)
        trainer_agent.flush()
        TimedStokerCallback.begin_s.clear()
        TimedStokerCallback.end_s.clear()
        times: dict[str, list[tuple[int, float]]] = {c: [] for c in configs}
        pairs: dict[str, dict[int, list[float]]] = {
            c: {n: [] for n in step_counts} for c in configs
        }
        load_before = os.getloadavg()
        for _ in range(args.rounds):
            order = [(c, n) for c in configs for n in step_counts]
            random.shuffle(order)
            measured = {(c, n): fit(c, n) for c, n in order}
            for (c, n), elapsed in measured.items():
                times[c].append((n, elapsed))
                pairs[c][n].append(elapsed - measured[("plain", n)])
        trainer_agent.flush()
        load_after = os.getloadavg()
    finally:
        server.stop()

    plain_intercept, plain_slope = least_squares(times["plain"])
    print(f"fits: {args.rounds} rounds x {len(step_counts)} step counts {step_counts} x {configs}")
    print(
        f"load average before {load_before[0]:.2f}, after {load_after[0]:.2f} "
        f"({os.cpu_count()} CPUs)"
    )
    print(f"plain fit: {plain_intercept * 1e3:.1f} ms fixed + {plain_slope * 1e6:.0f} µs/step")
    for config in ("stoker", "settled"):
        intercept, slope = least_squares(times[config])
        fixed_ms = (intercept - plain_intercept) * 1e3
        print(
            f"{config:8s} fixed cost per fit {fixed_ms:6.1f} ms "
            f"(target <= {TARGET_FIXED_MS:.0f} ms: "
            f"{'ok' if fixed_ms <= TARGET_FIXED_MS else 'MISSED'}), per step "
            f"{(slope - plain_slope) * 1e6:6.1f} µs"
        )
        paired = ", ".join(
            f"{n} steps {statistics.median(pairs[config][n]) * 1e3:+.1f} ms" for n in step_counts
        )
        print(f"         median paired difference to plain: {paired}")
    for name, values in (
        ("on_train_begin", TimedStokerCallback.begin_s),
        ("on_train_end", TimedStokerCallback.end_s),
    ):
        print(
            f"{name}: median {statistics.median(values) * 1e3:.2f} ms, "
            f"p90 {sorted(values)[int(0.9 * (len(values) - 1))] * 1e3:.2f} ms "
            "on the training thread"
        )


if __name__ == "__main__":
    main()
