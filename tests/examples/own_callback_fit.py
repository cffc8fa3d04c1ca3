"""A script that already monitors its fit with its own `StokerCallback` (and `cb.wrap`).

Run: stoker run -- python tests/examples/own_callback_fit.py
"""

import numpy as np
import tensorflow as tf

from trainer_agent import StokerCallback


def main() -> None:
    x = np.random.default_rng(0).normal(size=(320, 8)).astype("float32")
    dataset = tf.data.Dataset.from_tensor_slices((x, x.sum(axis=1, keepdims=True))).batch(32)
    model = tf.keras.Sequential([tf.keras.Input(shape=(8,)), tf.keras.layers.Dense(1)])
    model.compile(optimizer="sgd", loss="mse")
    callback = StokerCallback(run_name="own-callback", project="examples")
    model.fit(callback.wrap(dataset), epochs=2, callbacks=[callback], verbose=0)


if __name__ == "__main__":
    main()
