"""A real, small Keras training that reports to Stoker; run by tests in its own process.

Usage: python -m tests.harness.train_script --server URL --name NAME [--epochs N] [--batches N]
       [--batch-delay-s S] [--fail-at-batch N] [--stop-file PATH]
       [--hold-at-step N --release-file PATH]

With --stop-file, the data repeats and training stops at the end of the first batch that finds
PATH (so a test can keep it going as long as its premise needs, on any machine); the last line
printed gives the steps trained. With --hold-at-step N and --release-file PATH, the training
holds after its Nth step until PATH exists (so a test sees a run still in progress, however
slowly the machine brought its page up).
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
    parser.add_argument("--stop-file", default=None, help="stop once this file exists")
    parser.add_argument("--hold-at-step", type=int, default=-1, help="hold after this step...")
    parser.add_argument("--release-file", default=None, help="...until this file exists")
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
    if args.stop_file is not None:
        dataset = dataset.repeat()
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

    class StepCounter(tf.keras.callbacks.Callback):
        """Counts the steps trained; stops at --stop-file, holds at --hold-at-step."""

        steps = 0

        def on_train_batch_end(self, batch: int, logs: object = None) -> None:
            self.steps += 1
            if self.steps == args.hold_at_step and args.release_file is not None:
                deadline = time.monotonic() + 600
                while not os.path.exists(args.release_file) and time.monotonic() < deadline:
                    time.sleep(0.05)
            if args.stop_file is not None and os.path.exists(args.stop_file):
                self.model.stop_training = True

    counter = StepCounter()
    callbacks.append(counter)
    model.fit(
        callback.wrap(dataset), epochs=args.epochs, callbacks=callbacks, verbose=0,
        steps_per_epoch=args.batches if args.stop_file is not None else None,
    )  # fmt: skip
    print(json.dumps({"steps": counter.steps}), flush=True)


if __name__ == "__main__":
    main()
