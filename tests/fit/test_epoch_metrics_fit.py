"""Epoch and validation metrics from real Keras fits and a custom loop, and step counts that
match Keras's batches when the dataset's cardinality is unknown."""

from typing import Any

import numpy as np
import pytest

from tests.harness.support import ServerProcess

pytestmark = pytest.mark.tf_matrix  # also on the oldest TF and tf_keras: make test-tf-matrix

tf = pytest.importorskip("tensorflow")

BATCH = 16
FEATURES = 8


def _model(steps_per_execution: int = 1) -> "tf.keras.Model":
    model = tf.keras.Sequential(
        [tf.keras.Input(shape=(FEATURES,)), tf.keras.layers.Dense(16, activation="relu"),
         tf.keras.layers.Dense(1, activation="sigmoid")]
    )  # fmt: skip
    model.compile(
        optimizer="sgd",
        loss="binary_crossentropy",
        metrics=["accuracy"],
        steps_per_execution=steps_per_execution,
    )
    return model


def _unknown_cardinality(batches: int, seed: int = 0) -> "tf.data.Dataset":
    """`batches` batches behind a filter: tf.data cannot know how many (like TFRecords)."""
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(batches * BATCH, FEATURES)).astype("float32")
    y = (x.sum(axis=1, keepdims=True) > 0).astype("float32")
    ds = tf.data.Dataset.from_tensor_slices((x, y)).filter(lambda a, b: True).batch(BATCH)
    assert int(ds.cardinality()) == tf.data.UNKNOWN_CARDINALITY
    return ds


def _only_run(server: ServerProcess) -> dict[str, Any]:
    import trainer_agent

    trainer_agent.flush()  # fit() returns before the server acknowledged its last records
    runs = server.get("/api/v1/runs")["data"]
    assert len(runs) == 1
    return runs[0]


def _epoch_series(server: ServerProcess, run_id: int) -> dict[str, dict[str, Any]]:
    series = server.get(f"/api/v1/runs/{run_id}/metrics")["series"]
    return {s["name"]: s for s in series if s["axis"] == "epoch"}


class BatchCounter(tf.keras.callbacks.Callback):
    """Counts the batches Keras says it trained (the batch-end hooks)."""

    def __init__(self) -> None:
        super().__init__()
        self.ends: list[int] = []

    def on_train_batch_end(self, batch: int, logs: Any = None) -> None:
        self.ends.append(batch)


@pytest.mark.parametrize("steps_per_execution", [1, 4])
def test_unknown_cardinality_fit_with_validation_records_epochs_and_keras_step_count(
    server: ServerProcess, steps_per_execution: int
) -> None:
    from trainer_agent import StokerCallback

    if steps_per_execution > 1 and ".engine." in tf.keras.Model.__module__:  # Keras 2
        pytest.skip("Keras 2 cannot fit an unknown-cardinality dataset with steps_per_execution")
    epochs, batches = 3, 10  # with 4 steps per execution: 4 + 4 + 2, then end-of-data
    callback = StokerCallback(run_name=f"epochs-spe{steps_per_execution}", server=server.url)
    model = _model(steps_per_execution)
    history = model.fit(
        callback.wrap(_unknown_cardinality(batches)),
        validation_data=_unknown_cardinality(4, seed=1),
        epochs=epochs,
        callbacks=[callback],
        verbose=0,
    )
    run = _only_run(server)
    assert run["status"] == "finished"
    # Keras trained epochs x batches steps; the call per epoch that hit end-of-data is none.
    assert run["summary"]["steps"] == epochs * batches
    steps = server.get(f"/api/v1/runs/{run['id']}/steps", max_points=10_000)
    assert steps["step"] == list(range(epochs * batches))

    series = _epoch_series(server, run["id"])
    for name in ("loss", "accuracy", "val_loss", "val_accuracy"):
        assert series[name]["epoch"] == [0, 1, 2], name
        assert series[name]["step"] == [batches, 2 * batches, 3 * batches], name
        assert series[name]["value"] == pytest.approx(history.history[name], rel=1e-5), name
    val_loss, val_accuracy = history.history["val_loss"], history.history["val_accuracy"]
    summary = run["summary"]["epoch_metrics"]
    assert summary["val_loss"]["last"] == pytest.approx(val_loss[-1], rel=1e-5)
    assert summary["val_loss"]["best"] == pytest.approx(min(val_loss), rel=1e-5)
    assert summary["val_accuracy"]["best"] == pytest.approx(max(val_accuracy), rel=1e-5)


def test_fit_without_wrap_on_unknown_cardinality_counts_kerass_batches(
    server: ServerProcess,
) -> None:
    from trainer_agent import StokerCallback

    callback, counter = StokerCallback(run_name="unwrapped", server=server.url), BatchCounter()
    _model().fit(_unknown_cardinality(6), epochs=2, callbacks=[callback, counter], verbose=0)
    run = _only_run(server)
    assert run["summary"]["steps"] == len(counter.ends) == 12


def test_custom_loop_log_epoch_records_epoch_series(server: ServerProcess) -> None:
    from trainer_agent import Monitor

    with Monitor(run_name="loop-epochs", server=server.url) as mon:
        for epoch in range(3):
            for _ in mon.iterate(range(5)):
                pass
            mon.log_epoch(epoch, loss=1.0 / (epoch + 1), val_accuracy=0.5 + 0.1 * epoch)
    run = _only_run(server)
    series = _epoch_series(server, run["id"])
    assert series["loss"]["epoch"] == [0, 1, 2]
    assert series["loss"]["step"] == [5, 10, 15]
    assert series["loss"]["value"] == pytest.approx([1.0, 0.5, 1 / 3])
    assert run["summary"]["epoch_metrics"]["val_accuracy"]["best"] == pytest.approx(0.7)
    assert run["summary"]["epoch_metrics"]["loss"]["best"] == pytest.approx(1 / 3)
