"""The demo's data, model and its two input pipelines, and the starved one as a plain script.

`stoker demo` trains the same small model behind the fed and the starved pipeline. Run as a
script (`python -m stoker_server.cli.demo_pipelines [starved|fed]`), this module trains one
of them the way a user's script would: no Stoker in it, so `stoker run` or `stoker tune`
(`stoker tune --steps 200 -- python -m stoker_server.cli.demo_pipelines`) can be shown on it.
"""

import os
import sys
import time
from typing import Any

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np
import tensorflow as tf

SAMPLES, HELD_OUT, FEATURES, CLASSES = 4096, 512, 64, 4
BATCH_SIZE = 64
# Per example: stands in for costly decoding or augmentation on the host CPU.
DECODE_S = 0.0008

_rng = np.random.default_rng(0)
_centers = _rng.normal(size=(CLASSES, FEATURES)).astype("float32")
_all_labels = _rng.integers(0, CLASSES, size=SAMPLES + HELD_OUT)
_noise = _rng.normal(scale=5.0, size=(SAMPLES + HELD_OUT, FEATURES))  # not trivially separable
_all_inputs = (_centers[_all_labels] + _noise).astype("float32")
inputs, labels = _all_inputs[:SAMPLES], _all_labels[:SAMPLES]


def validation() -> tf.data.Dataset:
    """Held out: val_loss and val_accuracy are what runs are compared by."""
    held_out = (_all_inputs[SAMPLES:], _all_labels[SAMPLES:])
    return tf.data.Dataset.from_tensor_slices(held_out).batch(256)


def slow_decode(x: tf.Tensor, y: tf.Tensor) -> tuple[tf.Tensor, tf.Tensor]:
    """Stands in for costly per-example decoding on the host: a Python function that waits."""

    def work(v: np.ndarray) -> np.ndarray:
        time.sleep(DECODE_S)
        return v

    x = tf.numpy_function(work, [x], tf.float32)
    x.set_shape([FEATURES])
    return x, y


def starved() -> tf.data.Dataset:
    ds = tf.data.Dataset.from_tensor_slices((inputs, labels)).shuffle(SAMPLES)
    return ds.map(slow_decode).batch(BATCH_SIZE)


def fed() -> tf.data.Dataset:
    ds = tf.data.Dataset.from_tensor_slices((inputs, labels))
    ds = ds.map(slow_decode, num_parallel_calls=tf.data.AUTOTUNE).cache()
    return ds.shuffle(SAMPLES).batch(BATCH_SIZE).prefetch(tf.data.AUTOTUNE)


def model() -> Any:
    made = tf.keras.Sequential(
        [
            tf.keras.Input(shape=(FEATURES,)),
            tf.keras.layers.Dense(256, activation="relu"),
            tf.keras.layers.Dense(256, activation="relu"),
            tf.keras.layers.Dense(CLASSES),
        ]
    )
    made.compile(
        optimizer="adam",
        loss=tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True),
        metrics=["accuracy"],
    )
    return made


PIPELINES = {"starved": starved, "fed": fed}


def main(argv: list[str]) -> int:
    name = argv[0] if argv else "starved"
    if name not in PIPELINES:
        print(f"usage: python -m stoker_server.cli.demo_pipelines [{'|'.join(PIPELINES)}]")
        return 2
    model().fit(PIPELINES[name](), validation_data=validation(), epochs=3, verbose=2)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
