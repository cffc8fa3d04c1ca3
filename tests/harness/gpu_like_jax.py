"""A GPU-like training step for Keras 3 on JAX (CPU): the JAX twin of tests/harness/gpu_like.py.

`DeviceHold` holds each step for `hold_s` without the CPU: a `jax.pure_callback` sleeps once
the batch is there (it reads the batch's first value) and the layer's output depends on it,
so the step cannot end before it. Under JAX's asynchronous dispatch the hold runs on the
runtime's thread, as a device computes while Python goes on.
"""

import statistics
import time
from typing import Any

import jax
import jax.numpy as jnp
import keras
import numpy as np

MARGIN = 3.0


class DeviceHold(keras.layers.Layer):
    """Holds the step for `hold_s` after the batch arrived, without the CPU; identity output."""

    def __init__(self, hold_s: float, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.hold_s = hold_s

    def call(self, x: Any) -> Any:
        hold_s = self.hold_s

        def hold(first: np.ndarray) -> np.ndarray:
            time.sleep(hold_s)
            return np.zeros((), np.float32)

        first = jax.lax.stop_gradient(jnp.reshape(x, (-1,))[0])
        held = jax.pure_callback(hold, jax.ShapeDtypeStruct((), jnp.float32), first)
        return x + jax.lax.stop_gradient(held)

    def get_config(self) -> dict[str, Any]:
        return {**super().get_config(), "hold_s": self.hold_s}


class DeviceWork(keras.layers.Layer):
    """Real XLA work that JAX dispatches asynchronously: `repeats` products of a `size`²
    matrix, started from the batch's first value. Python returns at once and runs ahead, as
    it does before a GPU; the work uses the CPU's cores, but the input's delays sleep."""

    def __init__(self, size: int, repeats: int = 2, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.size, self.repeats = size, repeats

    def build(self, input_shape: Any) -> None:
        scale = 1.0 / self.size
        self.matrix = self.add_weight(
            shape=(self.size, self.size), trainable=False,
            initializer=keras.initializers.RandomNormal(stddev=scale),
        )  # fmt: skip

    def call(self, x: Any) -> Any:
        first = jax.lax.stop_gradient(jnp.reshape(x, (-1,))[0])
        h = jnp.full((self.size, self.size), first)
        for _ in range(self.repeats):
            h = jnp.tanh(h @ self.matrix)
        return x + 1e-30 * jax.lax.stop_gradient(jnp.mean(h))


def held_model(
    features: int, hold_s: float, *, steps_per_execution: int = 1, matmul: int = 0
) -> Any:
    """`matmul` > 0: the step is `DeviceWork` of that size instead of a sleeping hold."""
    device = DeviceWork(matmul) if matmul else DeviceHold(hold_s)
    model = keras.Sequential(
        [keras.Input(shape=(features,)), device, keras.layers.Dense(16), keras.layers.Dense(1)]
    )
    model.compile(optimizer="sgd", loss="mse", steps_per_execution=steps_per_execution)
    return model


class Batches(keras.utils.PyDataset):
    """`count` batches of (x, x[:, :1]), each made after sleeping `delay_s` (a slow read)."""

    def __init__(self, x: np.ndarray, batch: int, delay_s: float, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.x, self.batch, self.delay_s = x, batch, delay_s

    def __len__(self) -> int:
        return len(self.x) // self.batch

    def __getitem__(self, i: int) -> tuple[np.ndarray, np.ndarray]:
        if self.delay_s:
            time.sleep(self.delay_s)
        x = self.x[i * self.batch : (i + 1) * self.batch]
        return x, x[:, :1]


def generator(x: np.ndarray, batch: int, delay_s: float, epochs: int = 1) -> Any:
    for _ in range(epochs):
        for i in range(len(x) // batch):
            if delay_s:
                time.sleep(delay_s)
            part = x[i * batch : (i + 1) * batch]
            yield part, part[:, :1]


class _StepClock(keras.callbacks.Callback):
    def __init__(self) -> None:
        super().__init__()
        self.begins: list[float] = []

    def on_train_batch_begin(self, batch: int, logs: Any = None) -> None:
        self.begins.append(time.perf_counter())

    def on_train_end(self, logs: Any = None) -> None:
        self.begins.append(time.perf_counter())


def measure_step_s(model: Any, x: np.ndarray, batch: int) -> float:
    """The median step period of `model` on in-memory arrays, measured here and now (after a
    warm-up fit that compiles)."""
    clock = _StepClock()
    model.fit(x, x[:, :1], batch_size=batch, epochs=1, verbose=0)
    model.fit(x, x[:, :1], batch_size=batch, epochs=1, callbacks=[clock], verbose=0)
    intervals = [b - a for a, b in zip(clock.begins, clock.begins[1:], strict=False)]
    return statistics.median(intervals[1:] or intervals)
