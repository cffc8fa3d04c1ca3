"""CI guards of what Stoker does on the training thread of a real fit, counted, never timed
(tests/harness/training_thread.py): its Python calls a step, the TensorFlow ops it runs
eagerly there, and its Python calls at a fit's start and end. The figures they guard, and the
code before them, are in docs/agent.md (§ What the agent costs)."""

from typing import Any

import numpy as np
import pytest

from tests.harness.training_thread import EagerOps, StokerCalls, steps_counter

pytestmark = pytest.mark.tf_matrix  # also on the oldest TF and tf_keras: make test-tf-matrix

tf = pytest.importorskip("tensorflow")

NO_SERVER = "http://127.0.0.1:9"
# Stoker's Python calls a step on the training thread with `wrap` (calls into its code and
# the calls its code makes, C functions included; Keras's own train function, called
# through the wrapper, counts as one): 13.1 at steps_per_execution 1 on Keras 3 and tf_keras
# (the two batch hooks and the step boundary's, the call's record, the train-function
# wrapper, the stamped iterator's tracing type, two clock reads, one append, one length).
# The code before read 25.4 (the stamps read and resolved on this thread every 400 steps,
# the profiler's markers at every step), and 36.7 before the stamps moved into the graph.
MAX_CALLS_PER_STEP = 15
# At steps_per_execution 32 the same calls come once per 32 steps (main read 9.0 there: its
# chain solved on this thread; 46.8 before that).
MAX_CALLS_PER_STEP_32 = 1.0
# A fit's start and end (on_train_begin, on_train_end): the run's session, its sender and
# sampler handed over to their threads, the train function wrapped and restored.
MAX_CALLS_PER_FIT = 260


def _dataset(steps: int) -> Any:
    x = np.zeros((64, 8), "float32")
    ds = tf.data.Dataset.from_tensor_slices((x, x[:, :1])).batch(4, drop_remainder=True)
    return ds.cache().repeat().take(steps).prefetch(2)


def _model(steps_per_execution: int = 1) -> Any:
    keras = tf.keras
    model = keras.Sequential([keras.Input((8,)), keras.layers.Dense(4), keras.layers.Dense(1)])
    model.compile("sgd", "mse", steps_per_execution=steps_per_execution)
    return model


def _callback() -> Any:
    from trainer_agent import StokerCallback

    return StokerCallback(server=NO_SERVER)


@pytest.mark.parametrize(
    ("steps_per_execution", "most"), [(1, MAX_CALLS_PER_STEP), (32, MAX_CALLS_PER_STEP_32)]
)
def test_stokers_python_calls_a_step_stay_under_the_stated_count(
    steps_per_execution: int, most: float
) -> None:
    """CI guard: the stamps are read and matched to the steps on the sender thread, so the
    training thread's share is the hooks' bookkeeping alone, whatever the step."""
    model = _model(steps_per_execution)
    steps = 64 * 10
    for _ in range(2):  # the second fit is counted: the first traced the train function
        callback = _callback()
        counter = steps_counter(tf.keras.callbacks.Callback, 64)
        model.fit(callback.wrap(_dataset(steps)), callbacks=[counter, callback], verbose=0)
    per_step = counter.counter.calls / counter.steps
    print(f"Stoker's calls a step: {per_step:.2f} ({counter.counter.by_name.most_common(12)})")
    assert counter.steps >= steps - 64 - steps_per_execution
    assert per_step <= most


def test_a_fit_runs_no_tensorflow_op_for_stoker_on_the_training_thread() -> None:
    """CI guard: the stamp ring is read off the training thread, and a new iterator costs no
    read of it. What remains is the optimizer's learning rate at each epoch's end (and, on
    tf_keras, steps_per_execution, a variable there, once a fit); the code before also read
    the ring's fetch count at each new iterator and the ring itself at each read."""
    model = _model()
    epochs = 3

    def fit(monitored: bool) -> EagerOps:
        callbacks, data = [], _dataset(100)
        if monitored:
            callback = _callback()
            callbacks, data = [callback], callback.wrap(data)
        ops = EagerOps()
        with ops.counting():
            model.fit(data, epochs=epochs, steps_per_epoch=5, callbacks=callbacks, verbose=0)
        return ops

    fit(True), fit(False)  # traced
    stoker, plain = fit(True).plain_ops(), fit(False).plain_ops()
    added = stoker - plain
    print(f"eager ops Stoker added in {epochs} epochs: {dict(added)}")
    assert set(added) <= {"ReadVariableOp", "Identity"}
    assert sum(added.values()) <= epochs + 2


def test_a_fits_start_and_end_make_at_most_the_stated_python_calls() -> None:
    """CI guard: what a fit's start and end cost the training thread, counted: the host
    source, the spool's look for earlier runs, the model's and optimizer's facts are read on
    the sampler's and sender's threads."""
    from trainer_agent import StokerCallback

    class Counted(StokerCallback):  # type: ignore[misc, valid-type]
        calls = StokerCalls()

        def on_train_begin(self, logs: Any = None) -> None:
            with self.calls.counting():
                super().on_train_begin(logs)

        def on_train_end(self, logs: Any = None) -> None:
            with self.calls.counting():
                super().on_train_end(logs)

    model = _model()
    for _ in range(3):
        callback = Counted(server=NO_SERVER)
        callback.calls = StokerCalls()
        model.fit(callback.wrap(_dataset(10)), steps_per_epoch=5, callbacks=[callback], verbose=0)
    print(f"calls at a fit's start and end: {callback.calls.calls}")
    print(callback.calls.by_name.most_common(20))
    assert callback.calls.calls <= MAX_CALLS_PER_FIT
