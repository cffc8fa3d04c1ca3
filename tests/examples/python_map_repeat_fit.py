"""An unmodified training script: a serial `numpy_function` map over a repeated dataset, no
prefetch, and a Python function still being called by tf.data when `fit` returns.

Its map is slower than the step (`--delay-s`, picked by the test from the step it measured),
so tf.data's reader is always inside the Python function; once `fit` has returned, each call
sleeps `--after-fit-s`. An iterator of that pipeline still referenced at interpreter shutdown
waits forever for the GIL: the script must still exit as it does without Stoker.

Run: stoker run -- python tests/examples/python_map_repeat_fit.py --delay-s 0.05
"""

import argparse
import time

import numpy as np
import tensorflow as tf

from tests.harness.gpu_like import held_model

fit_returned = False


def main() -> None:
    global fit_returned
    parser = argparse.ArgumentParser()
    parser.add_argument("--delay-s", type=float, required=True, help="per-batch read time")
    parser.add_argument("--after-fit-s", type=float, default=2.0)
    parser.add_argument("--hold-s", type=float, default=0.015, help="the device's step time")
    parser.add_argument("--steps", type=int, default=40)
    args = parser.parse_args()

    def slow(a: np.ndarray) -> np.ndarray:
        time.sleep(args.after_fit_s if fit_returned else args.delay_s)
        return a

    x = np.random.default_rng(0).normal(size=(640, 8)).astype("float32")
    y = x[:, :1]
    dataset = (
        tf.data.Dataset.from_tensor_slices((x, y))
        .batch(64)
        .repeat()
        .map(lambda a, b: (tf.ensure_shape(tf.numpy_function(slow, [a], tf.float32), a.shape), b))
    )
    model = held_model(8, args.hold_s)
    model.fit(dataset, steps_per_epoch=args.steps, epochs=1, verbose=0)
    fit_returned = True
    print("trained", flush=True)


if __name__ == "__main__":
    main()
