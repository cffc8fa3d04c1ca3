"""The profiler's threads: nothing Stoker starts for a profiled fit outlives it, and the
batch-end hook, which Keras may run on a thread pool (`async_safe`), never closes a profiler
step marker off the training thread."""

import logging
import threading
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest

from tests.harness.support import ServerProcess, wait_for

tf = pytest.importorskip("tensorflow")

from tests.fit.test_profile_capture import (  # noqa: E402
    FEATURES,
    HOLD_S,
    Training,
    _request,
    _settled,
    small_dataset,
    steps_stored,
)
from tests.harness.gpu_like import collect_here, held_model  # noqa: E402
from trainer_agent import StokerCallback, flush  # noqa: E402
from trainer_agent.config import AgentConfig  # noqa: E402
from trainer_agent.profiling.profile import Profiler  # noqa: E402

PROFILED_FITS = 3


def _names() -> list[str]:
    """The names of Stoker's threads alive now."""
    return [t.name for t in threading.enumerate() if t.name.startswith("stoker-")]


def _profiled_fit(server: ServerProcess, name: str) -> dict[str, Any]:
    training = Training(server, small_dataset(), name)
    try:
        run_id = training.run_id()
        wait_for(lambda: steps_stored(server, run_id) >= 5, timeout_s=60, what="steps")
        response = _request(server, run_id, steps=5)
        assert response.status_code == 202, response.text
        profile = _settled(server, run_id, response.json()["id"])
    finally:
        training.stop()
    assert training.error is None
    return profile


def test_no_thread_outlives_the_profiled_fits_that_started_it(
    shared_server: ServerProcess,
) -> None:
    """Each profiled fit used to leave its upload thread waiting forever on an empty queue
    (9 were seen after a test session). What stays after a fit are the process's reused
    threads: the one sampler, and the sender workers, which the next fit takes (one at a time,
    as these fits are) and which end after `_Workers.IDLE_S` idle. So never more senders than
    were there before the first fit, or one; their count is not compared across fits, as an
    idle one may end in between on a slow machine."""
    reused = {"stoker-sampler", "stoker-sender"}
    senders_before = _names().count("stoker-sender")
    for i in range(PROFILED_FITS):
        profile = _profiled_fit(shared_server, f"threads-{i}")
        assert profile["status"] == "ready", profile
        flush()
        wait_for(
            lambda: set(_names()) <= reused,
            what=f"every thread of profiled fit {i} but the reused ones to end",
        )
        names = _names()
        assert names.count("stoker-sampler") <= 1, names
        assert names.count("stoker-sender") <= max(senders_before, 1), names


def test_a_marker_is_closed_only_on_the_thread_that_opened_it() -> None:
    """Keras's `_async_dispatch` runs batch-end on a `ThreadPoolExecutor`: there `step_end`
    leaves the marker alone, and the next step-begin (training thread) closes it."""
    profiler = Profiler(AgentConfig(server="http://127.0.0.1:9", spool_dir=None), lambda: None)
    profiler.capture._enter_trace(step=0)
    opened = profiler.capture._trace
    with ThreadPoolExecutor() as pool:
        pool.submit(profiler.step_end).result()
    assert profiler.capture._trace is opened  # still open: not this thread's to close
    profiler.step_end()  # the training thread
    assert profiler.capture._trace is None
    profiler.stop()


class _AsyncCallbacks(tf.keras.callbacks.CallbackList):
    """Keras's own callback list, dispatching batch-end to its thread pool as it does on the
    backends it deems thread-safe (JAX, PyTorch): `_configure_async_dispatch` sets this flag."""

    def _configure_async_dispatch(self, callbacks: Any) -> None:
        self._async_train = True


def test_a_fit_whose_batch_end_runs_on_kerass_thread_pool_is_profiled(
    shared_server: ServerProcess, caplog: pytest.LogCaptureFixture
) -> None:
    callback = StokerCallback(run_name="async-batch-end", server=shared_server.url)
    model = held_model(FEATURES, HOLD_S)
    stop = threading.Event()
    pool_threads: set[int] = set()

    class Stopper(tf.keras.callbacks.Callback):
        async_safe = True

        def on_train_batch_end(self, batch: int, logs: Any = None) -> None:
            pool_threads.add(threading.get_ident())
            if stop.is_set():
                self.model.stop_training = True

    callbacks = _AsyncCallbacks([callback, Stopper()], add_history=True, model=model)
    errors: list[BaseException] = []

    def fit() -> None:
        try:
            model.fit(callback.wrap(small_dataset().repeat()), epochs=1, steps_per_epoch=100_000,
                      verbose=0, callbacks=callbacks)  # fmt: skip
        except BaseException as error:
            errors.append(error)
        finally:
            collect_here()

    thread = threading.Thread(target=fit, daemon=True)
    with caplog.at_level(logging.WARNING, logger="trainer_agent"):
        thread.start()
        try:
            session = wait_for(lambda: callback.run_session, what="the run's session")
            run_id = wait_for(lambda: session.sender.run_id, what="the run's id")
            wait_for(lambda: steps_stored(shared_server, run_id) >= 5, what="steps")
            response = _request(shared_server, run_id, steps=10)
            assert response.status_code == 202, response.text
            profile = _settled(shared_server, run_id, response.json()["id"])
        finally:
            stop.set()
            thread.join(60)
            flush()
    assert errors == []
    assert pool_threads and thread.ident not in pool_threads  # batch-end ran on the pool
    assert profile["status"] == "ready", profile
    assert profile["overhead"]["steps"] == 10 and profile["analysis"]["steps"]
    said = [r.getMessage() for r in caplog.records]
    assert not [m for m in said if "agent disabled" in m or "profile failed" in m], said
