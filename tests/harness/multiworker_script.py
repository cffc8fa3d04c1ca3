"""One worker of a two-worker `MultiWorkerMirroredStrategy` job on loopback, as a user writes
it: a tf.keras fit with `StokerCallback`, or a custom loop with `strategy.run` and `Monitor`.
Run by tests, one process per worker; the workers join one Stoker run.

Keras 3 cannot `fit` under this strategy, so the fit runs with the legacy tf.keras
(`TF_USE_LEGACY_KERAS=1`, package `tf_keras`). `steps_per_execution=2` makes tf.keras keep
that setting in a `MirroredVariable`, which the callback must read. The custom loop needs no
Keras.

`--slow-rank R` gives worker R a sleeping per-batch map, `MARGIN` times the step that worker
measured first (tests/harness/gpu_like.py), so its pipeline starves the job.

Usage: python -m tests.harness.multiworker_script --server URL --workers HOST:PORT,HOST:PORT
       --index I
       [--loop fit|custom] [--epochs N] [--batches N] [--steps-per-execution N]
       [--slow-rank R]
Prints one JSON line: the epochs and batches the worker ran, counted without Stoker.
"""

import argparse
import json
import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

GLOBAL_BATCH = 16
FEATURES = 8


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--server", required=True)
    parser.add_argument("--workers", required=True, help="comma-separated host:port, one each")
    parser.add_argument("--index", type=int, required=True)
    parser.add_argument("--loop", choices=("fit", "custom"), default="fit")
    parser.add_argument("--epochs", type=int, default=2)
    parser.add_argument("--batches", type=int, default=8, help="global batches per epoch")
    parser.add_argument("--steps-per-execution", type=int, default=2)
    parser.add_argument("--slow-rank", type=int, default=None)
    parser.add_argument("--fault", default=None, help="a callback hook that fails (harness.faults)")
    args = parser.parse_args()
    # The strategy reads the cluster from TF_CONFIG when it is built; Stoker derives the
    # job's run key and this worker's rank from it too.
    os.environ["TF_CONFIG"] = json.dumps(
        {
            "cluster": {"worker": args.workers.split(",")},
            "task": {"type": "worker", "index": args.index},
        }
    )

    import numpy as np
    import tensorflow as tf

    strategy = tf.distribute.MultiWorkerMirroredStrategy()
    rng = np.random.default_rng(0)
    x = rng.normal(size=(args.batches * GLOBAL_BATCH, FEATURES)).astype("float32")
    dataset = tf.data.Dataset.from_tensor_slices((x, x.sum(axis=1, keepdims=True)))
    options = tf.data.Options()
    options.experimental_distribute.auto_shard_policy = tf.data.experimental.AutoShardPolicy.DATA
    dataset = dataset.batch(GLOBAL_BATCH).with_options(options)
    if args.loop == "fit":
        result = _fit(args, strategy, dataset)
    else:
        result = _custom_loop(args, strategy, dataset)
    print(json.dumps({**result, "pid": os.getpid()}), flush=True)


def _fit(args: argparse.Namespace, strategy: object, dataset: object) -> dict[str, object]:
    import tensorflow as tf

    from trainer_agent import StokerCallback

    class Count(tf.keras.callbacks.Callback):
        batches = 0
        epochs = 0

        def on_train_batch_end(self, batch: int, logs: object = None) -> None:
            Count.batches += 1

        def on_epoch_end(self, epoch: int, logs: object = None) -> None:
            Count.epochs += 1

    with strategy.scope():  # type: ignore[attr-defined]
        model = tf.keras.Sequential(
            [tf.keras.Input(shape=(FEATURES,)), tf.keras.layers.Dense(16, activation="relu"),
             tf.keras.layers.Dense(1)]
        )  # fmt: skip
        model.compile(optimizer="sgd", loss="mse", steps_per_execution=args.steps_per_execution)
    facts: dict[str, object] = {}
    if args.slow_rank is not None:
        from tests.harness.gpu_like import measure_step_s, sleep_per_batch, starving_delay_s

        # Every worker measures (the fit is collective); the slow one sleeps MARGIN x its own.
        step_s = measure_step_s(model, dataset)
        facts["measured_step_s"] = step_s
        if args.index == args.slow_rank:
            # The job's collective step is longer than a worker's own measured one (65 ms
            # against 10 ms was seen on a loaded 2-core machine): a floor keeps the slow
            # worker's pipeline the slowest part of the job there too.
            facts["delay_s"] = starving_delay_s(step_s, floor_s=0.25)
            dataset = sleep_per_batch(dataset, facts["delay_s"])  # type: ignore[arg-type]
    callback = StokerCallback(run_name="multiworker", project="multiworker", server=args.server)
    if args.fault:
        from tests.harness import faults

        faults.install(args.fault, callback)
    history = model.fit(
        callback.wrap(dataset), epochs=args.epochs, callbacks=[callback, Count()], verbose=0
    )
    return {
        **facts,
        "epochs": len(history.history["loss"]),
        "batches": Count.batches,
        "keras": type(model).__module__.split(".")[0],
        "steps_per_execution": type(model.steps_per_execution).__name__,
    }


def _custom_loop(args: argparse.Namespace, strategy: object, dataset: object) -> dict[str, object]:
    import tensorflow as tf

    from trainer_agent import Monitor

    with strategy.scope():  # type: ignore[attr-defined]
        weights = tf.Variable(tf.zeros((FEATURES, 1)))

    def replica_step(x: tf.Tensor, y: tf.Tensor) -> tf.Tensor:
        with tf.GradientTape() as tape:
            loss = tf.reduce_mean((tf.matmul(x, weights) - y) ** 2)
        gradient = tape.gradient(loss, weights)
        gradient = tf.distribute.get_replica_context().all_reduce("MEAN", gradient)
        weights.assign_sub(0.01 * gradient)
        return loss

    @tf.function
    def train_step(x: tf.Tensor, y: tf.Tensor) -> tf.Tensor:
        losses = strategy.run(replica_step, args=(x, y))  # type: ignore[attr-defined]
        return strategy.reduce("MEAN", losses, axis=None)  # type: ignore[attr-defined]

    distributed = strategy.experimental_distribute_dataset(dataset)  # type: ignore[attr-defined]
    batches = 0
    with Monitor(run_name="multiworker-loop", project="multiworker", server=args.server) as mon:
        for epoch in range(args.epochs):
            for x, y in mon.iterate(distributed):
                loss = train_step(x, y)
                mon.log(loss=loss)
                batches += 1
            mon.log_epoch(epoch, loss=loss)
    return {"epochs": args.epochs, "batches": batches}


if __name__ == "__main__":
    main()
