"""The train-function wrapper's own work per step, counted in Python calls (never timed).

CI guard: each backend's wrapper makes at most a stated number of Python calls per step
(Python functions and builtins it calls, itself included; the wrapped train function, the
user's iterator and what the fit's boundary does on return are not its own). Before this
guard the JAX wrapper made 15 a step (13 a step at steps_per_execution 32): a `Stamp` object,
`batch_size_of`'s walk of each element and a `take()` per call.
"""

import sys
from collections.abc import Callable
from typing import Any

import pytest

from trainer_agent.capture import train_function

STEPS = 1000
# Per step: TensorFlow, the wrapper's own call; PyTorch, and a clock read at the return;
# JAX, per call the wrapper and its clock read at the return, per fetch `FetchTimer.__next__`,
# two clock reads, the `next()` and one append.
MAX_CALLS_PER_STEP = {"tensorflow": 1, "torch": 2, "jax_1": 7, "jax_32": 5.1}


class _Array:
    shape = (32, 8)


class _Batches:
    """The user's iterator: a JAX-like (x, y) batch at every `next()`."""

    batch = (_Array(), _Array())

    def __iter__(self) -> "_Batches":
        return self

    def __next__(self) -> Any:
        return self.batch


def _calls_per_step(call: Callable[[], Any], outside: set[Any]) -> float:
    """Python calls Stoker's code makes per call of `call`: events in or from a frame of
    `trainer_agent`, except into the code objects in `outside` (the fakes standing for Keras's
    function, the user's iterator and the fit's subscribers)."""
    counted = 0

    def profile(frame: Any, event: str, arg: Any) -> None:
        nonlocal counted
        if event == "call":
            caller = frame.f_back
            ours = "trainer_agent" in frame.f_code.co_filename
            called_by_us = caller is not None and "trainer_agent" in caller.f_code.co_filename
            if (ours or called_by_us) and frame.f_code not in outside:
                counted += 1
        elif event == "c_call" and "trainer_agent" in frame.f_code.co_filename:
            counted += 1

    sys.setprofile(profile)
    try:
        for _ in range(STEPS):
            call()
    finally:
        sys.setprofile(None)
    return counted / STEPS


class _Watcher:
    def watch(self, iterator: Any) -> None:
        return None


def test_tensorflow_wrapper_makes_one_call_a_step() -> None:
    def keras_train_function(iterator: Any) -> None:
        return None

    wrapped = train_function._tf_wrapper(keras_train_function, _Watcher(), None)
    iterator = _Batches()
    calls = _calls_per_step(lambda: wrapped(iterator), {keras_train_function.__code__})
    assert calls <= MAX_CALLS_PER_STEP["tensorflow"] + 0.01


def test_torch_wrapper_makes_two_calls_a_step() -> None:
    def keras_train_function(data: Any) -> None:
        return None

    def returned(now: float, fetched: Any) -> None:
        return None

    wrapped = train_function._returns_wrapper(keras_train_function, returned)
    outside = {keras_train_function.__code__, returned.__code__}
    assert _calls_per_step(lambda: wrapped(1), outside) <= MAX_CALLS_PER_STEP["torch"] + 0.01


@pytest.mark.parametrize("steps_per_execution", [1, 32])
def test_jax_wrapper_and_its_fetch_timer_stay_under_the_stated_calls_per_step(
    steps_per_execution: int,
) -> None:
    fetched: list[Any] = []

    def keras_train_function(state: Any, iterator: Any) -> Any:
        for _ in range(steps_per_execution):
            next(iterator)
        return state

    def returned(now: float, stamps: Any) -> None:
        fetched.append(stamps)

    wrapped = train_function._jax_wrapper(keras_train_function, returned)
    batches = _Batches()
    outside = {keras_train_function.__code__, returned.__code__, _Batches.__next__.__code__}
    per_call = _calls_per_step(lambda: wrapped(None, batches), outside)
    # (+0.05: the first call sets the timer up for its iterator, once in 1,000 calls)
    assert per_call / steps_per_execution <= MAX_CALLS_PER_STEP[f"jax_{steps_per_execution}"] + 0.05
    # It still timed every fetch: handed over after asked, with the batch size.
    ts, size, asked = fetched[-1][-1]
    assert len(fetched[-1]) == steps_per_execution and size == 32 and ts >= asked


def test_jax_fetches_recorded_as_tuples_resolve_into_step_rows() -> None:
    from trainer_agent.capture.input_wait import Execution, StepRow, split_dispatched

    fetched: list[Any] = []

    def keras_train_function(state: Any, iterator: Any) -> Any:
        next(iterator)
        next(iterator)
        return state

    wrapped = train_function._jax_wrapper(keras_train_function, lambda now, s: fetched.append(s))
    wrapped(None, _Batches())
    execution = Execution(0, 2, begin=fetched[0][0][2], end=fetched[0][1][0], epoch_start=False)
    rows = [
        StepRow(*row)
        for row in split_dispatched(execution, fetched[0], None, done=fetched[0][1][0] + 0.01)
    ]
    assert [r.step for r in rows] == [0, 1] and [r.batch_size for r in rows] == [32, 32]
    assert all(r.wait is not None and r.wait >= 0 for r in rows)
