"""One fit's dispatched executions (JAX), matched to their device time off the training thread.

Under JAX the train function returns before the device has computed: a call's steps can be
timed only once its outputs are ready (the batch-end hook, which Keras calls once it has
converted the logs: `ready`). The training thread hands each closed call over (`closed`:
one `deque.append`) and notes when each call's outputs were ready; the run's sender thread
matches the calls to those times before each flush (`before_flush`), in order, on the
device's timeline (input_wait.split_dispatched), as it matches TensorFlow's stamps
(trainer_agent/capture/fit_stamps.py). The training thread matches them itself only at an
epoch's or the fit's end (every batch-end hook has run: `resolve(final=True)`), and when
`HELD` calls wait (the sender fell behind).

Each fit has its own `DispatchedSteps`, bound to its run's records: the sender of a run
that ended, still flushing while the next fit runs, matches only its own calls.
"""

import threading
from collections import deque
from collections.abc import Callable

from trainer_agent.capture.input_wait import Execution, Row, split_dispatched

# Calls held for the sender thread before the training thread matches them itself.
HELD = 8192


class DispatchedSteps:
    """The closed calls of one fit still waiting for their device time, and the times."""

    def __init__(self, done: dict[int, float], record: Callable[[list[Row]], None]) -> None:
        # When each call's outputs were ready, by its first step (the batch-end hook's).
        self._done = done
        self._record = record
        self.awaiting: deque[Execution] = deque()
        # When the device finished the call before (None at an epoch's start).
        self._free_from: float | None = None
        self._lock = threading.Lock()
        # The training thread's one call per closed call.
        self.closed: Callable[[Execution], None] = self.awaiting.append

    def backlog(self) -> tuple[deque[Execution], int, Callable[[], None]]:
        """For the step boundary: the calls held, how many may be, and what matches them
        then (on the training thread)."""
        return self.awaiting, HELD, self.before_flush

    def before_flush(self) -> None:
        """The sender thread before each flush (or the training thread past `HELD`): the
        calls whose device time is known, in order; skipped while the other thread does it."""
        self.resolve(final=False, blocking=False)

    def resolve(self, *, final: bool, blocking: bool = True) -> None:
        """Record the closed calls whose device time is known, in order. `final` (the
        epoch's or the fit's end: Keras has run every batch-end hook) records them all, a
        call without its time ending where it closed."""
        if not self._lock.acquire(blocking=blocking):
            return
        try:
            self._resolve_locked(final)
        finally:
            self._lock.release()

    def _resolve_locked(self, final: bool) -> None:
        awaiting, done_at = self.awaiting, self._done
        while awaiting:
            execution = awaiting[0]
            done = done_at.pop(execution.first_step, None)
            if done is None:
                if not final:
                    return
                done = execution.end
            awaiting.popleft()
            free_from = None if execution.epoch_start else self._free_from
            self._record(split_dispatched(execution, execution.fetched or [], free_from, done))
            self._free_from = done
        if final:
            done_at.clear()
