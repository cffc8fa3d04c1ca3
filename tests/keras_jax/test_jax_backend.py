"""The agent on Keras 3's JAX backend, with no TensorFlow installed, against a real server.

- `stoker run` of an unmodified script stores one run per fit with Keras's exact batch
  count: PyDataset with workers and without, arrays over two epochs, a generator of unknown
  length under `steps_per_execution` (the last execution runs short), and TensorFlow is
  never imported.
- Input wait is measured where JAX's train function fetches each batch: a PyDataset (threads)
  and a generator whose batches take `MARGIN` x the measured device step read as waiting
  most of the step; the same fit on arrays in memory reads as fed.
- A plain JAX loop under `Monitor.iterate` is stored step by step with its waits.
"""

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import trainer_agent
from tests.harness.gpu_like_jax import MARGIN, Batches, generator, held_model, measure_step_s
from tests.harness.support import REPO, ServerProcess, wait_for

HOLD_S = 0.015
BATCH, FEATURES = 16, 8


@pytest.fixture(scope="module")
def jax_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    process = ServerProcess(data_dir=tmp_path_factory.mktemp("jax-server")).start()
    yield process
    process.stop()


def _finished_runs(server: ServerProcess, project: str, count: int) -> list[dict[str, Any]]:
    def finished() -> list[dict[str, Any]]:
        runs = server.get("/api/v1/runs", project=project, limit=100)["data"]
        done = len(runs) == count and all(r["status"] == "finished" for r in runs)
        return runs if done else []

    runs = wait_for(finished, what=f"{count} finished runs in {project}")

    def first_step_at(run: dict[str, Any]) -> float:
        # In the order the fits ran: their first step's time, the agent's clock. The server's
        # `started_at` is when a run reached it, and a short fit's run is sent at its end in
        # the background, so the next fit's can arrive first.
        times = server.get(f"/api/v1/runs/{run['id']}/steps")["t"]
        return times[0] if times else float("inf")

    return sorted(runs, key=first_step_at)


def _waits(server: ServerProcess, run: dict[str, Any]) -> tuple[list[float], list[float]]:
    series = server.get(f"/api/v1/runs/{run['id']}/steps")
    rows = [(w, d) for w, d in zip(series["wait"], series["dur"], strict=True) if w is not None]
    return [w for w, _ in rows], [d for _, d in rows]


def test_stoker_run_stores_each_fit_with_the_exact_batch_count(jax_server: ServerProcess) -> None:
    env = {**os.environ, "PYTHONPATH": str(REPO), "KERAS_BACKEND": "jax"}
    script = str(Path(__file__).with_name("jax_fits.py"))
    done = subprocess.run(
        [sys.executable, "-m", "trainer_agent.cli", "run", "--server", jax_server.url,
         "--project", "jax-steps", "--", sys.executable, script],
        cwd=REPO, env=env, capture_output=True, text=True, timeout=240,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert "tensorflow imported: False" in done.stdout
    runs = _finished_runs(jax_server, "jax-steps", 5)
    assert [r["summary"]["steps"] for r in runs] == [30, 20, 64, 23, 32]
    for run in runs:
        series = jax_server.get(f"/api/v1/runs/{run['id']}/steps")
        assert series["step"] == list(range(run["summary"]["steps"]))
        # Measured, not inferred: every step but the first (it compiles) has its wait.
        assert all(w is not None for w in series["wait"][5:])


def _fit_share(server: ServerProcess, project: str, model: Any, data: Any, **fit: Any) -> float:
    callback = trainer_agent.StokerCallback(server=server.url, project=project)
    model.fit(data, callbacks=[callback], verbose=0, **fit)
    trainer_agent.flush(30)
    (run,) = _finished_runs(server, project, 1)
    waits, durations = _waits(server, run)
    assert len(waits) >= fit.get("epochs", 1) * 16 - 1
    return sum(waits) / sum(durations)


def test_input_wait_is_measured_at_jax_fetches(jax_server: ServerProcess) -> None:
    assert "tensorflow" not in sys.modules
    model = held_model(FEATURES, HOLD_S)
    x = np.random.default_rng(0).normal(size=(BATCH * 24, FEATURES)).astype("float32")
    step_s = measure_step_s(model, x, BATCH)
    delay_s = MARGIN * step_s
    fed = _fit_share(jax_server, "jax-fed", model, x, y=x[:, :1], batch_size=BATCH)
    threads = _fit_share(
        jax_server, "jax-pydataset", model, Batches(x, BATCH, 4 * delay_s, workers=4)
    )
    made = _fit_share(jax_server, "jax-generator", model, generator(x, BATCH, delay_s))
    # A batch that takes MARGIN x the step leaves the device idle (MARGIN - 1) / MARGIN of it.
    starved = (MARGIN - 1) / MARGIN
    assert fed < 1 - starved, (fed, step_s)
    assert threads > starved / 2 and made > starved / 2, (threads, made, step_s)
    assert "tensorflow" not in sys.modules


def test_monitor_times_a_plain_jax_loop(jax_server: ServerProcess) -> None:
    @jax.jit
    def train_step(w: jax.Array, x: jax.Array, y: jax.Array) -> tuple[jax.Array, jax.Array]:
        loss, grad = jax.value_and_grad(lambda w: jnp.mean((x @ w - y) ** 2))(w)
        return w - 0.01 * grad, loss

    x = np.random.default_rng(0).normal(size=(BATCH * 20, FEATURES)).astype("float32")
    w = jnp.zeros((FEATURES, 1))
    with trainer_agent.Monitor(server=jax_server.url, project="jax-monitor") as mon:
        for xb, yb in mon.iterate(generator(x, BATCH, 0.002)):
            w, loss = train_step(w, xb, yb)
            mon.log(loss=loss)
    (run,) = _finished_runs(jax_server, "jax-monitor", 1)
    assert run["summary"]["steps"] == 20
    waits, _ = _waits(jax_server, run)
    # Each batch sleeps 2 ms before it is handed over, against a step of a few µs of compute.
    assert len(waits) == 20 and sum(waits) > 0.5 * 20 * 0.002
    assert "tensorflow" not in sys.modules


def test_dispatched_steps_are_timed_on_the_device_timeline() -> None:
    """A host that ran ahead (JAX's asynchronous dispatch): the calls returned at once, the
    outputs were ready later. Rows follow the device; only its idle time is waiting."""
    from trainer_agent.capture import input_wait
    from trainer_agent.capture.input_wait import Execution, Stamp, StepRow

    def split_dispatched(*args: Any) -> list[StepRow]:  # rows by field name
        return [StepRow(*row) for row in input_wait.split_dispatched(*args)]

    # Step 1 was asked for at 1.0 and handed over at 1.5, while the device still computed
    # step 0 until 2.0: no wait. Step 2's batch came at 4.0, the device free since 3.0.
    one = Execution(first_step=1, n=1, begin=1.0, end=1.6, epoch_start=False, returned=1.55)
    (row,) = split_dispatched(one, [Stamp(1.5, 16, 1.0)], 2.0, 3.0)
    assert (row.start, row.dur, row.wait) == (2.0, 1.0, 0.0)
    two = Execution(first_step=2, n=1, begin=1.6, end=4.1, epoch_start=False, returned=4.05)
    (row,) = split_dispatched(two, [Stamp(4.0, 16, 1.6)], 3.0, 5.0)
    assert (row.start, row.dur, row.wait) == (3.0, 2.0, 1.0)
    # Two steps in one execution: the chain is solved so that it ends when it was done.
    both = Execution(first_step=3, n=2, begin=5.0, end=5.2, epoch_start=False)
    rows = split_dispatched(both, [Stamp(5.5, 16, 5.0), Stamp(5.6, 16, 5.5)], 5.0, 7.5)
    assert [r.step for r in rows] == [3, 4]
    assert rows[0].start == 5.0 and rows[1].start + rows[1].dur == 7.5
    assert abs(rows[0].wait - 0.5) < 1e-9 and rows[1].wait == 0.0


# Stoker's Python calls a step on the training thread of a JAX fit (calls into its code and
# the calls its code makes): 19.0 with the executions matched to their device time on the
# sender thread; 42.5 before, when each was matched on this thread as it closed.
MAX_CALLS_PER_STEP_JAX = 22


def test_stokers_python_calls_a_jax_step_stay_under_the_stated_count() -> None:
    """CI guard, counted, never timed: the training thread hands each closed execution over
    (one append); the sender thread matches it to its device time before each flush."""
    import keras

    from tests.harness.training_thread import steps_counter
    from trainer_agent import StokerCallback

    x = np.zeros((BATCH * 600, FEATURES), "float32")
    model = keras.Sequential([keras.Input((FEATURES,)), keras.layers.Dense(4)])
    model.compile("sgd", "mse")
    for _ in range(2):  # the second fit is counted: the first traced the train function
        counter = steps_counter(keras.callbacks.Callback, 50)
        callback = StokerCallback(server="http://127.0.0.1:9")
        model.fit(x, x[:, :4], batch_size=BATCH, callbacks=[counter, callback], verbose=0)
    per_step = counter.counter.calls / counter.steps
    print(f"Stoker's calls a step: {per_step:.2f} ({counter.counter.by_name.most_common(12)})")
    assert counter.steps >= 500
    assert per_step <= MAX_CALLS_PER_STEP_JAX
