"""Real Keras training on the CPU, input wait measured by `cb.wrap`, judged by a real server:
a starved pipeline is flagged, the same pipeline with its delay hidden is not, a fed one never."""

import time
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

from tests.detect_support import FAST_DETECTORS
from tests.support import ServerProcess, wait_for

tf = pytest.importorskip("tensorflow")

BATCH = 128
FEATURES = 256
BATCHES = 150
DELAY_S = 0.04  # per batch: stands in for slow decoding or reading


@pytest.fixture(scope="module")
def keras_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    data_dir: Path = tmp_path_factory.mktemp("keras-diagnosis")
    process = ServerProcess(data_dir=data_dir, env=FAST_DETECTORS).start()
    yield process
    process.stop()


def _model() -> "tf.keras.Model":
    # A CPU step of a few milliseconds: well under the delay, so a serial pipeline starves
    # it, while 16 parallel reads behind a prefetch hide the delay.
    model = tf.keras.Sequential(
        [tf.keras.Input(shape=(FEATURES,)), tf.keras.layers.Dense(256, activation="relu"),
         tf.keras.layers.Dense(256, activation="relu"), tf.keras.layers.Dense(1)]
    )  # fmt: skip
    model.compile(optimizer="sgd", loss="mse")
    return model


def _dataset(pipeline: str) -> "tf.data.Dataset":
    rng = np.random.default_rng(0)
    x = rng.normal(size=(BATCHES * BATCH, FEATURES)).astype("float32")
    ds = tf.data.Dataset.from_tensor_slices((x, x[:, :1])).batch(BATCH)
    if pipeline == "fed":
        return ds.cache().prefetch(tf.data.AUTOTUNE)

    def slow(a: np.ndarray) -> np.ndarray:
        time.sleep(DELAY_S)
        return a

    def delay(a: "tf.Tensor", b: "tf.Tensor") -> tuple["tf.Tensor", "tf.Tensor"]:
        return tf.ensure_shape(tf.numpy_function(slow, [a], tf.float32), a.shape), b

    if pipeline == "starved":
        return ds.map(delay)  # serial, no prefetch
    # One epoch per run: a new epoch's iterator waits once for its first batch (a real,
    # but one-off wait that a long epoch dilutes and a short test would not).
    options = tf.data.Options()
    options.threading.private_threadpool_size = 32  # the delay sleeps; threads, not CPUs
    ds = ds.map(delay, num_parallel_calls=16, deterministic=True).prefetch(tf.data.AUTOTUNE)
    return ds.with_options(options)


def _train(server: ServerProcess, pipeline: str, epochs: int = 1) -> int:
    from trainer_agent import StokerCallback

    callback = StokerCallback(run_name=f"{pipeline}-pipeline", project="diag", server=server.url)
    _model().fit(callback.wrap(_dataset(pipeline)), epochs=epochs, callbacks=[callback], verbose=0)
    run = wait_for(
        lambda: next(
            (r for r in server.get("/api/v1/runs", limit=1000)["data"]
             if r["name"] == f"{pipeline}-pipeline" and r["status"] == "finished"),
            None,
        ),
        what=f"the {pipeline} run finished",
    )  # fmt: skip
    return run["id"]


def _verdict_events(server: ServerProcess, run_id: int) -> list[str]:
    events = server.get(f"/api/v1/runs/{run_id}/events", kind="verdict")["data"]
    return [e["data"]["verdict"] for e in events]


FLAGGED = {"highly_input_bound", "moderately_input_bound"}


def test_starved_pipeline_is_flagged_highly_input_bound(keras_server: ServerProcess) -> None:
    run_id = _train(keras_server, "starved")
    diagnosis = keras_server.get(f"/api/v1/runs/{run_id}/diagnosis")
    print("starved:", diagnosis["input_wait_share"], _verdict_events(keras_server, run_id))
    assert diagnosis["verdict"] == "highly_input_bound"
    assert diagnosis["source"] == "measured"
    assert diagnosis["input_wait_share"] >= 0.2
    assert "highly_input_bound" in _verdict_events(keras_server, run_id)
    # wrap describes the pipeline: no prefetch, a serial map; the advice says what to add.
    evidence = {e["key"]: e["value"] for e in diagnosis["evidence"]}
    assert evidence["prefetch"] is False and evidence["parallel_map"] is False
    advice = " ".join(diagnosis["advice"])
    assert ".prefetch(tf.data.AUTOTUNE)" in advice and "num_parallel_calls" in advice
    marks = keras_server.get(f"/api/v1/runs/{run_id}/starvation")
    assert marks["starved_steps"] > 0.8 * marks["measured_steps"]


def test_prefetch_and_parallel_map_hiding_the_delay_is_not_flagged(
    keras_server: ServerProcess,
) -> None:
    run_id = _train(keras_server, "hidden")
    diagnosis = keras_server.get(f"/api/v1/runs/{run_id}/diagnosis")
    print("hidden:", diagnosis["input_wait_share"], _verdict_events(keras_server, run_id))
    assert diagnosis["verdict"] == "not_input_bound"
    assert diagnosis["source"] == "measured"
    assert not FLAGGED & set(_verdict_events(keras_server, run_id))


def test_fed_pipeline_is_never_flagged(keras_server: ServerProcess) -> None:
    run_id = _train(keras_server, "fed", epochs=2)
    diagnosis = keras_server.get(f"/api/v1/runs/{run_id}/diagnosis")
    print("fed:", diagnosis["input_wait_share"], _verdict_events(keras_server, run_id))
    assert diagnosis["verdict"] == "not_input_bound"
    assert not FLAGGED & set(_verdict_events(keras_server, run_id))
