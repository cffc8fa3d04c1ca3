"""How accurate is the measured input wait? Known per-batch delays on a CPU Keras fit.

Each scenario injects a fixed per-batch delay D (a sleeping `numpy_function` in the
pipeline). tf.data appends a prefetch to every pipeline, so a delay shorter than the compute
time C is hidden; D = C / (1 - w) makes the step wait a share w of 0 %, ~30 %, ~60 % or
~80 % of its time. One more scenario hides the ~60 % delay with `num_parallel_calls` +
`prefetch`. Runs are interleaved (scenario, then its cached twin) for `--rounds` rounds on
one model; truth and error are computed per round (each pair saw the same machine load)
and their medians reported. Truth is (step period of the scenario - step
period with the same data cached in memory) / step period of the scenario. Measured is
Σ wait / Σ step duration as `StokerCallback` + `wrap` report it (steps after step 0).

Usage: .venv/bin/python bench/input_wait_accuracy.py [--steps 40] [--epochs 3] [--rounds 3]
"""

import argparse
import os
import statistics
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

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


def run(
    model: tf.keras.Model,
    steps: int,
    epochs: int,
    delay_s: float,
    *,
    hidden: bool = False,
    cached: bool = False,
) -> list[StepRow]:
    callback = CapturingCallback()
    dataset = callback.wrap(pipeline(steps, delay_s, hidden=hidden, cached=cached))
    model.fit(dataset, epochs=epochs, callbacks=[callback], verbose=0)
    first_counted = steps if cached else 1  # the cached pipeline fills during epoch 1
    return [r for r in callback.rows if r.step >= first_counted]


def period_s(rows: list[StepRow]) -> float:
    return sum(r.dur for r in rows) / len(rows)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=40, help="steps per epoch")
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()

    model = make_model()
    compute = statistics.median(period_s(run(model, args.steps, 2, 0.0)) for _ in range(3))
    print(f"compute-only step period C: {compute * 1e3:.1f} ms")
    scenarios = [
        ("0 % wait", 0.0, False),
        ("~30 % wait", compute / 0.7, False),
        ("~60 % wait", compute / 0.4, False),
        ("~80 % wait", compute / 0.2, False),
        ("~60 % delay, hidden by parallel map + prefetch", compute / 0.4, True),
    ]
    header = f"{'scenario':48} {'delay ms':>9} {'period ms':>10} {'cached ms':>10} "
    header += f"{'truth %':>8} {'measured %':>11} {'error pp':>9}"
    print(header)
    errors = []
    for name, delay_s, hidden in scenarios:
        periods, cacheds, truths, shares = [], [], [], []
        for _ in range(args.rounds):
            # The scenario and its cached twin back to back, so both see the same machine.
            rows = run(model, args.steps, args.epochs, delay_s, hidden=hidden)
            cached_rows = run(model, args.steps, args.epochs, delay_s, hidden=hidden, cached=True)
            period, cached = period_s(rows), period_s(cached_rows)
            periods.append(period)
            cacheds.append(cached)
            truths.append(max(0.0, (period - cached) / period))
            waited = [r for r in rows if r.wait is not None]
            shares.append(sum(r.wait or 0.0 for r in waited) / sum(r.dur for r in waited))
        period, cached = statistics.median(periods), statistics.median(cacheds)
        truth, measured = statistics.median(truths), statistics.median(shares)
        error = statistics.median(m - t for m, t in zip(shares, truths, strict=True)) * 100
        errors.append(abs(error))
        print(
            f"{name:48} {delay_s * 1e3:9.1f} {period * 1e3:10.1f} {cached * 1e3:10.1f} "
            f"{truth * 100:8.1f} {measured * 100:11.1f} {error:+9.1f}"
        )
    print(f"max |error|: {max(errors):.1f} pp (target ≤ 5 pp); "
          f"median {statistics.median(errors):.1f} pp")  # fmt: skip


if __name__ == "__main__":
    main()
