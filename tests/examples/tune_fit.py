"""An unmodified training script with one of four slow input pipelines, for `stoker tune`.

- `serial_map`: a serial map whose function reads each record slowly (it waits, as on
  storage; the script gives tf.data 8 threads for such reads);
- `no_prefetch`: a per-batch decode at the end, tf.data's autotuning turned off (so nothing
  prefetches: each step waits for its batch to be decoded);
- `python_map`: a map whose function parses each record in Python, holding the GIL all the
  while (as pure-Python parsing does);
- `random_augment`: a serial map that reads each record slowly and adds random noise;
- `fed`: records in memory, batched and prefetched: short steps that never wait;
- `stateless_load`: a map whose function, declared stateless, reads each record slowly: the
  same every epoch.
The delays come from the test, from the step it measured (tests/harness/gpu_like.py).

Run: stoker tune --steps 30 -- python tests/examples/tune_fit.py --pipeline serial_map \
    --delay-s 0.06
"""

import argparse
import ctypes
import ctypes.util
import time

import numpy as np
import tensorflow as tf

from tests.harness.gpu_like import held_model

BATCH = 16
FEATURES = 32


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument(
        "--pipeline",
        required=True,
        choices=[
            "serial_map",
            "no_prefetch",
            "python_map",
            "random_augment",
            "fed",
            "stateless_load",
        ],
    )
    parser.add_argument("--delay-s", type=float, required=True, help="input time per batch")
    parser.add_argument("--hold-s", type=float, default=0.015, help="the device's step time")
    parser.add_argument("--batches", type=int, default=40, help="batches per epoch")
    args = parser.parse_args()
    per_record_s = args.delay_s / BATCH

    def wait_for_storage(record: np.ndarray) -> np.ndarray:
        time.sleep(per_record_s)
        return record

    def read_record(x: tf.Tensor, y: tf.Tensor) -> tuple[tf.Tensor, tf.Tensor]:
        x = tf.numpy_function(wait_for_storage, [x], tf.float32)
        return tf.ensure_shape(x, [FEATURES]), y

    def load_record(x: tf.Tensor, y: tf.Tensor) -> tuple[tf.Tensor, tf.Tensor]:
        # Its author declares it stateless: the same record loads the same every epoch.
        x = tf.numpy_function(wait_for_storage, [x], tf.float32, stateful=False)
        return tf.ensure_shape(x, [FEATURES]), y

    def decode_batch(x: tf.Tensor, y: tf.Tensor) -> tuple[tf.Tensor, tf.Tensor]:
        def decode(batch: np.ndarray) -> np.ndarray:
            time.sleep(args.delay_s)
            return batch

        return tf.ensure_shape(tf.numpy_function(decode, [x], tf.float32), x.shape), y

    # Pure-Python parsing holds the GIL for as long as it works. A C call made through
    # ctypes.PyDLL keeps the GIL while it runs: here it waits `per_record_s` holding it, so the
    # parse takes that long whatever the machine's speed or load, one thread at a time.
    usleep = ctypes.PyDLL(ctypes.util.find_library("c")).usleep

    def parse(record: np.ndarray) -> np.ndarray:
        usleep(int(per_record_s * 1e6))
        return record

    def parse_in_python(x: tf.Tensor, y: tf.Tensor) -> tuple[tf.Tensor, tf.Tensor]:
        return tf.ensure_shape(tf.numpy_function(parse, [x], tf.float32), [FEATURES]), y

    def augment(x: tf.Tensor, y: tf.Tensor) -> tuple[tf.Tensor, tf.Tensor]:
        x = tf.ensure_shape(tf.numpy_function(wait_for_storage, [x], tf.float32), [FEATURES])
        return x + tf.random.uniform([FEATURES], 0.0, 0.1), y

    rng = np.random.default_rng(0)
    x = rng.normal(size=(args.batches * BATCH, FEATURES)).astype("float32")
    records = tf.data.Dataset.from_tensor_slices((x, x[:, :1]))
    if args.pipeline == "serial_map":
        options = tf.data.Options()
        options.threading.private_threadpool_size = 8
        dataset = records.map(read_record).batch(BATCH).with_options(options)
    elif args.pipeline == "no_prefetch":
        options = tf.data.Options()
        options.autotune.enabled = False
        dataset = records.batch(BATCH).map(decode_batch).with_options(options)
    elif args.pipeline == "python_map":
        dataset = records.map(parse_in_python).batch(BATCH)
    elif args.pipeline == "random_augment":
        dataset = records.map(augment).batch(BATCH)
    elif args.pipeline == "stateless_load":
        dataset = records.map(load_record).batch(BATCH)
    else:
        dataset = records.batch(BATCH).prefetch(tf.data.AUTOTUNE)
    model = held_model(FEATURES, args.hold_s)
    model.fit(dataset, epochs=2)
    print("trained: the rest of the script runs too")


if __name__ == "__main__":
    main()
