"""How accurate is the measured input wait? Known per-batch delays on a CPU Keras fit.

Each scenario injects a fixed per-batch delay D (a sleeping `numpy_function` in the
pipeline). tf.data prefetches at the end of every pipeline, so a delay shorter than the
compute time C is hidden; D = C / (1 - w) makes the step wait a share w of 0 %, ~30 %, ~60 %
or ~80 % of its time. One more scenario hides the ~60 % delay with `num_parallel_calls` +
`prefetch`.

Truth is (step period of the scenario - step period of the same pipeline with its data
cached in memory) / step period of the scenario. On a shared machine the step period moves
by several ms within seconds, so each round alternates one-epoch fits of the scenario and of
its cached twin (`--pairs` of each, the cache filled beforehand, one traced model) and takes
truth and measurement from those same fits. Measured is Σ wait / Σ step duration as
`StokerCallback` + `wrap` report it (each fit's step 0 left out, as the agent does). The
table gives medians over `--rounds` rounds; the error is the median of per-round errors.

The last column splits the difference: how much longer the rest of a step (its duration
minus its measured wait) takes in the scenario than in its cached twin. The truth counts
that time, the agent does not see it as waiting, so the error is about minus this over the
period. `bench/resume_penalty.py` measures the same slowdown without Stoker: a step run
right after the process sat idle.

Usage: .venv/bin/python bench/input_wait_accuracy.py [--steps 40] [--pairs 3] [--rounds 3]
"""

import argparse
import os
import statistics
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
os.environ.setdefault("STOKER_SPOOL_DIR", "off")  # no server here: keep nothing on disk

import numpy as np
import tensorflow as tf

from trainer_agent.callback import StokerCallback
from trainer_agent.input_wait import StepRow

BATCH = 64
FEATURES = 256


class CapturingCallback(StokerCallback):
    """Keeps the step rows it would send; no server is involved."""

    def __init__(self) -> None:
        super().__init__(server="http://127.0.0.1:9")
        self._agent_config.close_timeout_s = 0.1
        self.rows: list[StepRow] = []

    def on_train_begin(self, logs=None) -> None:  # type: ignore[no-untyped-def]
        super().on_train_begin(logs)
        self.rows = []

    def _record(self, rows: list[StepRow]) -> None:
        self.rows.extend(rows)


def make_model() -> tf.keras.Model:
    model = tf.keras.Sequential(
        [tf.keras.Input(shape=(FEATURES,)),
         tf.keras.layers.Dense(1024, activation="relu"),
         tf.keras.layers.Dense(1024, activation="relu"),
         tf.keras.layers.Dense(1)]
    )  # fmt: skip
    model.compile(optimizer="sgd", loss="mse")
    return model


def pipeline(steps: int, delay_s: float, *, hidden: bool, cached: bool) -> tf.data.Dataset:
    rng = np.random.default_rng(0)
    x = rng.normal(size=(steps * BATCH, FEATURES)).astype("float32")
    y = x[:, :1].copy()
    # Pre-batched arrays: the pipeline itself costs next to nothing, so the injected delay
    # is the only difference between a scenario and its cached twin.
    shape = (steps, BATCH)
    ds = tf.data.Dataset.from_tensor_slices((x.reshape(*shape, -1), y.reshape(*shape, -1)))

    def slow(a: np.ndarray) -> np.ndarray:
        time.sleep(delay_s)
        return a

    def delay(a: tf.Tensor, b: tf.Tensor) -> tuple[tf.Tensor, tf.Tensor]:
        out = tf.numpy_function(slow, [a], tf.float32)
        return tf.ensure_shape(out, a.shape), b

    if delay_s > 0:
        ds = ds.map(delay, num_parallel_calls=tf.data.AUTOTUNE if hidden else None)
    if cached:
        ds = ds.cache()
    if hidden:
        ds = ds.prefetch(tf.data.AUTOTUNE)
    return ds


Wrapped = tuple[CapturingCallback, tf.data.Dataset]


def run(model: tf.keras.Model, wrapped: Wrapped) -> list[StepRow]:
    """One epoch of `fit` (one run) on a wrapped dataset; the rows after step 0."""
    callback, dataset = wrapped
    model.fit(dataset, epochs=1, callbacks=[callback], verbose=0)
    return [r for r in callback.rows if r.step >= 1]


def wrap(steps: int, delay_s: float, *, hidden: bool, cached: bool) -> Wrapped:
    callback = CapturingCallback()
    dataset = callback.wrap(pipeline(steps, delay_s, hidden=hidden, cached=cached))
    if cached:
        for _ in dataset:  # fill the in-memory cache: later iterators read from it
            pass
    return callback, dataset


def period_s(rows: list[StepRow]) -> float:
    return sum(r.dur for r in rows) / len(rows)


def rest_s(rows: list[StepRow]) -> float:
    """Mean time of a step that was not measured as waiting."""
    return sum(r.dur - (r.wait or 0.0) for r in rows) / len(rows)


def wait_share(rows: list[StepRow]) -> float:
    waited = [r for r in rows if r.wait is not None]
    return sum(r.wait or 0.0 for r in waited) / sum(r.dur for r in waited)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=40, help="steps per epoch")
    parser.add_argument("--pairs", type=int, default=3, help="scenario/cached fits per round")
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()

    model = make_model()
    compute_only = wrap(args.steps, 0.0, hidden=False, cached=False)
    for _ in range(3):  # trace, then warm up: the first fits after tracing run slow
        run(model, compute_only)
    # C sets the delays: an overestimate shifts every scenario to more waiting.
    compute = statistics.median(period_s(run(model, compute_only)) for _ in range(7))
    print(f"load average {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    print(f"compute-only step period C: {compute * 1e3:.1f} ms")
    scenarios = [
        ("0 % wait", 0.0, False),
        ("~30 % wait", compute / 0.7, False),
        ("~60 % wait", compute / 0.4, False),
        ("~80 % wait", compute / 0.2, False),
        ("~60 % delay, hidden by parallel map + prefetch", compute / 0.4, True),
    ]
    header = f"{'scenario':48} {'delay ms':>9} {'period ms':>10} {'cached ms':>10} "
    header += f"{'truth %':>8} {'measured %':>11} {'error pp':>9} {'rest slower ms':>15}"
    print(header)
    errors = []
    for name, delay_s, hidden in scenarios:
        periods, cacheds, truths, shares, slower = [], [], [], [], []
        for _ in range(args.rounds):
            scenario = wrap(args.steps, delay_s, hidden=hidden, cached=False)
            cached = wrap(args.steps, delay_s, hidden=hidden, cached=True)
            rows: list[StepRow] = []
            cached_rows: list[StepRow] = []
            for _ in range(args.pairs):
                # Scenario and cached twin alternate, so both see the same machine.
                rows += run(model, scenario)
                cached_rows += run(model, cached)
            period, cached_period = period_s(rows), period_s(cached_rows)
            periods.append(period)
            cacheds.append(cached_period)
            truths.append((period - cached_period) / period)  # unclipped: noise both ways
            shares.append(wait_share(rows))
            slower.append(rest_s(rows) - rest_s(cached_rows))
        period, cached_period = statistics.median(periods), statistics.median(cacheds)
        truth, measured = statistics.median(truths), statistics.median(shares)
        error = statistics.median(m - t for m, t in zip(shares, truths, strict=True)) * 100
        errors.append(abs(error))
        print(
            f"{name:48} {delay_s * 1e3:9.1f} {period * 1e3:10.1f} {cached_period * 1e3:10.1f} "
            f"{truth * 100:8.1f} {measured * 100:11.1f} {error:+9.1f} "
            f"{statistics.median(slower) * 1e3:+15.2f}"
        )
    print(f"max |error|: {max(errors):.1f} pp (target ≤ 5 pp); "
          f"median {statistics.median(errors):.1f} pp")  # fmt: skip
    print(f"load average {' '.join(f'{x:.2f}' for x in os.getloadavg())}")


if __name__ == "__main__":
    main()
