"""A real Keras fit on the CPU with a starved tf.data pipeline: the run's /pipeline answer
lists the stages from tf.data's autotuning model and names the slow map as the bottleneck.

The step is GPU-like (`tests.harness.gpu_like.DeviceHold`) and the slow map's delay is set from the
step time measured here (MARGIN x the step for a batch), so the premise holds on any machine.
"""

import time
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

from tests.harness.support import ServerProcess, wait_for

tf = pytest.importorskip("tensorflow")

from tests.harness.gpu_like import held_model, measure_step_s, starving_delay_s  # noqa: E402

BATCH = 32
FEATURES = 16
BATCHES = 80
HOLD_S = 0.015


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    data_dir: Path = tmp_path_factory.mktemp("pipeline-fit")
    process = ServerProcess(data_dir=data_dir).start()
    yield process
    process.stop()


def _features() -> np.ndarray:
    return np.random.default_rng(0).normal(size=(BATCHES * BATCH, FEATURES)).astype("float32")


def _starved(delay_per_element_s: float) -> "tf.data.Dataset":
    x = _features()

    def normalize(a, b):
        return a * 0.5, b

    def slow_decode(a, b):
        def sleep(v: np.ndarray) -> np.ndarray:
            time.sleep(delay_per_element_s)
            return v

        out = tf.numpy_function(sleep, [a], a.dtype, stateful=True)
        return tf.ensure_shape(out, a.shape), b

    return (
        tf.data.Dataset.from_tensor_slices((x, x[:, :1]))
        .map(normalize, num_parallel_calls=2)
        .map(slow_decode)  # serial: the bottleneck
        .batch(BATCH)
        .prefetch(2)
    )


def test_fit_pipeline_answer_names_the_slow_map(
    server: ServerProcess, monkeypatch: pytest.MonkeyPatch
) -> None:
    from trainer_agent import StokerCallback

    x = _features()
    step_s = measure_step_s(
        held_model(FEATURES, HOLD_S), tf.data.Dataset.from_tensor_slices((x, x[:, :1])).batch(BATCH)
    )
    delay_per_element_s = starving_delay_s(step_s) / BATCH
    monkeypatch.setenv("STOKER_PIPELINE_INTERVAL_S", "0.5")
    callback = StokerCallback(run_name="starved-map", project="pipeline", server=server.url)
    model = held_model(FEATURES, HOLD_S)
    model.fit(callback.wrap(_starved(delay_per_element_s)), epochs=1, callbacks=[callback],
              verbose=0)  # fmt: skip
    run = wait_for(
        lambda: next(
            (r for r in server.get("/api/v1/runs", project="pipeline")["data"]
             if r["name"] == "starved-map" and r["status"] == "finished"),
            None,
        ),
        what="the run finished",
    )  # fmt: skip
    out = server.get(f"/api/v1/runs/{run['id']}/pipeline")
    assert out["source"] == "autotune_model", out
    kinds = [s["kind"] for s in out["stages"]]
    assert kinds[0] == "tensor_slices" and kinds[-1] == "prefetch", kinds
    functions = [s["function"] for s in out["stages"] if s["function"]]
    assert functions == ["normalize", "slow_decode"], out["stages"]
    bottleneck = out["bottleneck"]
    assert bottleneck is not None, out
    assert bottleneck["function"] == "slow_decode", bottleneck
    assert "num_parallel_calls" in bottleneck["fix"]


def test_a_monitored_fit_leaves_no_tf_data_iterator_alive(
    server: ServerProcess, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The pipeline view watches the fit's iterator through weak references: once `fit`
    returns, its iterators are gone without a garbage collection, as without Stoker. (Held by
    Stoker, the last one died at a later collection on whichever thread ran it, and a tf.data
    iterator's destructor can block that thread for up to a minute: docs/agent.md.) The fit
    runs out of steps: one stopped early (`stop_training`) leaves Keras's own generator
    holding its iterator until a collection, with or without Stoker."""
    import gc

    from tensorflow.python.data.ops import iterator_ops

    from trainer_agent import StokerCallback

    def live_iterators() -> set[int]:
        # type(), not isinstance(): gc also holds weak proxies, and a dead one raises
        owned = iterator_ops.OwnedIterator
        return {id(o) for o in gc.get_objects() if issubclass(type(o), owned)}

    monkeypatch.setenv("STOKER_PIPELINE_INTERVAL_S", "0.5")
    callback = StokerCallback(run_name="iterator-lifetime", project="pipeline", server=server.url)
    x = _features()
    data = tf.data.Dataset.from_tensor_slices((x, x[:, :1])).batch(BATCH).repeat()
    reads: list[float | None] = []

    class LastRead(tf.keras.callbacks.Callback):
        def on_train_end(self, logs: object = None) -> None:
            reads.append(callback.run_session.pipeline.last_read_us)

    model = held_model(FEATURES, 0.01)  # 150 held steps: 1.5 s or more, 3 reads or more
    before = live_iterators()
    gc.disable()  # only reference counts may free the iterators
    try:
        model.fit(
            callback.wrap(data), epochs=1, steps_per_epoch=150, verbose=0,
            callbacks=[LastRead(), callback],
        )  # fmt: skip
        left = live_iterators() - before
    finally:
        gc.enable()
    assert reads and reads[0] is not None, "the pipeline view never read the iterator"
    assert not left, f"{len(left)} tf.data iterator(s) outlived the fit"
