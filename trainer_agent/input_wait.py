"""Input wait in `model.fit`: stamp each element as the pipeline hands it over, match to steps.

`StampRing.wrap(dataset)` appends one synchronous `scan` stage at the very end of a
`tf.data` pipeline. For every element it writes a row `(tf.timestamp(), generation, index,
batch_size)` into a `tf.Variable` ring buffer; `generation` counts the iterators created
over the dataset (Keras makes a new one per epoch), `index` is the element's position in
its iterator. The element itself is untouched. Writing a variable needs no GIL and no
Python; the training thread reads the ring only every ~50 steps (or once a second).

`WaitResolver` is pure Python: it turns the callback's step begin/end times and the stamps
into per-step rows. Step k asked for its element at its begin `b`; the element was ready at
its stamp `s`; the wait is `max(0, s - b)`. With `steps_per_execution = N` the callback sees
one begin and end per N steps; the N elements' stamps and a per-step compute time `c`
(solved so that the simulated execution ends when it really ended) give each step's wait.
"""

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

DEFAULT_RING_SIZE = 2048

# Row layout in the ring.
_TS, _GEN, _INDEX, _BATCH = range(4)


@dataclass
class Stamp:
    ts: float  # perf_counter seconds
    batch_size: int | None


@dataclass
class Execution:
    """One call of Keras's train function: `n` steps between one batch begin and the next."""

    first_step: int
    n: int
    begin: float
    end: float
    epoch_start: bool
    count_wait: bool = True


@dataclass
class StepRow:
    step: int
    start: float
    dur: float
    wait: float | None
    batch_size: int | None


class StampRing:
    """The TensorFlow half: the ring variables and the dataset stage that writes them."""

    def __init__(self, size: int = DEFAULT_RING_SIZE) -> None:
        import tensorflow as tf

        self.size = size
        with tf.init_scope(), tf.device("/CPU:0"):
            self._ring = tf.Variable(
                tf.zeros([size, 4], tf.float64), trainable=False, name="stoker_stamps"
            )
            self._count = tf.Variable(tf.constant(0, tf.int64), trainable=False)
            self._generation = tf.Variable(tf.constant(0, tf.int64), trainable=False)

    def wrap(self, dataset: Any) -> Any:
        """Return `dataset` with the stamping stage appended; elements pass through unchanged."""
        import tensorflow as tf

        ring, count, generation, size = self._ring, self._count, self._generation, self.size

        def stamp(state: tuple[Any, Any], element: Any) -> tuple[tuple[Any, Any], Any]:
            gen, index = state
            # A new iterator starts at index 0: it takes the next generation number. (No
            # tf.cond: an add of 0 for every other element is cheaper than a branch.)
            first = tf.equal(index, 0)
            gen = tf.where(first, generation.assign_add(tf.cast(first, tf.int64)), gen)
            slot = tf.math.floormod(count.assign_add(1) - 1, size)
            leaves = tf.nest.flatten(element)
            batch = tf.constant(-1.0, tf.float64)
            shape = getattr(leaves[0], "shape", None) if leaves else None
            if shape is not None and shape.rank:
                batch = tf.cast(tf.shape(leaves[0])[0], tf.float64)
            row = tf.stack(
                [tf.timestamp(), tf.cast(gen, tf.float64), tf.cast(index, tf.float64), batch]
            )
            with tf.control_dependencies([ring.scatter_nd_update([[slot]], [row])]):
                index = tf.identity(index) + 1
            return (gen, index), element

        initial = (tf.constant(0, tf.int64), tf.constant(0, tf.int64))
        return dataset.scan(initial, stamp)

    def read(self, wall_to_perf_s: float, after: tuple[int, int] | None = None) -> "StampTable":
        """The stamps still in the ring, in perf_counter time.

        With `after=(generation, index)`, only that iterator's elements from `index` on and
        those of newer iterators: what the resolver can still need.
        """
        rows = self._ring.numpy()
        gens = rows[:, _GEN]
        if after is None:
            keep = gens > 0
        else:
            gen, index = after
            keep = (gens > gen) | ((gens == gen) & (rows[:, _INDEX] >= index))
        rows = rows[keep]
        rows[:, _TS] -= wall_to_perf_s
        return StampTable(rows)


class StampTable:
    """Stamps keyed by (generation, index); rows become `Stamp`s only when asked for."""

    def __init__(self, rows: Any) -> None:
        self._rows = rows
        keys = zip(
            rows[:, _GEN].astype("int64").tolist(),
            rows[:, _INDEX].astype("int64").tolist(),
            strict=True,
        )
        self._position = {key: i for i, key in enumerate(keys)}

    @classmethod
    def of(cls, stamps: dict[tuple[int, int], Stamp]) -> "StampTable":
        """A table from plain stamps (tests, and callers without TensorFlow)."""
        table = cls.__new__(cls)
        table._rows = [
            (s.ts, gen, index, -1 if s.batch_size is None else s.batch_size)
            for (gen, index), s in stamps.items()
        ]
        table._position = {key: i for i, key in enumerate(stamps)}
        return table

    def get(self, key: tuple[int, int]) -> Stamp | None:
        i = self._position.get(key)
        if i is None:
            return None
        row = self._rows[i]
        return Stamp(float(row[_TS]), int(row[_BATCH]) if row[_BATCH] >= 0 else None)

    def first_stamps(self) -> dict[int, float]:
        """Generation → ready time of its first element, for the generations still held."""
        return {
            gen: float(self._rows[i][_TS])
            for (gen, index), i in self._position.items()
            if index == 0
        }


def _solve_compute_s(begin: float, end: float, ready: Sequence[float]) -> float:
    """Per-step compute time c such that the simulated execution ends at `end`."""

    def simulated_end(c: float) -> float:
        t = begin
        for r in ready:
            t = max(t, r) + c
        return t

    low, high = 0.0, max(0.0, (end - begin) / len(ready))
    if simulated_end(high) <= end:
        return high
    for _ in range(25):
        mid = (low + high) / 2
        if simulated_end(mid) > end:
            high = mid
        else:
            low = mid
    return low


def split_execution(execution: Execution, stamps: Sequence[Stamp] | None) -> list[StepRow]:
    """The execution's steps as rows, with waits when every element's stamp is known."""
    n, begin, end = execution.n, execution.begin, execution.end
    if stamps is None or not execution.count_wait:
        each = (end - begin) / n
        sizes = [s.batch_size for s in stamps] if stamps else [None] * n
        return [
            StepRow(execution.first_step + j, begin + j * each, each, None, sizes[j])
            for j in range(n)
        ]
    ready = [s.ts for s in stamps]
    compute = _solve_compute_s(begin, end, ready) if n > 1 else 0.0
    rows = []
    t = begin
    for j, stamp in enumerate(stamps):
        wait = max(0.0, stamp.ts - t)
        last = j == n - 1
        dur = (end - t) if last else wait + compute
        rows.append(StepRow(execution.first_step + j, t, dur, wait, stamp.batch_size))
        t += dur
    return rows


class WaitResolver:
    """Matches executions to the elements they consumed, in order, across iterators."""

    def __init__(self) -> None:
        self._generation: int | None = None
        self._next_index = 0

    @property
    def cursor(self) -> tuple[int, int] | None:
        """(generation, index) of the next element to match; None before the first."""
        return None if self._generation is None else (self._generation, self._next_index)

    def resolve(self, executions: Sequence[Execution], stamps: StampTable) -> list[StepRow]:
        firsts = stamps.first_stamps()
        rows: list[StepRow] = []
        for execution in executions:
            if execution.epoch_start:
                self._maybe_switch_iterator(execution, firsts)
            consumed = self._take(execution.n, stamps)
            rows.extend(split_execution(execution, consumed))
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

    def _take(self, n: int, stamps: StampTable) -> list[Stamp] | None:
        if self._generation is None:
            return None
        first = self._next_index
        self._next_index += n
        taken = [stamps.get((self._generation, first + j)) for j in range(n)]
        if any(s is None for s in taken):
            return None
        return [s for s in taken if s is not None]
