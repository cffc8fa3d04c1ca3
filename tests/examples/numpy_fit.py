"""An unmodified training script: a `fit` on NumPy arrays, with a validation split.

Run: stoker run -- python tests/examples/numpy_fit.py
"""

import numpy as np
import tensorflow as tf


def main() -> None:
    rng = np.random.default_rng(0)
    x = rng.normal(size=(640, 8)).astype("float32")
    y = x.sum(axis=1, keepdims=True)
    model = tf.keras.Sequential(
        [tf.keras.Input(shape=(8,)), tf.keras.layers.Dense(16, activation="relu"),
         tf.keras.layers.Dense(1)]
    )  # fmt: skip
    model.compile(optimizer="sgd", loss="mse")
    model.fit(x, y, batch_size=32, epochs=2, validation_split=0.2, verbose=0)


if __name__ == "__main__":
    main()
