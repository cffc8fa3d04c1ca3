"""Input wait in `model.fit`: time each hand-over at the end of the pipeline, match to steps.

`StampRing.wrap(dataset)` appends a synchronous stamping stage to a `tf.data` pipeline, with
tf.data's automatic prefetch placed *before* it instead of after it. When the training step
asks for an element, the stage takes `tf.timestamp()` (the request), then pulls the element
from the prefetch buffer, waiting if it is not there yet, then takes another timestamp (the
hand-over). Both, with the iterator's generation (Keras makes one iterator per epoch), the
element's index in its iterator and its batch size, go into one row of a `tf.Variable` ring
buffer. The element itself is untouched. The stage's functions run inline on the calling
thread (no inter-op thread pool hand-off), so it costs a few µs per element and needs no GIL
and no Python; the training thread reads the ring only every ~50 steps (or once a second).

`WaitResolver` is pure Python: it turns the callback's step begin/end times and the stamps
into per-step rows. A step's wait is hand-over - request: the time `IteratorGetNext` blocked,
measured in the graph, so the ~1 ms between `on_train_batch_begin` and the fetch inside the
train function is not counted. With `steps_per_execution = N` the callback sees one begin and
end per N steps, and the steps' fetches overlap their compute: the wait of each step is then
the time the chain of steps sat idle for its element (`split_execution`; the train
function's return path, once per call, is no step's compute). When a later stage
(e.g. a `tf.distribute` device prefetch) pulls elements ahead of the step, a request can
precede the step; then the wait counts from the step's begin at the earliest.
"""

import itertools
import statistics
import threading
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

T = TypeVar("T")

DEFAULT_RING_SIZE = 2048

# Row layout in the ring.
_REQ, _TS, _GEN, _INDEX, _BATCH = range(5)
_COLUMNS = 5
# Executions whose call path (begin to first request) estimates the return path, for N > 1.
CALL_PATHS_KEPT = 15
# Ring offset between consecutive iterators (odd, so generations spread over the ring).
_GENERATION_STRIDE = 1021

# Dataset classes tf.data counts as asynchronous: it injects no prefetch after them.
_ASYNC_DATASETS = {
    "_PrefetchDataset",
    "_ParallelMapDataset",
    "ParallelInterleaveDataset",
    "_ParallelBatchDataset",
    "_MapAndBatchDataset",
}


@dataclass
class Stamp:
    ts: float  # perf_counter seconds: the element was handed over to the consumer
    batch_size: int | None
    requested: float | None = None  # perf_counter seconds: the consumer asked for it


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
    fetched: list["Stamp"] | None = None


@dataclass
class StepRow:
    step: int
    start: float
    dur: float
    wait: float | None
    batch_size: int | None


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


class StampRing:
    """The TensorFlow half: the ring variables and the dataset stage that writes them."""

    def __init__(self, size: int = DEFAULT_RING_SIZE) -> None:
        import tensorflow as tf

        self.size = size

        def make() -> tuple[Any, Any]:
            with tf.init_scope(), tf.device("/CPU:0"):
                ring = tf.Variable(
                    tf.zeros([size, _COLUMNS], tf.float64), trainable=False, name="stoker_stamps"
                )
                return ring, tf.Variable(tf.constant(0, tf.int64), trainable=False)

        self._ring, self._generation = outside_any_strategy(make)

    def wrap(self, dataset: Any) -> Any:
        """Return `dataset` with the stamping stage appended; elements pass through unchanged."""
        import tensorflow as tf

        ring, generation, size = self._ring, self._generation, self.size
        if _would_inject_prefetch(dataset):
            # What tf.data would have appended at the end goes before the stage, so the stage
            # sees the consumer's own requests (the wrapped pipeline disables the injection).
            dataset = dataset.prefetch(tf.data.AUTOTUNE)
        batch_size = _static_batch_size(dataset)

        # One per element the consumer asks for: its index in this iterator and the request
        # time, taken when the zip below asks this input, before it asks for the element.
        # (Not Dataset.counter(): it is a `scan`, whose function runs on the inter-op pool.)
        requests = _requests()

        @tf.autograph.experimental.do_not_convert  # graph code already: no AutoGraph pass
        def stamp(request: tuple[Any, Any], element: Any) -> Any:
            # Everything here runs on the step's critical path, once per element: few ops.
            # Stateful ops run in program order and always run, though the output does not
            # depend on them.
            index, requested = request
            handed_over = tf.timestamp()
            # Every iterator (Keras makes one per epoch) numbers its elements from 0: the
            # first element opens the next generation.
            gen = generation.assign_add(tf.cast(tf.equal(index, 0), tf.int64))
            if batch_size is None:
                leaves = tf.nest.flatten(element)
                batch = tf.cast(tf.shape(leaves[0])[0], tf.float64)
            else:
                batch = tf.constant(float(batch_size), tf.float64)
            row = tf.stack(
                [
                    requested,
                    handed_over,
                    tf.cast(gen, tf.float64),
                    tf.cast(index, tf.float64),
                    batch,
                ]
            )
            # The slot follows from (generation, index): no counter variable to update. A
            # later iterator starts elsewhere in the ring; the rows carry their keys, so an
            # overwritten stamp is missing, never mistaken for another.
            slot = tf.math.floormod(index + gen * _GENERATION_STRIDE, size)
            ring.scatter_nd_update([[slot]], [row])
            return element

        # zip asks its inputs in order: first the request stamp, then the element.
        stamped = _inline_map(tf.data.Dataset.zip(requests, dataset), stamp)
        if int(dataset.cardinality()) == tf.data.INFINITE_CARDINALITY:
            # zip with the (finite) index range would report 2**62 elements.
            stamped = stamped.apply(
                tf.data.experimental.assert_cardinality(tf.data.INFINITE_CARDINALITY)
            )
        options = tf.data.Options()
        options.experimental_optimization.inject_prefetch = False
        return stamped.with_options(options)

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
        rows[:, _REQ] -= wall_to_perf_s
        rows[:, _TS] -= wall_to_perf_s
        return StampTable(rows)


def outside_any_strategy(make: Callable[[], T]) -> T:
    """`make()` run where no `tf.distribute` strategy's scope is entered.

    Under `strategy.scope()` a `tf.Variable` becomes a distributed (mirrored) variable, whose
    `scatter_nd_update` inside a dataset function raises NotImplementedError. A strategy's
    scope, like TensorFlow's variable-creator scopes, is kept per thread, so a thread of its
    own creates a plain variable whichever scope the training thread is in.
    """
    made: list[T] = []
    failed: list[BaseException] = []

    def run() -> None:
        try:
            made.append(make())
        except BaseException as error:
            failed.append(error)

    thread = threading.Thread(target=run, name="stoker-outside-strategy", daemon=True)
    thread.start()
    thread.join()
    if failed:
        raise failed[0]
    return made[0]


def _static_batch_size(dataset: Any) -> int | None:
    """The leading dimension of every element when the pipeline fixes it, -1 when elements
    have none (batch size unknown), None when it varies (read from each element).

    Fixed for e.g. `batch(n, drop_remainder=True)`: then the stage records a constant
    instead of reading the shape of each element.
    """
    import tensorflow as tf

    leaves = tf.nest.flatten(dataset.element_spec)
    shape = getattr(leaves[0], "shape", None) if leaves else None
    if shape is None or not shape.rank:
        return -1
    first = shape[0]
    return None if first is None else int(first)


def _would_inject_prefetch(dataset: Any) -> bool:
    """Whether tf.data would append its automatic prefetch to `dataset`."""
    try:
        options = dataset.options()
        if options.autotune.enabled is False:
            return False
        if options.experimental_optimization.inject_prefetch is False:
            return False
        node = dataset
        while type(node).__name__ == "_OptionsDataset":
            node = node._input_dataset
        return type(node).__name__ not in _ASYNC_DATASETS
    except Exception:
        return True


_requests_dataset: Any = None


def _requests() -> Any:
    """The request stamps' dataset, traced once per process (every wrapped pipeline zips its
    own iterator of it)."""
    global _requests_dataset
    if _requests_dataset is None:
        import tensorflow as tf

        @tf.autograph.experimental.do_not_convert
        def request(i: Any) -> tuple[Any, Any]:
            return i, tf.timestamp()

        _requests_dataset = _inline_map(tf.data.Dataset.range(2**62), request)
    return _requests_dataset


def _inline_map(dataset: Any, function: Any) -> Any:
    """`dataset.map(function)` with the function's ops run on the calling thread, as a
    single-device function.

    A plain `map` dispatches each op of its function to the inter-op thread pool, which the
    training step uses too: on a small CPU that hand-off cost ~0.5 ms per element. tf.data's
    map op has a switch for inline execution that `Dataset.map` does not expose.

    Every iterator instantiates its map functions anew (Keras makes two per fit), and a
    multi-device function, tf.data's default, runs Grappler's whole meta-optimizer over the
    function's graph then: 6-8 ms per function on a 2-core machine. The function attribute
    tf.data sets on its own device-side functions (`experimental_ints_on_device`, in
    `prefetch_to_device`) makes it a single-device function, instantiated in well under a
    millisecond. Every op of the stage has a CPU kernel and the ring lives on the CPU, where
    tf.data runs the function.
    """
    try:
        return _single_device_map()(dataset, function)
    except Exception:
        try:
            from tensorflow.python.data.ops.map_op import _MapDataset

            return _MapDataset(dataset, function, use_inter_op_parallelism=False)
        except Exception:
            return dataset.map(function)


_single_device_map_class: Any = None


def _single_device_map() -> Any:
    global _single_device_map_class
    if _single_device_map_class is not None:
        return _single_device_map_class
    from tensorflow.python.data.ops import dataset_ops, structured_function
    from tensorflow.python.ops import gen_dataset_ops

    # Named as tf.data's own map dataset: the pipeline readers (pipeline.py,
    # pipeline_model.py) know Stoker's stamping stage as a map over a zip.
    class _MapDataset(dataset_ops.UnaryDataset):
        def __init__(self, input_dataset: Any, function: Any) -> None:
            self._input_dataset = input_dataset
            self._name = None
            self._map_func = structured_function.StructuredFunctionWrapper(
                function,
                "Dataset.map()",
                dataset=input_dataset,
                defun_kwargs={"experimental_ints_on_device": True},
            )
            variant = gen_dataset_ops.map_dataset(
                input_dataset._variant_tensor,
                self._map_func.function.captured_inputs,
                f=self._map_func.function,
                use_inter_op_parallelism=False,
                preserve_cardinality=True,
                **self._common_args,
            )
            super().__init__(input_dataset, variant)

        def _functions(self) -> list[Any]:
            return [self._map_func]

        @property
        def element_spec(self) -> Any:
            return self._map_func.output_structure

        def _transformation_name(self) -> str:
            return "Dataset.map()"

    _single_device_map_class = _MapDataset
    return _MapDataset


class StampTable:
    """Stamps keyed by (generation, index); rows become `Stamp`s only when asked for."""

    def __init__(self, rows: Any) -> None:
        # Plain floats: reading NumPy scalars one by one costs more than this one conversion.
        self._rows = rows.tolist()
        self._position = {(int(row[_GEN]), int(row[_INDEX])): i for i, row in enumerate(self._rows)}

    @classmethod
    def of(cls, stamps: dict[tuple[int, int], Stamp]) -> "StampTable":
        """A table from plain stamps (tests, and callers without TensorFlow)."""
        table = cls.__new__(cls)
        table._rows = [
            (
                float("nan") if s.requested is None else s.requested,
                s.ts,
                gen,
                index,
                -1 if s.batch_size is None else s.batch_size,
            )
            for (gen, index), s in stamps.items()
        ]
        table._position = {key: i for i, key in enumerate(stamps)}
        return table

    def get(self, key: tuple[int, int]) -> Stamp | None:
        i = self._position.get(key)
        if i is None:
            return None
        requested, ts, _, _, batch = self._rows[i]
        return Stamp(
            ts,
            int(batch) if batch >= 0 else None,
            None if requested != requested else requested,  # NaN: not known
        )

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


def call_path_s(execution: Execution, stamps: Sequence[Stamp]) -> float | None:
    """The time from the execution's begin (the batch-begin hook) to its first request: the
    train function's call path, when the step asked for its own element."""
    first = stamps[0].requested if stamps else None
    if first is None or first < execution.begin:  # pulled ahead (a device prefetch)
        return None
    return first - execution.begin


def split_execution(
    execution: Execution, stamps: Sequence[Stamp] | None, return_path_s: float | None = None
) -> list[StepRow]:
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
        stamp = stamps[0]
        idle_from = begin if stamp.requested is None else max(begin, stamp.requested)
        wait = max(0.0, stamp.ts - idle_from)
        return [StepRow(execution.first_step, begin, end - begin, wait, stamp.batch_size)]
    if stamps is None or not execution.count_wait:
        each = (end - begin) / n
        sizes = [s.batch_size for s in stamps] if stamps else [None] * n
        return [
            StepRow(execution.first_step + j, begin + j * each, each, None, sizes[j])
            for j in range(n)
        ]
    compute = 0.0
    if n > 1:
        compute_end = end if execution.returned is None else min(end, execution.returned)
        # The train function's return path (its loop's exit, its outputs, Keras's Python up
        # to the batch-end hook) follows the last step's compute once per call: no step's
        # compute. Solved into c, it counted N - 1 times too often, each time as wait missed.
        path = call_path_s(execution, stamps) if return_path_s is None else return_path_s
        last = max(begin, stamps[-1].ts)
        compute_end -= min(path or 0.0, max(0.0, compute_end - last))
        compute = _solve_compute_s(begin, compute_end, [s.ts for s in stamps])
    rows = []
    t = begin  # when the previous step's compute ended: this step's start
    for j, stamp in enumerate(stamps):
        idle_from = t if stamp.requested is None else max(t, stamp.requested)
        wait = max(0.0, stamp.ts - idle_from)
        step_end = end if j == n - 1 else max(t, stamp.ts) + compute
        rows.append(StepRow(execution.first_step + j, t, step_end - t, wait, stamp.batch_size))
        t = step_end
    return rows


def split_dispatched(
    execution: Execution, stamps: Sequence[Stamp], free_from: float | None, done: float
) -> list[StepRow]:
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
        compute = _solve_compute_s(start, end, [s.ts for s in stamps])
    waits: list[float] = []
    free = start
    for stamp in stamps:
        idle_from = free if stamp.requested is None else max(free, stamp.requested)
        waits.append(max(0.0, stamp.ts - idle_from))
        free = max(free, stamp.ts) + compute
    total, waited = end - start, sum(waits)
    scale = min(1.0, total / waited) if waited > 0 else 1.0
    rest = (total - waited * scale) / n
    rows, t = [], start
    for j, (stamp, wait) in enumerate(zip(stamps, waits, strict=True)):
        dur = wait * scale + rest if j < n - 1 else end - t
        shown = wait * scale if execution.count_wait else None
        rows.append(StepRow(execution.first_step + j, t, dur, shown, stamp.batch_size))
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

    def resolve(self, executions: Sequence[Execution], stamps: StampTable) -> list[StepRow]:
        firsts = stamps.first_stamps()
        rows: list[StepRow] = []
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

    def _take(self, execution: Execution, stamps: StampTable) -> list[Stamp] | None:
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
            return None if stamp is None else [stamp]
        taken = [stamps.get((self._generation, first + j)) for j in range(n)]
        present = sum(1 for _ in itertools.takewhile(lambda s: s is not None, taken))
        if 0 < present < n and all(s is None for s in taken[present:]):
            execution.n = n = present
            taken = taken[:present]
        self._next_index += n
        if any(s is None for s in taken):
            return None
        return [s for s in taken if s is not None]
