"""A real, small Keras training that reports to Stoker; run by tests in its own process.

Usage: python -m tests.train_script --server URL --name NAME [--epochs N] [--batches N]
       [--batch-delay-s S] [--fail-at-batch N]
"""

import argparse
import json
import os
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--server", required=True)
    parser.add_argument("--name", default="script-run")
    parser.add_argument("--project", default="tests")
    parser.add_argument("--epochs", type=int, default=2)
    parser.add_argument("--batches", type=int, default=20, help="batches per epoch")
    parser.add_argument("--batch-size", type=int, default=16)
    parser.add_argument("--batch-delay-s", type=float, default=0.0)
    parser.add_argument("--fail-at-batch", type=int, default=-1, help="raise in this batch")
    args = parser.parse_args()

    import numpy as np
    import tensorflow as tf

    from trainer_agent import StokerCallback

    samples = args.batches * args.batch_size
    rng = np.random.default_rng(0)
    x = rng.normal(size=(samples, 8)).astype("float32")
    y = (x.sum(axis=1) > 0).astype("float32")
    dataset = tf.data.Dataset.from_tensor_slices((x, y)).batch(args.batch_size)
    if args.batch_delay_s > 0:

        def slow(batch_x: np.ndarray) -> np.ndarray:
            time.sleep(args.batch_delay_s)
            return batch_x

        def delay(bx: tf.Tensor, by: tf.Tensor) -> tuple[tf.Tensor, tf.Tensor]:
            out = tf.numpy_function(slow, [bx], tf.float32)
            out.set_shape(bx.shape)
            return out, by

        dataset = dataset.map(delay)
    model = tf.keras.Sequential(
        [tf.keras.Input(shape=(8,)), tf.keras.layers.Dense(16, activation="relu"),
         tf.keras.layers.Dense(1)]
    )  # fmt: skip
    model.compile(optimizer="sgd", loss="mse")
    callback = StokerCallback(run_name=args.name, project=args.project, server=args.server)
    callbacks: list[tf.keras.callbacks.Callback] = [callback]
    if args.fail_at_batch >= 0:

        class Diverge(tf.keras.callbacks.Callback):
            def on_train_batch_begin(self, batch: int, logs: object = None) -> None:
                if batch == args.fail_at_batch:
                    raise RuntimeError("loss diverged")

        callbacks.append(Diverge())
    model.fit(callback.wrap(dataset), epochs=args.epochs, callbacks=callbacks, verbose=0)
    print(json.dumps({"steps": args.epochs * args.batches}), flush=True)


if __name__ == "__main__":
    main()
