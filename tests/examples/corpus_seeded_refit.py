"""The shape of TensorBoard's hparams demo (tensorboard/plugins/hparams/hparams_demo.py): a
script seeded once at its start (Python's `random`, NumPy, TensorFlow) fits a model, then builds
and fits a second one. Unseeded initializers draw their seeds from Python's global `random`
(tf_keras's and Keras 3's alike), so the second model's weights, and its losses, depend on
everything that drew from that stream in between. The first fit lasts a little longer than
20 s (sleeping, not computing), as a real fit does.

It prints, as JSON on its last line, each fit's losses and the next draw from Python's global
stream: `stoker run` must not change them.

Run: stoker run -- python tests/examples/corpus_seeded_refit.py [--fit-s 22]
"""

import argparse
import json
import random
import time

import numpy as np
import tensorflow as tf


def fit_once(x: np.ndarray, y: np.ndarray, *, sleep_s: float) -> list[float]:
    model = tf.keras.Sequential(
        [tf.keras.Input(shape=(8,)), tf.keras.layers.Dense(16, activation="relu"),
         tf.keras.layers.Dense(1)]
    )  # fmt: skip
    model.compile(optimizer="sgd", loss="mse")
    pause = tf.keras.callbacks.LambdaCallback(on_epoch_end=lambda *_: time.sleep(sleep_s))
    history = model.fit(x, y, batch_size=32, epochs=2, verbose=0, callbacks=[pause])
    return [float(loss) for loss in history.history["loss"]]


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--fit-s", type=float, default=22.0, help="how long the first fit lasts")
    options = parser.parse_args()
    random.seed(0)  # the global streams, as the demo's environment seeds them
    np.random.seed(0)
    tf.random.set_seed(0)
    x = np.random.default_rng(0).normal(size=(256, 8)).astype("float32")
    y = x.sum(axis=1, keepdims=True)
    first = fit_once(x, y, sleep_s=options.fit_s / 2)
    second = fit_once(x, y, sleep_s=0.0)
    print(json.dumps({"losses": [first, second], "next_draw": random.random()}))


if __name__ == "__main__":
    main()
