"""The agent can never crash training: a fault in any of its hooks (injected from outside,
tests/harness/faults.py) disables it once, ends its run on the server as `interrupted`, and
the fit or custom loop runs exactly as it does without Stoker."""

import logging
from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest

from tests.harness.faults import fail_hook, fail_wrap
from tests.harness.support import ServerProcess, free_port, wait_for

tf = pytest.importorskip("tensorflow")

from tests.fit.test_agent_fit import _dataset  # noqa: E402  (the tiny model and data, reused)
from tests.fit.test_agent_fit import _model as tiny_model  # noqa: E402
from trainer_agent import log_once  # noqa: E402
from trainer_agent.capture.callback import GUARDED_HOOKS, StokerCallback, StokerHooks  # noqa: E402
from trainer_agent.capture.monitor import Monitor  # noqa: E402
from trainer_agent.telemetry.environment import plain_int  # noqa: E402

pytestmark = pytest.mark.tf_matrix  # also on the oldest TF and tf_keras: make test-tf-matrix

BATCHES = 6
EPOCHS = 2
CALLBACK_HOOKS = GUARDED_HOOKS
MONITOR_HOOKS = ("start", "iterate", "log", "close")


def _model() -> Any:
    tf.keras.utils.set_random_seed(0)  # the same weights with and without Stoker
    return tiny_model()


class Count(tf.keras.callbacks.Callback):
    """Plain Keras, next to Stoker: how many batches and epochs the fit really ran."""

    def __init__(self) -> None:
        super().__init__()
        self.batches = 0
        self.epochs = 0

    def on_train_batch_end(self, batch: int, logs: Any = None) -> None:
        self.batches += 1

    def on_epoch_end(self, epoch: int, logs: Any = None) -> None:
        self.epochs += 1


def _fit(stoker: StokerCallback | None) -> tuple[int, int, list[float]]:
    """Batches, epochs and per-epoch losses of a small fit with validation."""
    model, train, count = _model(), _dataset(BATCHES), Count()
    if stoker is not None:
        train = stoker.wrap(train)
    callbacks = [count] if stoker is None else [stoker, count]
    history = model.fit(
        train, validation_data=_dataset(2), epochs=EPOCHS, callbacks=callbacks, verbose=0
    )
    return count.batches, count.epochs, history.history["loss"]


def _loop(monitor: Monitor | None) -> list[float]:
    """Every step's loss of a custom training loop, with or without a Monitor."""
    model = _model()
    optimizer = tf.keras.optimizers.SGD(0.01)

    @tf.function
    def train_step(x: Any, y: Any) -> Any:
        with tf.GradientTape() as tape:
            loss = tf.reduce_mean(tf.square(model(x, training=True) - y))
        optimizer.apply_gradients(zip(tape.gradient(loss, model.trainable_variables),
                                      model.trainable_variables, strict=True))  # fmt: skip
        return loss

    losses = []
    if monitor is None:
        for x, y in _dataset(BATCHES):
            losses.append(float(train_step(x, y)))
        return losses
    with monitor:
        for x, y in monitor.iterate(_dataset(BATCHES)):
            loss = train_step(x, y)
            monitor.log(loss=loss)
            losses.append(float(loss))
    return losses


def _disabled_logs(caplog: pytest.LogCaptureFixture) -> list[logging.LogRecord]:
    return [r for r in caplog.records if "agent disabled" in r.getMessage()]


def _runs_named(server: ServerProcess, name: str) -> list[dict[str, Any]]:
    runs = server.get("/api/v1/runs", project="guard", limit=1000)["data"]
    return [run for run in runs if run["name"] == name]


def _ended_run(server: ServerProcess, name: str, status: str) -> dict[str, Any]:
    def ended() -> dict[str, Any] | None:
        runs = _runs_named(server, name)
        return runs[0] if runs and runs[0]["status"] == status else None

    return wait_for(ended, what=f"run {name} {status}")


@pytest.fixture(scope="module")
def fit_without_stoker() -> tuple[int, int, list[float]]:
    return _fit(None)


@pytest.fixture(scope="module")
def loop_without_stoker() -> list[float]:
    return _loop(None)


def test_every_hook_the_callback_defines_is_guarded() -> None:
    defined = {name for name in vars(StokerHooks) if name.startswith("on_")}
    assert defined == set(GUARDED_HOOKS)


def test_fit_with_stoker_and_no_fault_trains_as_without_and_finishes_its_run(
    shared_server: ServerProcess,
    fit_without_stoker: tuple[int, int, list[float]],
    caplog: pytest.LogCaptureFixture,
) -> None:
    callback = StokerCallback(run_name="no-fault", project="guard", server=shared_server.url)
    batches, epochs, losses = _fit(callback)
    assert (batches, epochs) == fit_without_stoker[:2] == (BATCHES * EPOCHS, EPOCHS)
    np.testing.assert_allclose(losses, fit_without_stoker[2], rtol=1e-6)
    assert _disabled_logs(caplog) == []
    run = _ended_run(shared_server, "no-fault", "finished")
    assert run["summary"]["steps"] == BATCHES * EPOCHS


@pytest.mark.parametrize("hook", CALLBACK_HOOKS)
def test_fit_with_a_fault_in_a_hook_trains_as_without_stoker_and_disables_the_agent_once(
    hook: str,
    shared_server: ServerProcess,
    fit_without_stoker: tuple[int, int, list[float]],
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    name = f"fault-{hook}"
    callback = StokerCallback(run_name=name, project="guard", server=shared_server.url)
    fail_hook(callback, hook)
    batches, epochs, losses = _fit(callback)
    assert (batches, epochs) == fit_without_stoker[:2]
    np.testing.assert_allclose(losses, fit_without_stoker[2], rtol=1e-6)
    disabled = _disabled_logs(caplog)
    assert len(disabled) == 1, [r.getMessage() for r in disabled]
    assert f"InjectedFault in {hook}" in disabled[0].getMessage()
    assert disabled[0].exc_info is not None  # the traceback is in the log
    if hook == "on_train_begin":  # disabled before a run was opened
        assert _runs_named(shared_server, name) == []
    else:
        _ended_run(shared_server, name, "interrupted")


def test_fit_whose_dataset_cannot_be_wrapped_trains_as_without_and_is_monitored(
    shared_server: ServerProcess,
    fit_without_stoker: tuple[int, int, list[float]],
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    # The agent stays on: the fit's steps and samplers are recorded, only its wait is not.
    fail_wrap(monkeypatch)
    log_once.forget()
    callback = StokerCallback(run_name="fault-wrap", project="guard", server=shared_server.url)
    batches, epochs, losses = _fit(callback)
    assert (batches, epochs) == fit_without_stoker[:2]
    np.testing.assert_allclose(losses, fit_without_stoker[2], rtol=1e-6)
    assert _disabled_logs(caplog) == []
    said = [
        r.getMessage() for r in caplog.records if "input wait is not measured" in r.getMessage()
    ]
    assert len(said) == 1 and "InjectedFault" in said[0]
    run = _ended_run(shared_server, "fault-wrap", "finished")
    assert run["summary"]["steps"] == BATCHES * EPOCHS
    assert all(w is None for w in shared_server.get(f"/api/v1/runs/{run['id']}/steps")["wait"])


@pytest.mark.parametrize("hook", MONITOR_HOOKS)
def test_custom_loop_with_a_fault_in_the_monitor_trains_as_without_it(
    hook: str,
    shared_server: ServerProcess,
    loop_without_stoker: list[float],
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    name = f"loop-fault-{hook}"
    monitor = Monitor(run_name=name, project="guard", server=shared_server.url)
    fail_hook(monitor, hook)
    losses = _loop(monitor)
    assert len(losses) == len(loop_without_stoker) == BATCHES
    np.testing.assert_allclose(losses, loop_without_stoker, rtol=1e-6)
    disabled = _disabled_logs(caplog)
    assert len(disabled) == 1, [r.getMessage() for r in disabled]
    assert f"InjectedFault in {hook}" in disabled[0].getMessage()
    if hook == "start":
        assert _runs_named(shared_server, name) == []
    else:
        _ended_run(shared_server, name, "interrupted")


def _unreachable_monitor() -> Monitor:
    return Monitor(run_name="offline", server=f"http://127.0.0.1:{free_port()}")


class BadShape:
    """An element whose `shape` raises: the monitor's bookkeeping fails after the fetch."""

    @property
    def shape(self) -> Any:
        raise RuntimeError("no shape here")


def test_iterate_failing_mid_loop_still_yields_every_element_in_order(
    caplog: pytest.LogCaptureFixture,
) -> None:
    elements = [1, 2, BadShape(), 4, 5]
    with _unreachable_monitor() as monitor:
        seen = list(monitor.iterate(elements))
        assert list(monitor.iterate(["after"])) == ["after"]  # still off: the plain iterator
    assert seen == elements
    disabled = _disabled_logs(caplog)
    assert len(disabled) == 1
    assert "RuntimeError in iterate: no shape here" in disabled[0].getMessage()


@pytest.mark.parametrize("fault", [None, "iterate"])
def test_iterate_passes_the_iterables_own_error_and_the_loops_error_through(
    fault: str | None, caplog: pytest.LogCaptureFixture
) -> None:
    def monitor_with_fault() -> Monitor:
        monitor = _unreachable_monitor()
        if fault:
            fail_hook(monitor, fault)
        return monitor

    def source() -> Iterator[int]:
        yield 0
        yield 1
        raise ValueError("corrupt record")

    seen = []
    with pytest.raises(ValueError, match="corrupt record"), monitor_with_fault() as monitor:
        for element in monitor.iterate(source()):
            seen.append(element)
    assert seen == [0, 1]
    with pytest.raises(KeyError), monitor_with_fault() as monitor:
        for element in monitor.iterate(range(5)):
            if element == 3:
                raise KeyError("the loop's own error")
    assert len(_disabled_logs(caplog)) == (2 if fault else 0)  # once per monitor


def test_plain_int_reads_ints_tensors_variables_and_distributed_values() -> None:
    strategy = tf.distribute.MirroredStrategy()
    with strategy.scope():
        mirrored = tf.Variable(3)
    per_replica = strategy.run(lambda: tf.constant(5))
    assert type(mirrored).__name__ == "MirroredVariable"
    with pytest.raises(TypeError):
        int(mirrored)  # what the callback did before
    values = [2, np.int64(4), tf.constant(7), tf.Variable(8), mirrored, per_replica]
    assert [plain_int(v) for v in values] == [2, 4, 7, 8, 3, 5]
    assert plain_int(None) is None
    assert plain_int("x") is None
