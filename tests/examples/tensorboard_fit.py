"""An unmodified training script: a `fit` with Keras's default `TensorBoard()` callback, as
course scripts write it. It exits 3 if its train step ran eagerly (a `tf.function` traces the
step once, with `tf.executing_eagerly()` False; an eager step runs the Python every batch).

Run: TF_USE_LEGACY_KERAS=1 stoker run -- python tests/examples/tensorboard_fit.py --logdir DIR
"""

import argparse
import sys

import numpy as np
import tensorflow as tf

eager_steps: list[bool] = []


class Regressor(tf.keras.Sequential):
    def train_step(self, data):  # type: ignore[no-untyped-def]
        eager_steps.append(tf.executing_eagerly())
        return super().train_step(data)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--logdir", required=True)
    args = parser.parse_args()

    rng = np.random.default_rng(0)
    x = rng.normal(size=(512, 8)).astype("float32")
    y = x.sum(axis=1, keepdims=True)
    model = Regressor([tf.keras.Input(shape=(8,)), tf.keras.layers.Dense(1)])
    model.compile(optimizer="sgd", loss="mse")
    dataset = tf.data.Dataset.from_tensor_slices((x, y)).batch(32)
    model.fit(dataset, epochs=2, verbose=0, callbacks=[tf.keras.callbacks.TensorBoard(args.logdir)])
    model.fit(dataset, epochs=1, verbose=0)  # a second fit of the same model
    if any(eager_steps):
        print(f"eager train steps: {sum(eager_steps)}", file=sys.stderr)
        sys.exit(3)


if __name__ == "__main__":
    main()
