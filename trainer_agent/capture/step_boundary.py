"""The boundaries of Keras's train step, seen once and handed to what needs them.

A fit's step has four boundaries: the train function is called (with a new `tf.data`
iterator, now and then), it returns, the batch-begin hook runs, the batch-end hook runs.
`StepBoundary` is the one place that sees them. It numbers the steps (one train-function call
runs `steps_per_execution` of them, fewer at an epoch's end), keeps the call in progress as an
`Execution` (begin, return, the batches it fetched) and hands each boundary to its
subscribers, given per fit to `attach`:
- `began(first_step, now, n)` at each batch-begin, once the call is numbered, and
  `computed()` once the call's compute returned (on the training thread under JAX and
  PyTorch, where the train-function wrapper sees the return, and at every batch-end): the
  profiler's step markers, added only while a capture is asked for or runs (`arm`); it closes
  a marker only on the thread that opened it;
- `closed(execution)` when the call's steps ended (the next batch-begin, validation, the
  epoch's or the fit's end; `execution.closed_by_begin` says which): the callback's timing
  records them, or, with stamped fetches, hands them to the sender thread to be matched to
  their stamps (`FitStamps.closed`: a `deque.append`, no Python frame);
- with stamped fetches (`hold_back`), the calls still held for the sender thread and what to
  do when they pass a bound (the sender fell behind: matched here, before the ring's older
  stamps are overwritten); one `len` a step;
- `step_ended(duration)` when a step that lasted `long_step_s` or longer ended, and at the
  first shorter one after it: the sampler, whose GPM windows then line up with such steps
  (docs/gpu.md); shorter steps cost one comparison;
- `ready(first_step, when)` at batch-end under JAX and PyTorch: the call's outputs are ready
  (Keras converted its logs), the end of the steps on the device's timeline;
- `ended(step, logs)` at the batch-end of every `ended_every`-th step (the first step at or
  past each multiple): the step the logs belong to, for the scalar logs;
- each watcher's `watch(iterator)` when the train function is called with a new iterator
  (TensorFlow), and `watch(None)` at `detach`: the pipeline view;
- `stamp.stamped(iterator)` for the same new iterator (TensorFlow): the iterator the train
  function is given instead, whose fetches stamp the input wait
  (trainer_agent/capture/stamped_iterator.py).

The batch hooks are hot: each boundary costs one call into this class and a loop over a
tuple of bound methods (with stamped fetches on TensorFlow: the profiler's marker at begin
and end, the `closed` append); nothing is allocated but the `Execution`.
Keras may run the batch-end hook on a thread pool (JAX, PyTorch: `async_safe`), possibly after
the next batch-begin; there it only stamps and reads. What runs on the training thread is the
batch-begin and the train function's return.
"""

import time
from collections.abc import Callable, Sized
from typing import Any

from trainer_agent.capture.input_wait import Execution, Fetch
from trainer_agent.capture.train_function import (
    IteratorWatcher,
    Stamper,
    unwatch_train_function,
    watch_train_function,
)
from trainer_agent.telemetry.environment import plain_int

Began = Callable[[int, float, int], None]
# (the calls still held, how many may be, what matches them then)
Backlog = tuple[Sized, int, Callable[[], None]]
Computed = Callable[[], None]
Closed = Callable[[Execution], None]
StepEnded = Callable[[float], None]
Ready = Callable[[int, float], None]
Ended = Callable[[int, dict[str, Any] | None], None]
# Told of an error in a boundary the train-function wrapper reports (hook name, error): the
# callback's guard, which turns the agent off. Nothing raises into the training loop.
OnError = Callable[[str, BaseException], None]


def _ignore(*args: Any) -> None:
    return None


class StepBoundary:
    """One fit's train-step boundaries, numbered and handed to the fit's subscribers.

    Between fits it is detached: it holds no model and no subscriber, and the batch hooks
    find it inactive. `step` is the next step's number; `open` the call in progress.
    """

    def __init__(self) -> None:
        self.active = False
        self.step = 0
        self.epoch_first_step = 0
        self.open: Execution | None = None
        self._ended_every = 1
        self._next_ended = 0
        # "hooks": the batch hooks time the steps (TensorFlow); "returns": the train-function
        # wrapper stamps each call's return on the training thread (JAX, PyTorch).
        self.timing = "hooks"
        self.steps_per_execution = 1
        self._steps_per_epoch: int | None = None
        self._began: tuple[Began, ...] = ()
        self._computed: tuple[Computed, ...] = ()
        self._ended: tuple[Ended, ...] = ()
        self._watchers: tuple[IteratorWatcher, ...] = ()
        self._closed: Closed = _ignore
        self._ready: Ready = _ignore
        self._on_error: OnError = _ignore
        self._step_ended: StepEnded = _ignore
        self._long_step_s = float("inf")
        self._long_before = False  # the last step told of was a long one
        self._backlog: Sized = ()
        self._backlog_limit = 0
        self._on_backlog: Callable[[], None] = _ignore

    def attach(
        self,
        model: Any,
        steps_per_epoch: int | None,
        *,
        began: tuple[Began, ...],
        computed: tuple[Computed, ...],
        closed: Closed,
        ready: Ready,
        ended: tuple[Ended, ...],
        watchers: tuple[IteratorWatcher, ...],
        on_error: OnError,
        stamp: Stamper | None = None,
        step_ended: StepEnded = _ignore,
        long_step_s: float = float("inf"),
        ended_every: int = 1,
    ) -> None:
        """Start a fit: wrap `model.train_function` and number its steps from 0. Under
        TensorFlow, `stamp` stamps the fetches of the iterators it is called with."""
        self.step = self.epoch_first_step = 0
        self.open = None
        self._began, self._computed, self._ended = began, computed, ended
        self._closed, self._ready, self._watchers = closed, ready, watchers
        self._on_error = on_error
        self._step_ended, self._long_step_s, self._long_before = step_ended, long_step_s, False
        self._ended_every, self._next_ended = max(1, ended_every), 0
        self._backlog, self._backlog_limit, self._on_backlog = (), 1, _ignore
        self._steps_per_epoch = steps_per_epoch
        self.timing = watch_train_function(model, self, self.call_returned, stamp)
        self.steps_per_execution = max(1, plain_int(getattr(model, "steps_per_execution", 1)) or 1)
        self.active = True

    def detach(self, model: Any) -> None:
        """End the fit: put Keras's train function back and let go of its iterator and of
        the subscribers (what they hold belongs to the fit)."""
        self.active = False
        self.open = None
        watchers = self._watchers
        self._began = self._computed = self._ended = self._watchers = ()
        self._closed = self._ready = self._on_error = self._step_ended = _ignore
        self._backlog, self._on_backlog = (), _ignore
        try:
            unwatch_train_function(model)
        finally:
            for watcher in watchers:
                watcher.watch(None)

    def arm(self, began: Began, computed: Computed) -> Callable[[bool], None]:
        """A switch (any thread may flip it) that adds `began` and `computed` to the
        subscribers while on: the profiler's step markers, armed only while a capture is
        asked for or runs, so that they cost the other steps nothing."""
        base_began, base_computed = self._began, self._computed

        def switch(on: bool) -> None:
            self._began = (*base_began, began) if on else base_began
            self._computed = (*base_computed, computed) if on else base_computed

        return switch

    def hold_back(self, backlog: Backlog) -> None:
        """The fit's closed calls are held for the sender thread in `backlog[0]`: once it
        holds `backlog[1]`, `backlog[2]` is called (on the training thread)."""
        self._backlog, self._backlog_limit, self._on_backlog = backlog

    def watch(self, iterator: Any) -> None:
        """The train function was called with a new iterator (TensorFlow's wrapper)."""
        for watcher in self._watchers:
            watcher.watch(iterator)

    def batch_begin(self, batch: int) -> None:
        """The batch-begin hook: the call before ended here, the next one begins."""
        now = time.perf_counter()
        self.close(now, by_begin=True)
        if not self.active:
            return
        first = self.step
        if batch == 0:
            self.epoch_first_step = first
        n = self.steps_per_execution
        if n > 1 and self._steps_per_epoch:  # the epoch's last call runs what is left
            n = max(1, min(n, self._steps_per_epoch - batch))
        # Positional: first_step, n, begin, end, epoch_start, count_wait (binds faster).
        self.open = Execution(first, n, now, now, batch == 0, first > 0)
        self.step = first + n
        for began in self._began:
            began(first, now, n)

    def batch_end(self, batch: int, logs: dict[str, Any] | None) -> None:
        """The batch-end hook, maybe run late on Keras's thread pool under JAX and PyTorch."""
        if self.timing == "hooks":
            execution = self.open
            if execution is not None:
                execution.returned = time.perf_counter()  # it trained: its compute ended
            step = self.step - 1
        else:  # its logs are converted: its outputs are ready
            epoch_first = self.epoch_first_step
            first = epoch_first + batch - self.steps_per_execution + 1
            self._ready(max(first, epoch_first), time.perf_counter())
            step = min(self.step - 1, epoch_first + batch)
        for computed in self._computed:
            computed()
        if step >= self._next_ended:
            every = self._ended_every
            self._next_ended = step - step % every + every
            for ended in self._ended:
                ended(step, logs)

    def call_returned(self, now: float, fetched: list[Fetch] | None) -> None:
        """Training thread, JAX and PyTorch: a train-function call returned at `now`, having
        fetched `fetched` (JAX; PyTorch's epoch iterator fetched before the batch-begin)."""
        try:
            for computed in self._computed:  # on the training thread, where markers open
                computed()
            execution = self.open
            if execution is None:
                return
            execution.returned = now
            if fetched:
                execution.fetched = fetched
                if len(fetched) != execution.n:  # the data ran out inside the execution
                    execution.n = len(fetched)
                    self.step = execution.first_step + execution.n
        except Exception as error:
            self._on_error("on_train_batch_end", error)

    def close(self, now: float, *, by_begin: bool = False) -> None:
        """The call in progress ended at `now`: its steps go to the `closed` subscriber."""
        execution, self.open = self.open, None
        if execution is None or not self.active:
            return
        if execution.returned is None:
            # The train function raised instead of returning: the call that found the data
            # exhausted (Keras makes one at each epoch's end when tf.data does not know the
            # epoch's length). It trained nothing, so it is no step; its time belongs to no
            # step either, like the epoch-end work around it.
            self.step = execution.first_step
            return
        execution.end = now
        execution.closed_by_begin = by_begin
        self._closed(execution)
        if len(self._backlog) >= self._backlog_limit:
            self._on_backlog()
        each = (now - execution.begin) / execution.n
        if each >= self._long_step_s or self._long_before:
            self._long_before = each >= self._long_step_s
            self._step_ended(each)

    def shorten(self, steps: int) -> None:
        """Closed calls ran out of data `steps` steps before their count (the resolver found
        no batch for them): number on from where they ended."""
        self.step -= steps
        if self.open is not None:
            self.open.first_step -= steps
