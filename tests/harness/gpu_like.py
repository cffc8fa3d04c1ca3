"""A GPU-like training step on a CPU machine, and input delays derived from measured steps.

On 2 cores a real model's compute and the input pipeline share the CPUs, so a starved step
also computes slower and no input-wait truth is clean. `DeviceHold` stands in for the device:
it holds each train step for `hold_s` without using the CPU (it sleeps), and it cannot start
before the batch arrives (it reads the batch's first value). Pipeline delays sleep too.

A test whose premise is a speed relation ("the pipeline is slower than the step", "parallel
reads hide the delay") sets its delays from the step time it measured on the same machine,
with `MARGIN` or more, never from a constant that assumes a machine speed.

Used by tests and by `bench/input_wait_accuracy.py`.
"""

import gc
import statistics
import time
from typing import Any

import numpy as np
import tensorflow as tf

MARGIN = 3.0


def _keras() -> Any:
    """The Keras that `tf.keras` names (Keras 3, or tf_keras with TF_USE_LEGACY_KERAS=1)."""
    return tf.keras


class DeviceHold(_keras().layers.Layer):  # type: ignore[misc]  # Keras chosen at run time
    """Holds the step for `hold_s` after the batch arrived, without the CPU; identity output."""

    def __init__(self, hold_s: float, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.hold_s = hold_s

    def call(self, x: Any) -> Any:
        hold_s = self.hold_s

        def hold(first: np.ndarray) -> np.float32:
            time.sleep(hold_s)
            return np.float32(0.0)

        # The data dependency on the batch: the hold starts only once the input is there,
        # and the output depends on the hold, so the step cannot end before it.
        held = tf.numpy_function(hold, [tf.reshape(x, [-1])[0]], tf.float32, stateful=True)
        return x + tf.stop_gradient(tf.ensure_shape(held, []))

    def get_config(self) -> dict[str, Any]:
        return {**super().get_config(), "hold_s": self.hold_s}


def held_model(features: int, hold_s: float, *, steps_per_execution: int = 1) -> Any:
    """A tiny regression model whose step is held `hold_s` as if it ran on a device."""
    keras = _keras()
    model = keras.Sequential(
        [keras.Input(shape=(features,)), DeviceHold(hold_s), keras.layers.Dense(16),
         keras.layers.Dense(1)]
    )  # fmt: skip
    model.compile(
        optimizer="sgd", loss="mse", steps_per_execution=steps_per_execution, jit_compile=False
    )
    return model


def sleep_per_batch(dataset: Any, delay_s: float, *, parallel: int | None = None) -> Any:
    """`dataset` with a sleeping per-batch map (slow reading or decoding, without the CPU)."""

    def slow(a: np.ndarray) -> np.ndarray:
        time.sleep(delay_s)
        return a

    def delay(x: Any, *rest: Any) -> Any:
        out = tf.ensure_shape(tf.numpy_function(slow, [x], x.dtype, stateful=True), x.shape)
        return (out, *rest)

    if parallel is None:
        return dataset.map(delay)
    options = tf.data.Options()
    options.threading.private_threadpool_size = max(8, 2 * parallel)  # threads sleep, not CPUs
    mapped = dataset.map(delay, num_parallel_calls=parallel, deterministic=True)
    return mapped.with_options(options)


class _StepClock(_keras().callbacks.Callback):  # type: ignore[misc]
    def __init__(self) -> None:
        super().__init__()
        self.begins: list[float] = []

    def on_train_batch_begin(self, batch: int, logs: Any = None) -> None:
        self.begins.append(time.perf_counter())

    def on_train_end(self, logs: Any = None) -> None:
        self.begins.append(time.perf_counter())


def measure_step_s(model: Any, dataset: Any, *, steps: int = 12) -> float:
    """The median time of one train step of `model` on `dataset` (its input cached), measured
    here and now. Trains the model for a few steps (a warm-up a test does not mind)."""
    cached = dataset.take(steps).cache()
    for _ in cached:  # fill the cache: the measured steps do not wait for input
        pass
    clock = _StepClock()
    spe = steps_per_execution(model)
    model.fit(cached.repeat(2), epochs=1, callbacks=[clock], verbose=0)  # traces, warms up
    clock.begins.clear()
    model.fit(cached, epochs=1, callbacks=[clock], verbose=0)
    intervals = [b - a for a, b in zip(clock.begins, clock.begins[1:], strict=False)]
    return statistics.median(intervals[1:] or intervals) / spe


def collect_here() -> None:
    """Collect garbage on the calling thread: a fit's own thread, once the fit returned. Keras
    leaves a fit stopped by `stop_training` in reference cycles that hold its tf.data iterator;
    collected later on another thread, that iterator's destructor can block the thread for up to
    a minute (docs/agent.md, "The iterator Stoker watches"), inside some later test's wait."""
    gc.collect()


def steps_per_execution(model: Any) -> int:
    value: Any = getattr(model, "steps_per_execution", 1) or 1
    try:
        return max(1, int(value))
    except TypeError:
        return max(1, int(tf.get_static_value(value) or value.numpy()))


def starving_delay_s(step_s: float, *, floor_s: float = 0.02) -> float:
    """A per-batch delay a serial pipeline makes the step wait for: `MARGIN` x the step."""
    return max(floor_s, MARGIN * step_s)
