"""The step boundary's numbering and hand-offs, driven directly (no TensorFlow, no fit).

The model is a plain object with the two attributes the boundary reads (`train_function`,
`steps_per_execution`); the fit tier drives the same class under real Keras fits
(tests/fit/test_step_boundary_fit.py)."""

import threading
from typing import Any

import pytest

from trainer_agent.capture.input_wait import Execution, Stamp
from trainer_agent.capture.step_boundary import StepBoundary
from trainer_agent.capture.train_function import is_watched


class Model:
    def __init__(self, steps_per_execution: int = 1) -> None:
        self.steps_per_execution = steps_per_execution
        self.calls: list[Any] = []
        self.train_function = self.calls.append


class Subscribers:
    """Records what the boundary hands over, in order."""

    def __init__(self) -> None:
        self.events: list[tuple[Any, ...]] = []
        self.closed_calls: list[Execution] = []
        self.errors: list[tuple[str, BaseException]] = []

    def began(self, first_step: int, now: float, n: int) -> None:
        self.events.append(("began", first_step, n))

    def computed(self) -> None:
        self.events.append(("computed", threading.get_ident()))

    def closed(self, execution: Execution) -> None:
        self.closed_calls.append(execution)
        self.events.append(("closed", execution.first_step, execution.n, execution.closed_by_begin))

    def ready(self, first_step: int, when: float) -> None:
        self.events.append(("ready", first_step))

    def ended(self, step: int, logs: dict[str, Any] | None) -> None:
        self.events.append(("ended", step, logs))

    def watch(self, iterator: Any) -> None:
        self.events.append(("watch", iterator))

    def on_error(self, hook: str, error: BaseException) -> None:
        self.errors.append((hook, error))


def attached(model: Model, steps_per_epoch: int | None = None) -> tuple[StepBoundary, Subscribers]:
    boundary, seen = StepBoundary(), Subscribers()
    boundary.attach(
        model, steps_per_epoch, began=(seen.began,), computed=(seen.computed,),
        closed=seen.closed, ready=seen.ready, ended=(seen.ended,), watchers=(seen,),
        on_error=seen.on_error,
    )  # fmt: skip
    return boundary, seen


def train(boundary: StepBoundary, model: Model, batch: int, iterator: Any = "epoch-0") -> None:
    """One call of the train function between its batch hooks, as Keras makes it."""
    boundary.batch_begin(batch)
    model.train_function(iterator)
    boundary.batch_end(batch, {"loss": 0.5})


def test_each_call_is_numbered_and_the_last_of_an_epoch_runs_only_its_remaining_steps() -> None:
    model = Model(steps_per_execution=4)
    boundary, seen = attached(model, steps_per_epoch=10)
    for _epoch in range(2):
        for batch in (0, 4, 8):
            train(boundary, model, batch)
        boundary.close(1.0)  # the epoch's end
    began = [event[1:] for event in seen.events if event[0] == "began"]
    assert began == [(0, 4), (4, 4), (8, 2), (10, 4), (14, 4), (18, 2)]
    assert [(e.first_step, e.n) for e in seen.closed_calls] == began
    assert [e.epoch_start for e in seen.closed_calls] == [True, False, False] * 2
    assert [e.count_wait for e in seen.closed_calls] == [False] + [True] * 5
    assert boundary.step == 20 and boundary.epoch_first_step == 10
    # A batch-begin closes the call before it; the epoch's end closes the last.
    assert [e[3] for e in seen.events if e[0] == "closed"] == [True, True, False] * 2


def test_a_call_that_never_returned_is_no_step_and_the_numbering_goes_on_from_it() -> None:
    """The call that found an epoch of unknown length exhausted raises inside Keras: no
    batch-end follows its batch-begin, and the epoch's end drops it."""
    model = Model()
    boundary, seen = attached(model)
    for batch in range(3):
        train(boundary, model, batch)
    boundary.batch_begin(3)  # the train function raises: no batch-end
    boundary.close(2.0)
    assert [e.first_step for e in seen.closed_calls] == [0, 1, 2]
    assert boundary.step == 3
    boundary.batch_begin(0)  # the next epoch numbers on from the last step that trained
    assert seen.events[-1] == ("began", 3, 1)


def test_batch_end_stamps_the_return_closes_markers_then_hands_the_logs_step() -> None:
    model = Model(steps_per_execution=2)
    boundary, seen = attached(model, steps_per_epoch=10)
    train(boundary, model, 0)
    execution = boundary.open
    assert execution is not None and execution.returned is not None
    assert seen.events[1:] == [
        ("watch", "epoch-0"), ("computed", threading.get_ident()), ("ended", 1, {"loss": 0.5}),
    ]  # fmt: skip


def test_the_pipeline_view_is_told_each_new_iterator_once_and_none_at_detach() -> None:
    model = Model()
    original = model.train_function
    boundary, seen = attached(model)
    assert is_watched(model)
    for batch, iterator in enumerate(["epoch-0", "epoch-0", "epoch-1"]):
        train(boundary, model, batch, iterator)
    boundary.detach(model)
    assert model.train_function == original and not is_watched(model)
    assert model.calls == ["epoch-0", "epoch-0", "epoch-1"]
    assert [e[1] for e in seen.events if e[0] == "watch"] == ["epoch-0", "epoch-1", None]


def test_a_detached_boundary_hands_nothing_over_and_holds_nothing_of_the_fit() -> None:
    model = Model()
    boundary, seen = attached(model)
    train(boundary, model, 0)
    boundary.detach(model)
    count = len(seen.events)
    boundary.batch_begin(1)
    boundary.batch_end(1, {"loss": 0.5})
    boundary.call_returned(3.0, None)
    boundary.close(3.0)
    assert len(seen.events) == count and boundary.open is None
    assert not boundary.active


def test_a_return_stamps_the_call_and_fewer_fetches_than_steps_shorten_it() -> None:
    """JAX: the wrapper reports each return with the batches the call fetched; an epoch of
    unknown length runs out inside the last call."""
    model = Model(steps_per_execution=4)
    boundary, seen = attached(model)
    boundary.batch_begin(0)
    fetched = [Stamp(1.0, 8, 0.9), Stamp(1.1, 8, 1.05)]
    boundary.call_returned(1.5, fetched)
    execution = boundary.open
    assert execution is not None
    assert (execution.returned, execution.fetched, execution.n) == (1.5, fetched, 2)
    assert boundary.step == 2
    assert ("computed", threading.get_ident()) in seen.events


def test_an_error_in_a_subscriber_at_the_return_goes_to_the_guard_not_to_training() -> None:
    model = Model()
    boundary = StepBoundary()
    errors: list[tuple[str, BaseException]] = []

    def failing() -> None:
        raise RuntimeError("broken marker")

    boundary.attach(
        model, None, began=(), computed=(failing,), closed=lambda e: None,
        ready=lambda s, t: None, ended=(), watchers=(), on_error=lambda h, e: errors.append((h, e)),
    )  # fmt: skip
    boundary.batch_begin(0)
    boundary.call_returned(1.0, None)  # does not raise
    assert [(hook, str(error)) for hook, error in errors] == [
        ("on_train_batch_end", "broken marker")
    ]


def test_shorten_numbers_on_from_where_the_calls_ran_out() -> None:
    model = Model(steps_per_execution=4)
    boundary, _ = attached(model)
    train(boundary, model, 0)
    train(boundary, model, 4)
    open_call = boundary.open
    assert open_call is not None and open_call.first_step == 4 and boundary.step == 8
    boundary.shorten(3)  # the first call trained one step, not four
    assert open_call.first_step == 1 and boundary.step == 5


@pytest.mark.parametrize("steps_per_execution", [0, None, "4"])
def test_an_odd_steps_per_execution_counts_as_at_least_one(steps_per_execution: Any) -> None:
    model = Model()
    model.steps_per_execution = steps_per_execution
    boundary, seen = attached(model)
    boundary.batch_begin(0)
    expected = 4 if steps_per_execution == "4" else 1
    assert seen.events[-1] == ("began", 0, expected)
