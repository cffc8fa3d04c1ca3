"""An unmodified training script that fits a Keras 3 model and then a tf_keras (Keras 2)
model in one process, as Keras's own numerical comparison test does.

Run: stoker run -- python tests/examples/two_kerases_fit.py
"""

import keras
import numpy as np
import tf_keras


def main() -> None:
    rng = np.random.default_rng(0)
    x = rng.normal(size=(256, 8)).astype("float32")
    y = x.sum(axis=1, keepdims=True)
    for family in (keras, tf_keras):
        model = family.Sequential([family.Input(shape=(8,)), family.layers.Dense(1)])
        model.compile(optimizer="sgd", loss="mse")
        model.fit(x, y, batch_size=32, epochs=2, verbose=0)


if __name__ == "__main__":
    main()
