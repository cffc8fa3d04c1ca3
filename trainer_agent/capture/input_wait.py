"""Input wait in `model.fit`: match the stamps of each fetch to the steps that consumed them.

The stamps come from the train function's own fetches (TensorFlow: the stamped iterator of
trainer_agent/capture/stamped_iterator.py, read from its ring every ~400 steps or second; JAX: the
`FetchTimer` around each `next()`), one per element: when the step asked for it (the
request) and when it was handed over. The element itself is untouched.

`WaitResolver` is pure Python: it turns the callback's step begin/end times and the stamps
into per-step rows. A step's wait is hand-over - request: the time the fetch blocked, so
the ~1 ms between `on_train_batch_begin` and the fetch inside the train function is not
counted. With `steps_per_execution = N` the callback sees one begin and end per N steps,
and the steps' fetches overlap their compute: the wait of each step is then the time the
chain of steps sat idle for its element (`split_execution`; the train function's return
path, once per call, is no step's compute). When a request precedes the step (an element
pulled ahead), the wait counts from the step's begin at the earliest.
"""

import itertools
import statistics
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, NamedTuple

# Row layout of a `StampTable`: (generation, index) is the element's key, the generation
# its iterator (1, 2, ... in the order the train function saw them).
_REQ, _TS, _GEN, _INDEX, _BATCH = range(5)
# Executions whose call path (begin to first request) estimates the return path, for N > 1.
CALL_PATHS_KEPT = 15


class Stamp(NamedTuple):
    """One fetch's stamp, its fields by name. What the matching makes and passes is the same
    fields as a plain tuple (`Fetch`), and what it returns plain `Row`s, not these classes:
    Python's cyclic GC stops tracking a plain tuple of numbers at its first collection, but
    tracks an instance of any class (a NamedTuple's included) for its life. Thousands of
    those alive at once on the sender thread (a second of steps) were carried into the
    oldest generation, and every few seconds a full collection of the process's ~300,000
    TensorFlow objects stalled whichever thread triggered it for ~130 ms, the training
    thread as often as not (bench/LOG.md, "Issue 37, fourth pass")."""

    ts: float  # perf_counter seconds: the element was handed over to the consumer
    batch_size: int | None
    requested: float | None = None  # perf_counter seconds: the consumer asked for it


# A `Stamp`'s fields as a plain tuple: (ts, batch_size, requested).
Fetch = tuple[float, int | None, float | None]


@dataclass(slots=True)  # one is made at every batch-begin: slots make it cheaper
class Execution:
    """One call of Keras's train function: `n` steps between one batch begin and the next,
    opened and closed by the fit's `StepBoundary` (trainer_agent/capture/step_boundary.py)."""

    first_step: int
    n: int
    begin: float
    end: float
    epoch_start: bool
    count_wait: bool = True
    # When the train function returned (its batch-end hook, or the train-function wrapper
    # under JAX and PyTorch), if known: the steps' compute ends there; what follows until
    # `end` (Keras's epoch-end work) is no step's compute.
    returned: float | None = None
    # The stamps of the batches the train function fetched itself, timed around each
    # `next()` in Python (JAX: `train_function.FetchTimer`); None where the ring times them.
    fetched: list[Fetch] | None = None
    # Closed by the next batch-begin (not by validation or an epoch's or the fit's end).
    closed_by_begin: bool = False


class StepRow(NamedTuple):
    """One step's row, its fields by name (tests, readers); the matching returns the same
    fields as a plain tuple (`Row`: see `Stamp` for why)."""

    step: int
    start: float  # perf_counter seconds
    dur: float
    wait: float | None
    batch_size: int | None


# A `StepRow`'s fields as a plain tuple: (step, start, dur, wait, batch_size).
Row = tuple[int, float, float, float | None, int | None]


def batch_size_of(element: Any) -> int | None:
    """The leading dimension of the element's first array, when it has a known one."""
    leaf = element
    while isinstance(leaf, tuple | list) and leaf:
        leaf = leaf[0]
    if isinstance(leaf, dict) and leaf:
        leaf = next(iter(leaf.values()))
    shape = getattr(leaf, "shape", None)
    try:
        return int(shape[0]) if shape is not None and len(shape) > 0 else None
    except (TypeError, ValueError):
        return None


class StampTable:
    """Stamps keyed by (generation, index), kept as columns of plain floats (one list each,
    not one per row); a row becomes a `Fetch` only when asked for."""

    def __init__(self, rows: Any) -> None:
        # Plain floats: reading NumPy scalars one by one costs more than this one conversion.
        columns = rows.T.tolist() if len(rows) else [[] for _ in range(5)]
        self._requested, self._ts, self._batch = columns[_REQ], columns[_TS], columns[_BATCH]
        self._position = {
            (int(gen), int(index)): i
            for i, (gen, index) in enumerate(zip(columns[_GEN], columns[_INDEX], strict=True))
        }

    @classmethod
    def of(cls, stamps: dict[tuple[int, int], Stamp]) -> "StampTable":
        """A table from plain stamps (tests, and callers without TensorFlow)."""
        table = cls.__new__(cls)
        table._requested = [
            float("nan") if s.requested is None else s.requested for s in stamps.values()
        ]
        table._ts = [s.ts for s in stamps.values()]
        table._batch = [-1 if s.batch_size is None else s.batch_size for s in stamps.values()]
        table._position = {key: i for i, key in enumerate(stamps)}
        return table

    def get(self, key: tuple[int, int]) -> Fetch | None:
        i = self._position.get(key)
        if i is None:
            return None
        requested, batch = self._requested[i], self._batch[i]
        return (
            self._ts[i],
            int(batch) if batch >= 0 else None,
            None if requested != requested else requested,  # NaN: not known
        )

    def first_stamps(self) -> dict[int, float]:
        """Generation → ready time of its first element, for the generations still held."""
        return {gen: self._ts[i] for (gen, index), i in self._position.items() if index == 0}


def _solve_compute_s(begin: float, end: float, ready: Sequence[float]) -> float:
    """Per-step compute time c such that the simulated execution ends at `end`.

    The chain (step j computes from max(its element's ready time, the end of step j - 1)
    for c) ends at max(begin + n c, max_j(ready_j + (n - j) c)): a maximum of lines rising
    in c. It reaches `end` where the first of them does, so c is the least of
    (end - begin) / n and (end - ready_j) / (n - j), and 0 if an element came after `end`.
    One pass over the stamps (a bisection took 25)."""
    n = len(ready)
    c = (end - begin) / n
    for j, r in enumerate(ready):
        c = min(c, (end - r) / (n - j))
    return max(0.0, c)


def call_path_s(execution: Execution, stamps: Sequence[Fetch]) -> float | None:
    """The time from the execution's begin (the batch-begin hook) to its first request: the
    train function's call path, when the step asked for its own element."""
    first = stamps[0][2] if stamps else None
    if first is None or first < execution.begin:  # pulled ahead (a device prefetch)
        return None
    return first - execution.begin


def split_execution(
    execution: Execution, stamps: Sequence[Fetch] | None, return_path_s: float | None = None
) -> list[Row]:
    """The execution's steps as rows, with waits when every element's stamp is known.

    One step (N = 1) waited from its request, or the begin if later, to the hand-over.

    With N > 1 steps in one execution, TensorFlow fetches the next element while the current
    step computes (Keras's execution loop asks for element j + 1 as soon as j is handed over),
    so the time a fetch blocked overlaps compute and summing it counts waits that cost
    nothing. The time actually lost is the time the chain of steps sat idle for want of
    input: with one compute time c per step (solved so that the chain ends when the train
    function returned), step j computes from max(its hand-over, the end of step j - 1) for c,
    and it waited from the end of step j - 1 (or its request, if later) to its hand-over.
    Where the steps themselves ask in turn, this equals the blocked time. The chain ends
    `return_path_s` before the train function returned: its return path is no step's compute.
    Not stamped, it is taken to cost what its call path does (`call_path_s`; the resolver
    passes the median of recent executions', so one that traced again does not count).
    """
    n, begin, end = execution.n, execution.begin, execution.end
    if n == 1 and stamps and execution.count_wait:  # the common case, without the chain
        ts, batch_size, requested = stamps[0]
        idle_from = begin if requested is None else max(begin, requested)
        return [(execution.first_step, begin, end - begin, max(0.0, ts - idle_from), batch_size)]
    if stamps is None or not execution.count_wait:
        each = (end - begin) / n
        sizes = [s[1] for s in stamps] if stamps else [None] * n
        return [
            (execution.first_step + j, begin + j * each, each, None, sizes[j]) for j in range(n)
        ]
    compute = 0.0
    if n > 1:
        compute_end = end if execution.returned is None else min(end, execution.returned)
        # The train function's return path (its loop's exit, its outputs, Keras's Python up
        # to the batch-end hook) follows the last step's compute once per call: no step's
        # compute. Solved into c, it counted N - 1 times too often, each time as wait missed.
        path = call_path_s(execution, stamps) if return_path_s is None else return_path_s
        last = max(begin, stamps[-1][0])
        compute_end -= min(path or 0.0, max(0.0, compute_end - last))
        compute = _solve_compute_s(begin, compute_end, [s[0] for s in stamps])
    rows: list[Row] = []
    t = begin  # when the previous step's compute ended: this step's start
    first = execution.first_step
    for j, (ts, batch_size, requested) in enumerate(stamps):
        idle_from = t if requested is None else max(t, requested)
        step_end = end if j == n - 1 else max(t, ts) + compute
        rows.append((first + j, t, step_end - t, max(0.0, ts - idle_from), batch_size))
        t = step_end
    return rows


def split_dispatched(
    execution: Execution, stamps: Sequence[Fetch], free_from: float | None, done: float
) -> list[Row]:
    """The execution's steps when the backend dispatches asynchronously (JAX): the train
    function returns before the device has computed, the host may run steps ahead, and the
    next batch is fetched while the device still computes.

    The steps are timed on the device's timeline: the execution runs from when the device
    finished the one before (`free_from`; None when nothing was in flight, an epoch's start:
    then its begin) to when its outputs were ready (`done`, seen by the batch-end hook), so a
    host that ran ahead does not show instant steps followed by one long one. A step waited
    only while the device sat idle for its batch: from when the device was free (or the
    step's request, if later) to the batch's hand-over. Within an execution of N > 1 steps
    the device's chain is solved as in `split_execution`. Each row holds its wait."""
    n = execution.n
    start = execution.begin if free_from is None else free_from
    end = max(done, start)
    compute = 0.0
    if n > 1:
        compute = _solve_compute_s(start, end, [s[0] for s in stamps])
    waits: list[float] = []
    free = start
    for ts, _, requested in stamps:  # plain tuples from `FetchTimer`, or `Stamp`s
        idle_from = free if requested is None else max(free, requested)
        waits.append(max(0.0, ts - idle_from))
        free = max(free, ts) + compute
    total, waited = end - start, sum(waits)
    scale = min(1.0, total / waited) if waited > 0 else 1.0
    rest = (total - waited * scale) / n
    rows: list[Row] = []
    t = start
    for j, (stamp, wait) in enumerate(zip(stamps, waits, strict=True)):
        dur = wait * scale + rest if j < n - 1 else end - t
        shown = wait * scale if execution.count_wait else None
        rows.append((execution.first_step + j, t, dur, shown, stamp[1]))
        t += dur
    return rows


class WaitResolver:
    """Matches executions to the elements they consumed, in order, across iterators."""

    def __init__(self) -> None:
        self._generation: int | None = None
        self._next_index = 0
        # The call paths of recent executions with stamps (see `split_execution`).
        self._call_paths: deque[float] = deque(maxlen=CALL_PATHS_KEPT)

    @property
    def cursor(self) -> tuple[int, int] | None:
        """(generation, index) of the next element to match; None before the first."""
        return None if self._generation is None else (self._generation, self._next_index)

    def resolve(self, executions: Sequence[Execution], stamps: StampTable) -> list[Row]:
        firsts = stamps.first_stamps()
        rows: list[Row] = []
        for execution in executions:
            if execution.epoch_start:
                self._maybe_switch_iterator(execution, firsts)
            consumed = self._take(execution, stamps)
            path = None
            if consumed is not None and execution.n > 1:
                own = call_path_s(execution, consumed)
                if own is not None and execution.count_wait:  # not the one that traced
                    self._call_paths.append(own)
                if self._call_paths:
                    path = statistics.median(self._call_paths)
            rows.extend(split_execution(execution, consumed, path))
        return rows

    def _maybe_switch_iterator(self, execution: Execution, firsts: dict[int, float]) -> None:
        # A new iterator's first element was stamped before this step ended; the newest such
        # iterator is the one this epoch reads (older ones were warm-up or earlier epochs).
        candidates = [
            (ts, gen)
            for gen, ts in firsts.items()
            if ts <= execution.end and (self._generation is None or gen > self._generation)
        ]
        if candidates:
            self._generation = max(candidates)[1]
            self._next_index = 0

    def _take(self, execution: Execution, stamps: StampTable) -> Sequence[Fetch] | None:
        """The stamps of the elements `execution` consumed, in order; None if not all known.

        An execution of N > 1 steps that ran out of data after k elements (the last of an
        epoch whose length tf.data does not know) consumed the first k and no later element
        exists: it is shortened to its k steps. (An overwritten stamp is an older one.)
        """
        if self._generation is None:
            return None
        first, n = self._next_index, execution.n
        if n == 1:  # one step per call: its element, if its stamp is still held
            self._next_index = first + 1
            stamp = stamps.get((self._generation, first))
            return None if stamp is None else (stamp,)
        taken = [stamps.get((self._generation, first + j)) for j in range(n)]
        if None not in taken:  # every stamp held: the common case
            self._next_index += n
            return taken  # type: ignore[return-value]
        present = sum(1 for _ in itertools.takewhile(lambda s: s is not None, taken))
        if 0 < present < n and all(s is None for s in taken[present:]):
            execution.n = n = present
            taken = taken[:present]
        self._next_index += n
        if any(s is None for s in taken):
            return None
        return [s for s in taken if s is not None]
