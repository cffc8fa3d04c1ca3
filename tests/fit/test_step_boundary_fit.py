"""The step boundary under real Keras fits: each train-function call is seen once, numbered
as Keras runs it (steps_per_execution, an epoch's short last call, the call that finds an
epoch of unknown length exhausted), and handed to the subscribers; Keras's own train function
is back once the fit ends."""

import time
from typing import Any

import numpy as np
import pytest

from trainer_agent.capture.input_wait import Execution
from trainer_agent.capture.step_boundary import StepBoundary
from trainer_agent.capture.train_function import is_watched

pytestmark = pytest.mark.tf_matrix  # also on the oldest TF and tf_keras: make test-tf-matrix

tf = pytest.importorskip("tensorflow")

BATCH = 4
FEATURES = 3


def _model(steps_per_execution: int = 1) -> "tf.keras.Model":
    model = tf.keras.Sequential([tf.keras.Input(shape=(FEATURES,)), tf.keras.layers.Dense(1)])
    model.compile(optimizer="sgd", loss="mse", steps_per_execution=steps_per_execution)
    return model


def _dataset(batches: int, *, known_length: bool = True) -> "tf.data.Dataset":
    x = np.random.default_rng(0).normal(size=(batches * BATCH, FEATURES)).astype("float32")
    ds = tf.data.Dataset.from_tensor_slices((x, x[:, :1]))
    if not known_length:
        ds = ds.filter(lambda a, b: True)  # tf.data cannot know how many batches
    return ds.batch(BATCH)


class Recorder(tf.keras.callbacks.Callback):
    """A Keras callback whose batch hooks delegate to a `StepBoundary`, as Stoker's do, and
    which subscribes to everything it hands over."""

    def __init__(self) -> None:
        super().__init__()
        self.boundary = StepBoundary()
        self.began: list[tuple[int, int]] = []
        self.closed: list[Execution] = []
        self.logged: list[int] = []
        self.computed = 0
        self.iterators: list[Any] = []
        self.errors: list[BaseException] = []
        self.watched_during_fit = False

    def on_train_begin(self, logs: Any = None) -> None:
        self.boundary.attach(
            self.model, (self.params or {}).get("steps"),
            began=(lambda first, now, n: self.began.append((first, n)),),
            computed=(self._computed,), closed=self.closed.append,
            ready=lambda first, when: None, ended=(lambda step, logs: self.logged.append(step),),
            watchers=(self,), on_error=lambda hook, error: self.errors.append(error),
        )  # fmt: skip
        self.watched_during_fit = is_watched(self.model)

    def _computed(self) -> None:
        self.computed += 1

    def watch(self, iterator: Any) -> None:
        self.iterators.append(iterator)

    def on_train_batch_begin(self, batch: int, logs: Any = None) -> None:
        self.boundary.batch_begin(batch)

    def on_train_batch_end(self, batch: int, logs: Any = None) -> None:
        self.boundary.batch_end(batch, logs)

    def on_epoch_end(self, epoch: int, logs: Any = None) -> None:
        self.boundary.close(time.perf_counter())

    def on_train_end(self, logs: Any = None) -> None:
        self.boundary.detach(self.model)


def test_a_fit_under_steps_per_execution_is_handed_over_call_by_call() -> None:
    model, recorder = _model(steps_per_execution=4), Recorder()
    model.fit(_dataset(10), epochs=2, callbacks=[recorder], verbose=0)
    expected = [(0, 4), (4, 4), (8, 2), (10, 4), (14, 4), (18, 2)]
    assert recorder.began == expected
    assert [(e.first_step, e.n) for e in recorder.closed] == expected
    assert all(e.begin <= e.returned <= e.end for e in recorder.closed if e.returned)
    assert recorder.boundary.step == 20
    assert recorder.logged == [3, 7, 9, 13, 17, 19]  # each call's last step
    assert recorder.computed == len(expected) and recorder.errors == []
    # The pipeline view saw the fit's iterators, then None; Keras's train function is back.
    assert recorder.iterators[0] is not None and recorder.iterators[-1] is None
    assert recorder.watched_during_fit and not is_watched(model)


def test_the_call_that_finds_an_epoch_of_unknown_length_exhausted_is_no_step() -> None:
    model, recorder = _model(), Recorder()
    model.fit(_dataset(6, known_length=False), epochs=2, callbacks=[recorder], verbose=0)
    assert recorder.began.count((6, 1)) == 2  # batch 6 of the first epoch found no data
    assert [e.first_step for e in recorder.closed] == list(range(12))
    assert all(e.n == 1 and e.returned is not None for e in recorder.closed)
    assert recorder.boundary.step == 12
    assert recorder.errors == []
