"""A plain Keras 3 script on JAX (never mentions Stoker): the fits `stoker run` must count.

Prints the batch count Keras ran for each fit and whether TensorFlow was imported.
"""

import sys
import time

import keras
import numpy as np


class Slow(keras.utils.PyDataset):
    def __init__(self, n: int, **kwargs: object) -> None:
        super().__init__(**kwargs)
        self.n = n

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i: int) -> tuple[np.ndarray, np.ndarray]:
        time.sleep(0.001)
        x = np.full((8, 4), i, "float32")
        return x, x[:, :1]


def generate(x: np.ndarray, batches: int):  # no length: Keras learns it when it runs out
    for i in range(batches):
        yield x[i * 16 : (i + 1) * 16], x[i * 16 : (i + 1) * 16, :1]


model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(1)])
model.compile(optimizer="sgd", loss="mse")
x = np.random.default_rng(0).normal(size=(16 * 32, 4)).astype("float32")
model.fit(Slow(30, workers=2), epochs=1, verbose=0)
model.fit(Slow(20), epochs=1, verbose=0)
model.fit(x, x[:, :1], batch_size=16, epochs=2, verbose=0)
model.compile(optimizer="sgd", loss="mse", steps_per_execution=5)
model.fit(generate(x, 23), epochs=1, verbose=0)
model.fit(x, x[:, :1], batch_size=16, epochs=1, verbose=0)
print("tensorflow imported:", "tensorflow" in sys.modules)
