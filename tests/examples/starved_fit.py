"""An unmodified training script: a `fit` on a serial, unprefetched tf.data pipeline whose
per-batch read takes `--delay-s` (the test picks it from the step it measured).

Run: stoker run -- python tests/examples/starved_fit.py --delay-s 0.05
"""

import argparse

import numpy as np
import tensorflow as tf

from tests.harness.gpu_like import held_model, sleep_per_batch


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--delay-s", type=float, required=True, help="per-batch read time")
    parser.add_argument("--hold-s", type=float, default=0.015, help="the device's step time")
    parser.add_argument("--batches", type=int, default=60)
    args = parser.parse_args()

    x = np.random.default_rng(0).normal(size=(args.batches * 64, 32)).astype("float32")
    dataset = tf.data.Dataset.from_tensor_slices((x, x[:, :1])).batch(64)
    model = held_model(32, args.hold_s)
    model.fit(sleep_per_batch(dataset, args.delay_s), epochs=1, verbose=0)


if __name__ == "__main__":
    main()
