"""The demo's data, model and its two input pipelines, and the starved one as a plain script.

`stoker demo` trains the same small model behind the fed and the starved pipeline. Run as a
script (`python -m stoker_server.cli.demo_pipelines [starved|fed]`), this module trains one
of them the way a user's script would: no Stoker in it, so `stoker run` or `stoker tune`
(`stoker tune --steps 200 -- python -m stoker_server.cli.demo_pipelines starved`) can be shown
on it. TensorFlow is imported when a pipeline or the model is made, not with the module (the
demo imports it its own way, quietly).
"""

import functools
import sys
import time
from typing import Any

# SAMPLES examples in batches of BATCH_SIZE, STEPS_PER_EPOCH steps an epoch.
SAMPLES, HELD_OUT, FEATURES, CLASSES, BATCH_SIZE = 4096, 512, 64, 4, 64
STEPS_PER_EPOCH = SAMPLES // BATCH_SIZE
# Per example: stands in for costly decoding or augmentation on the host CPU.
DECODE_S = 0.0008


@functools.cache
def _examples() -> tuple[Any, Any, Any, Any]:
    """(inputs, labels) for training and for validation: a learnable task, not a trivial one."""
    import numpy as np

    rng = np.random.default_rng(0)
    centers = rng.normal(size=(CLASSES, FEATURES)).astype("float32")
    labels = rng.integers(0, CLASSES, size=SAMPLES + HELD_OUT)
    noise = rng.normal(scale=5.0, size=(SAMPLES + HELD_OUT, FEATURES))
    inputs = (centers[labels] + noise).astype("float32")
    return inputs[:SAMPLES], labels[:SAMPLES], inputs[SAMPLES:], labels[SAMPLES:]


def validation() -> Any:
    """Held out: val_loss and val_accuracy are what runs are compared by."""
    import tensorflow as tf

    _, _, inputs, labels = _examples()
    return tf.data.Dataset.from_tensor_slices((inputs, labels)).batch(256)


def slow_decode(x: Any, y: Any) -> tuple[Any, Any]:
    """Stands in for costly per-example decoding on the host: a Python function that waits."""
    import numpy as np
    import tensorflow as tf

    def work(v: np.ndarray) -> np.ndarray:
        time.sleep(DECODE_S)
        return v

    x = tf.numpy_function(work, [x], tf.float32)
    x.set_shape([FEATURES])
    return x, y


def starved() -> Any:
    import tensorflow as tf

    inputs, labels, _, _ = _examples()
    ds = tf.data.Dataset.from_tensor_slices((inputs, labels)).shuffle(SAMPLES)
    return ds.map(slow_decode).batch(BATCH_SIZE)


def fed() -> Any:
    """Decoded once, in parallel, into the cache before training (as a dataset preprocessed
    ahead of its fits is), then shuffled, batched and prefetched from memory: the model's
    steps (`model`) then wait for their input 3.6-4.3 % of the time here (4.9 % beside a busy
    loop), "not input-bound". Filled by the first epoch instead, the cache would make that
    epoch wait for the decoding (4,096 examples at 0.8 ms on the host's threads)."""
    import tensorflow as tf

    inputs, labels, _, _ = _examples()
    ds = tf.data.Dataset.from_tensor_slices((inputs, labels))
    decoded = ds.map(slow_decode, num_parallel_calls=tf.data.AUTOTUNE).cache()
    for _ in decoded:  # one full pass fills the in-memory cache, which later passes read
        pass
    return decoded.shuffle(SAMPLES).batch(BATCH_SIZE).prefetch(tf.data.AUTOTUNE)


def model() -> Any:
    """Wide enough for a step of ~7 ms on a 2-core CPU. With 256-wide layers (1.9 ms steps)
    the fed run read 12.6 % input wait, "moderately input-bound", cache filled or not: each
    epoch's new iterator refills the shuffle buffer (~5 ms) and each fetch costs ~0.2 ms,
    fixed costs no pipeline hides (what the diagnosis says of very short steps)."""
    import tensorflow as tf

    made = tf.keras.Sequential(
        [
            tf.keras.Input(shape=(FEATURES,)),
            tf.keras.layers.Dense(1024, activation="relu"),
            tf.keras.layers.Dense(1024, activation="relu"),
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
    model().fit(PIPELINES[name](), validation_data=validation(), epochs=3, verbose=2, shuffle=False)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
