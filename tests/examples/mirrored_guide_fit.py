"""An unmodified training script in the shape of Keras's "distributed training with
TensorFlow" guide: the model is built, compiled and fitted three times inside
`MirroredStrategy().scope()` (one replica on this CPU).

Run: stoker run -- python tests/examples/mirrored_guide_fit.py
"""

import numpy as np
import tensorflow as tf


def main() -> None:
    rng = np.random.default_rng(0)
    x = rng.normal(size=(640, 8)).astype("float32")
    dataset = tf.data.Dataset.from_tensor_slices((x, x.sum(axis=1, keepdims=True))).batch(64)
    strategy = tf.distribute.MirroredStrategy()
    with strategy.scope():
        model = tf.keras.Sequential([tf.keras.Input(shape=(8,)), tf.keras.layers.Dense(1)])
        model.compile(optimizer="sgd", loss="mse")
        for _ in range(3):
            model.fit(dataset, epochs=1, verbose=0)


if __name__ == "__main__":
    main()
