"""Real Keras training on the CPU, input wait measured by `cb.wrap`, judged by a real server:
a starved pipeline is flagged, the same pipeline with its delay hidden is not, a fed one never.

The step is GPU-like (`tests.harness.gpu_like.DeviceHold`), and every delay is set from the step
time measured in this module, so "slower than the step" and "hidden" hold on any machine."""

import math
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

from tests.harness.detect_support import FAST_DETECTORS
from tests.harness.support import ServerProcess, wait_for

tf = pytest.importorskip("tensorflow")

from tests.harness.gpu_like import (  # noqa: E402  (needs TensorFlow)
    MARGIN,
    held_model,
    measure_step_s,
    sleep_per_batch,
    starving_delay_s,
)

BATCH = 64
FEATURES = 32
BATCHES = 50
# The device's share of a step: no CPU, so the pipeline keeps both cores. Long next to the
# ~1.4 ms a fetch of a ready element took on a loaded 2-core CI machine (executor threads
# waiting for a core), which read 8-10 % on a 15 ms hold: a fed pipeline must read fed.
HOLD_S = 0.05
# The fed run's hold: its fetches of ready elements read 5.3 % of a 50 ms hold in a full
# two-worker CI run (2.7 ms a fetch waiting for a core), over the 5 % of "moderately".
FED_HOLD_S = 0.15


@pytest.fixture(scope="module")
def keras_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    data_dir: Path = tmp_path_factory.mktemp("keras-diagnosis")
    process = ServerProcess(data_dir=data_dir, env=FAST_DETECTORS).start()
    yield process
    process.stop()


def _source() -> "tf.data.Dataset":
    x = np.random.default_rng(0).normal(size=(BATCHES * BATCH, FEATURES)).astype("float32")
    return tf.data.Dataset.from_tensor_slices((x, x[:, :1])).batch(BATCH)


@pytest.fixture(scope="module")
def step_s() -> float:
    """This machine's step time with cached input, measured before any delay is chosen."""
    return measure_step_s(held_model(FEATURES, HOLD_S), _source())


def _dataset(pipeline: str, step_s: float) -> "tf.data.Dataset":
    ds = _source()
    if pipeline == "fed":
        return ds.cache().prefetch(tf.data.AUTOTUNE)
    delay_s = starving_delay_s(step_s)  # a serial read takes MARGIN steps or more
    if pipeline == "starved":
        return sleep_per_batch(ds, delay_s)  # serial, no prefetch
    # Enough parallel reads that the pipeline delivers 2 x MARGIN x faster than the step asks:
    # each read takes the GIL (a numpy_function), which other threads of a long pytest process
    # may hold a while.
    # One epoch per run: a new epoch's iterator waits once for its first batch (a real,
    # but one-off wait that a long epoch dilutes and a short test would not).
    parallel = math.ceil(2 * MARGIN * delay_s / step_s)
    return sleep_per_batch(ds, delay_s, parallel=parallel).prefetch(tf.data.AUTOTUNE)


def _train(
    server: ServerProcess, pipeline: str, step_s: float, epochs: int = 1, hold_s: float = HOLD_S
) -> int:
    import trainer_agent
    from trainer_agent import StokerCallback

    callback = StokerCallback(run_name=f"{pipeline}-pipeline", project="diag", server=server.url)
    model = held_model(FEATURES, hold_s)
    model.fit(
        callback.wrap(_dataset(pipeline, step_s)), epochs=epochs, callbacks=[callback], verbose=0
    )
    # fit() returns before its run is delivered: wait for the sender as long as the server
    # acknowledges (a loaded machine's server may take longer than any fixed wait here).
    assert trainer_agent.flush(), "the run's records were not delivered"
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


def test_starved_pipeline_is_flagged_highly_input_bound(
    keras_server: ServerProcess, step_s: float
) -> None:
    run_id = _train(keras_server, "starved", step_s)
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
    keras_server: ServerProcess, step_s: float
) -> None:
    run_id = _train(keras_server, "hidden", step_s)
    diagnosis = keras_server.get(f"/api/v1/runs/{run_id}/diagnosis")
    print("hidden:", diagnosis["input_wait_share"], _verdict_events(keras_server, run_id))
    assert diagnosis["verdict"] == "not_input_bound"
    assert diagnosis["source"] == "measured"
    assert not FLAGGED & set(_verdict_events(keras_server, run_id))


def test_fed_pipeline_is_never_flagged(keras_server: ServerProcess, step_s: float) -> None:
    run_id = _train(keras_server, "fed", step_s, epochs=2, hold_s=FED_HOLD_S)
    diagnosis = keras_server.get(f"/api/v1/runs/{run_id}/diagnosis")
    print("fed:", diagnosis["input_wait_share"], _verdict_events(keras_server, run_id))
    assert diagnosis["verdict"] == "not_input_bound"
    assert not FLAGGED & set(_verdict_events(keras_server, run_id))
