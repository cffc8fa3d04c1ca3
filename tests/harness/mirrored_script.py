"""A Keras fit under MirroredStrategy with two replicas (the CPU split into two logical
devices), reporting to Stoker; run by tests in its own process because the split must
happen before TensorFlow starts.

Usage: python -m tests.harness.mirrored_script --server URL [--batches N] [--delay-s S]

Without --delay-s the per-batch input delay is several times the step measured here first.
"""

import argparse
import json
import os
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

HOLD_S = 0.015  # each replica's device share of a step


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--server", required=True)
    parser.add_argument("--batches", type=int, default=20)
    parser.add_argument("--delay-s", type=float, default=None)
    args = parser.parse_args()

    import numpy as np
    import tensorflow as tf

    cpu = tf.config.list_physical_devices("CPU")[0]
    tf.config.set_logical_device_configuration(cpu, [tf.config.LogicalDeviceConfiguration()] * 2)

    from tests.harness.gpu_like import DeviceHold, measure_step_s, starving_delay_s
    from trainer_agent import StokerCallback

    batch = 16
    x = np.random.default_rng(0).normal(size=(args.batches * batch, 8)).astype("float32")
    dataset = tf.data.Dataset.from_tensor_slices((x, x.sum(axis=1, keepdims=True))).batch(batch)

    callback = StokerCallback(run_name="mirrored-2", server=args.server)
    strategy = tf.distribute.MirroredStrategy(["/cpu:0", "/cpu:1"])
    with strategy.scope():
        # A GPU-like step (it holds without the CPU): with real compute, a loaded machine
        # made the steps slower during the fit than when measured first (a full run read a
        # wait share of 0.46 against the test's 0.5 even with 6x the measured step).
        model = tf.keras.Sequential(
            [tf.keras.Input(shape=(8,)), DeviceHold(HOLD_S), tf.keras.layers.Dense(16),
             tf.keras.layers.Dense(1)]
        )  # fmt: skip
        model.compile(optimizer="sgd", loss="mse", jit_compile=False)
    delay_s = args.delay_s
    if delay_s is None:
        delay_s = 2 * starving_delay_s(measure_step_s(model, dataset), floor_s=0.04)

    def slow(a: np.ndarray) -> np.ndarray:
        time.sleep(delay_s)
        return a

    def starve(a: tf.Tensor, b: tf.Tensor) -> tuple[tf.Tensor, tf.Tensor]:
        return tf.ensure_shape(tf.numpy_function(slow, [a], tf.float32), a.shape), b

    model.fit(callback.wrap(dataset.map(starve)), epochs=2, callbacks=[callback], verbose=0)
    print(json.dumps({"replicas": strategy.num_replicas_in_sync}), flush=True)


if __name__ == "__main__":
    main()
