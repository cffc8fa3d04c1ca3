"""One worker of a two-worker `MultiWorkerMirroredStrategy` job on loopback: a tf.keras fit
with `StokerCallback`, as a user writes it. Run by tests, one process per worker.

Keras 3 cannot `fit` under this strategy, so the test runs it with the legacy tf.keras
(`TF_USE_LEGACY_KERAS=1`, package `tf_keras`). `steps_per_execution=2` makes tf.keras keep
that setting in a `MirroredVariable`, which the callback must read.

Usage: python -m tests.multiworker_script --server URL --workers HOST:PORT,HOST:PORT --index I
       [--epochs N] [--batches N]
Prints one JSON line: the epochs and batches the worker's fit ran, counted by plain Keras.
"""

import argparse
import json
import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--server", required=True)
    parser.add_argument("--workers", required=True, help="comma-separated host:port, one each")
    parser.add_argument("--index", type=int, required=True)
    parser.add_argument("--epochs", type=int, default=2)
    parser.add_argument("--batches", type=int, default=8, help="global batches per epoch")
    args = parser.parse_args()
    # The strategy reads the cluster from TF_CONFIG when it is built.
    os.environ["TF_CONFIG"] = json.dumps(
        {
            "cluster": {"worker": args.workers.split(",")},
            "task": {"type": "worker", "index": args.index},
        }
    )

    import numpy as np
    import tensorflow as tf

    from trainer_agent import StokerCallback

    strategy = tf.distribute.MultiWorkerMirroredStrategy()
    global_batch = 16
    rng = np.random.default_rng(0)
    x = rng.normal(size=(args.batches * global_batch, 8)).astype("float32")
    dataset = tf.data.Dataset.from_tensor_slices((x, x.sum(axis=1, keepdims=True)))
    options = tf.data.Options()
    options.experimental_distribute.auto_shard_policy = tf.data.experimental.AutoShardPolicy.DATA
    dataset = dataset.batch(global_batch).with_options(options)

    callback = StokerCallback(run_name="multiworker", project="multiworker", server=args.server)

    class Count(tf.keras.callbacks.Callback):
        batches = 0
        epochs = 0

        def on_train_batch_end(self, batch: int, logs: object = None) -> None:
            Count.batches += 1

        def on_epoch_end(self, epoch: int, logs: object = None) -> None:
            Count.epochs += 1

    with strategy.scope():
        model = tf.keras.Sequential(
            [tf.keras.Input(shape=(8,)), tf.keras.layers.Dense(16, activation="relu"),
             tf.keras.layers.Dense(1)]
        )  # fmt: skip
        model.compile(optimizer="sgd", loss="mse", steps_per_execution=2)
    history = model.fit(
        callback.wrap(dataset), epochs=args.epochs, callbacks=[callback, Count()], verbose=0
    )
    print(
        json.dumps(
            {
                "epochs": len(history.history["loss"]),
                "batches": Count.batches,
                "keras": type(model).__module__.split(".")[0],
                "steps_per_execution": type(model.steps_per_execution).__name__,
            }
        ),
        flush=True,
    )


if __name__ == "__main__":
    main()
