"""One fit's stamped fetches, turned into step rows off the training thread (TensorFlow).

The training thread only hands each closed train-function call (`Execution`) over: one
`deque.append`, no Python frame (`FitStamps.closed`). Reading the model's stamp ring (an
eager variable read: 0.2-0.3 ms inside a fit) and matching its stamps to the calls
(trainer_agent/capture/input_wait.py) happen where the records are taken: on the run's
sender thread, before each flush (`resolve`, the sender's `before_collect`), so at its pace
(every second; every 50 ms while a browser watches the run) and at the run's end.

The training thread resolves itself only where it must know the result at once:
- at an epoch's end under `steps_per_execution` > 1, where the epoch's last call may have run
  out of data after k < N steps: the resolver shortens it, and the steps after it are
  numbered from its real end (`take_shortfall`), before the next epoch numbers any;
- when a fit that raised is ended by the next one, or at exit (`resolve` on that thread).
One lock keeps the two apart; the sender thread never waits for it (`blocking=False`).

Each fit has its own `FitStamps`, held by its run's sender: a run whose sender still sends
while the next fit of the same model has begun resolves its own calls, from the same ring.
"""

import logging
import threading
import time
from collections import deque
from collections.abc import Callable

from trainer_agent.capture.input_wait import (
    Execution,
    Row,
    StampTable,
    WaitResolver,
    split_execution,
)
from trainer_agent.capture.stamped_iterator import StampRing

log = logging.getLogger("trainer_agent")


class FitStamps:
    """The calls of one fit still to be matched to their stamps, and their resolver."""

    def __init__(
        self,
        ring: StampRing,
        record: Callable[[list[Row]], None],
        batch_hint: int | None = None,
    ) -> None:
        self.ring = ring
        self._record = record
        self._batch_hint = batch_hint
        self._resolver = WaitResolver()
        self._pending: deque[Execution] = deque()
        self._lock = threading.Lock()
        # Steps the resolved calls ran short of their count (data exhausted inside a call),
        # not yet taken off the boundary's numbering.
        self._shortfall = 0
        # The first iterator of this fit (a generation of the model's ring): a read wants
        # nothing older (the fits before it on this model are other runs).
        self.since: int | None = None
        # The stamps cannot be had (the ring's read failed, or the fetches could not be
        # stamped): the calls are recorded without input wait.
        self.unstamped = False
        # The training thread's one call per closed train-function call.
        self.closed: Callable[[Execution], None] = self._pending.append

    def backlog(self, steps_per_execution: int) -> tuple[deque[Execution], int, Callable[[], None]]:
        """For the step boundary: the calls held, how many may be before the ring (which the
        sender thread reads every second, or 50 ms) could overwrite stamps not read yet, and
        what matches them then, on the training thread: half the ring's fetches."""
        limit = max(1, self.ring.size // 2 // max(1, steps_per_execution))
        return self._pending, limit, self._resolve_overdue

    def _resolve_overdue(self) -> None:
        self.resolve(blocking=False)

    def resolve(self, *, blocking: bool = True) -> None:
        """Read the ring and record the steps of every call handed over so far, with their
        input wait. `blocking=False` (the sender thread): skip it while the training thread
        resolves."""
        if not self._pending or not self._lock.acquire(blocking=blocking):
            return
        try:
            self._resolve_locked()
        finally:
            self._lock.release()

    def _resolve_locked(self) -> None:
        pending = self._pending
        executions = [pending.popleft() for _ in range(len(pending))]
        if not executions:
            return
        if self.unstamped:
            self._record([row for e in executions for row in split_execution(e, None)])
            return
        # The stamps are in TensorFlow's wall clock; the offset to perf_counter is taken
        # afresh at every read, so a clock adjustment during a long run cannot skew waits.
        wall_to_perf_s = time.time() - time.perf_counter()
        try:
            stamps = self.ring.read(
                wall_to_perf_s,
                after=self._resolver.cursor,
                batch_hint=self._batch_hint,
                since=self.since or 1,
            )
        except Exception:
            log.exception("Stoker could not read input stamps; input wait is not measured")
            self.unstamped = True
            stamps = StampTable.of({})
        counted = sum(execution.n for execution in executions)
        rows = self._resolver.resolve(executions, stamps)
        # The resolver shortens a call that ran out of data.
        self._shortfall += counted - sum(execution.n for execution in executions)
        self._record(rows)

    def started(self) -> None:
        """The train function is about to fetch from a new iterator (on the training thread,
        between two calls): its generation is noted in the ring, by time."""
        generation = self.ring.started()
        if self.since is None:
            self.since = generation

    def without_stamps(self) -> None:
        """The fetches could not be stamped: what is handed over is recorded without input
        wait, now and from here on."""
        with self._lock:
            self.unstamped = True
            self._resolve_locked()

    def take_shortfall(self) -> int:
        """The steps the calls resolved so far ran short of their count, once."""
        with self._lock:
            shortfall, self._shortfall = self._shortfall, 0
            return shortfall
