"""A real Keras fit on the CPU streams every step into a real `stoker serve`."""

from pathlib import Path

import numpy as np
import pytest

import trainer_agent
from tests.harness.support import ServerProcess, wait_for

tf = pytest.importorskip("tensorflow")


def _tiny_model() -> "tf.keras.Model":
    model = tf.keras.Sequential(
        [tf.keras.Input(shape=(8,)), tf.keras.layers.Dense(16, activation="relu"),
         tf.keras.layers.Dense(1)]
    )  # fmt: skip
    model.compile(optimizer="sgd", loss="mse")
    return model


def _data(samples: int = 320) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(1)
    x = rng.normal(size=(samples, 8)).astype("float32")
    return x, x.sum(axis=1, keepdims=True)


def test_fit_every_step_arrives_in_order_exactly_once(server: ServerProcess) -> None:
    from trainer_agent import StokerCallback

    x, y = _data(320)
    callback = StokerCallback(
        run_name="e2e", project="tests", server=server.url, config={"lr": 0.01}, tags=["t1"]
    )
    _tiny_model().fit(x, y, batch_size=32, epochs=3, validation_split=0.0, callbacks=[callback])
    trainer_agent.flush()  # fit() returns before the server acknowledged its last records

    runs = server.get("/api/v1/runs")
    assert runs["count"] == 1
    run = runs["data"][0]
    assert run["name"] == "e2e"
    assert run["project"] == "tests"
    assert run["tags"] == ["t1"]
    assert run["config"] == {"lr": 0.01}
    assert run["status"] == "finished"
    assert run["summary"]["steps"] == 30
    assert run["summary"]["step_time_ms_median"] > 0

    series = server.get(f"/api/v1/runs/{run['id']}/steps", max_points=1000)
    assert series["downsampled"] is False
    assert series["step"] == list(range(30))
    assert all(d > 0 for d in series["dur"])
    assert series["t"] == sorted(series["t"])


def test_fit_with_validation_excludes_validation_from_step_time(server: ServerProcess) -> None:
    from trainer_agent import StokerCallback

    x, y = _data(640)
    callback = StokerCallback(run_name="with-val", server=server.url)
    _tiny_model().fit(x, y, batch_size=32, epochs=2, validation_split=0.5, callbacks=[callback])
    trainer_agent.flush()
    run = server.get("/api/v1/runs")["data"][0]
    series = server.get(f"/api/v1/runs/{run['id']}/steps")
    assert series["step"] == list(range(20))


def test_fit_with_server_down_completes_and_warns_once(caplog: pytest.LogCaptureFixture) -> None:
    from tests.harness.support import free_port
    from trainer_agent import StokerCallback

    x, y = _data(320)
    callback = StokerCallback(run_name="no-server", server=f"http://127.0.0.1:{free_port()}")
    callback._agent_config.close_timeout_s = 1.0
    with caplog.at_level("WARNING", logger="trainer_agent"):
        history = _tiny_model().fit(x, y, batch_size=32, epochs=2, callbacks=[callback], verbose=0)
        # fit() does not wait for the sender: let it finish trying (bounded by the timeout).
        trainer_agent.flush()
    assert len(history.history["loss"]) == 2
    # The run's end says once that the server is unreachable, with where its records are
    # kept. A run that flushed live before its end (how many steps fit before the first flush
    # depends on the machine's speed) has also said once, then, that it cannot reach it.
    messages = [r.getMessage() for r in caplog.records]
    assert sum("is unreachable" in m for m in messages) == 1, messages
    assert sum("cannot reach the server" in m for m in messages) <= 1, messages


def test_fit_live_steps_reach_server_while_training(server: ServerProcess, tmp_path: Path) -> None:
    """Steps are visible on the server during training, not only at its end."""
    import subprocess
    import sys

    from tests.harness.support import REPO

    release = tmp_path / "release"  # the training holds at step 30 until this exists
    process = subprocess.Popen(
        [sys.executable, "-m", "tests.harness.train_script", "--server", server.url, "--name",
         "live", "--epochs", "1", "--batches", "60", "--batch-delay-s", "0.1",
         "--hold-at-step", "30", "--release-file", str(release)],
        cwd=REPO,
    )  # fmt: skip
    try:

        def partial_steps() -> int:
            runs = server.get("/api/v1/runs")["data"]
            if not runs or runs[0]["status"] != "running":
                return 0
            return 0 < runs[0]["summary"]["steps"] < 60

        wait_for(partial_steps, timeout_s=60, what="steps arriving mid-training")
    finally:
        release.touch()
        assert process.wait(timeout=120) == 0
    run = server.get("/api/v1/runs")["data"][0]
    assert run["status"] == "finished"
    assert run["summary"]["steps"] == 60
