"""Input wait in `model.fit` on TensorFlow: two timestamps around the train function's fetch.

Keras calls its train function with the epoch's `tf.data` iterator, and the function fetches
each batch itself, inside its graph (`iterator.get_next()`, `next(iterator)`, or
`get_next_as_optional()` under `steps_per_execution`). The train-function wrapper
(trainer_agent/capture/train_function.py) hands the function `StampRing.stamped(iterator)`
instead: the same iterator (the same resource, element and type), whose fetch methods add a
few ops to the graph the function traces. One `tf.timestamp()` runs before the fetch (the
request), another once the element is there (the hand-over), and one row
`(request, hand-over, batch size, fetch number)` goes into a `tf.Variable` ring on the CPU.
No Python and no tf.data function runs per element, the pipeline itself is untouched, and
nothing waits on the ring's update: the step's compute depends only on the element.

The run's sender thread reads the ring before each flush (`StampRing.read`; the training
thread only at an epoch's end under `steps_per_execution` > 1: trainer_agent/capture/fit_stamps.py),
and numbers each iterator's fetches from 0 as the wait resolver expects
(trainer_agent/capture/input_wait.py). When the wrapper sees a new iterator it notes the time
(`StampRing.started`, no TensorFlow op): every fetch of that iterator was asked for after it and
every fetch of the one before, in calls that had returned, before it, so each row's request stamp
says which iterator it belongs to, and the first fetch number found after that time is the
iterator's first.

The stamped iterator is a subclass of the iterator's own class (`OwnedIterator`, or a
`tf.distribute` `DistributedIterator` under a strategy), made once per class and ring; its
type spec is the same spec re-classed, so the train function traces once per model and
element spec, as it does without Stoker. One ring per model: a model's traced train function
keeps writing to the ring it captured, whichever callback runs the next fit.
"""

import math
import threading
import time
import weakref
from collections.abc import Callable
from typing import Any, TypeVar

import numpy as np

from trainer_agent.log_once import warn_once

T = TypeVar("T")

# Fetches the ring holds. The sender thread reads it every second (50 ms while a browser
# watches the run): a step would have to take under 120 µs for its fetches of one second to
# fill half of it (then the training thread reads it: trainer_agent/capture/fit_stamps.py).
# 16384 rows of four float64 are 512 KiB, copied by each read on the sender thread.
DEFAULT_RING_SIZE = 16384
# Row layout of the ring written in the graph.
_REQUESTED, _HANDED_OVER, _BATCH, _FETCH = range(4)
_ROW = 4
# The batch column: a known size is >= 0.
BATCH_UNKNOWN = -1.0
NO_ELEMENT = -2.0  # `get_next_as_optional()` found the data exhausted
# An iterator whose first fetch the ring no longer held when it was looked for.
_UNKNOWN_FIRST = -1

# The ops the stamps add to each fetch of the train function's graph: two timestamps, the
# fetch counter's update and read, the row (cast, stack), its slot and the ring's update, and
# three constants; reading a batch size the element spec does not fix adds three ops and two
# constants (tests/fit/test_stamped_iterator.py counts them).


class StampRing:
    """The ring variables one model's train function writes its fetches' stamps into."""

    def __init__(self, size: int = DEFAULT_RING_SIZE) -> None:
        import tensorflow as tf

        self.size = size

        def make() -> tuple[Any, Any]:
            with tf.init_scope(), tf.device("/CPU:0"):
                rows = tf.Variable(
                    tf.zeros([size, _ROW], tf.float64), trainable=False, name="stoker_stamps"
                )
                count = tf.Variable(tf.zeros([], tf.int64), trainable=False, name="stoker_fetches")
                return rows, count

        self._rows, self._count = outside_any_strategy(make)
        self._device = self._rows.device
        # Per iterator seen (in order): when the train function was first called with it, in
        # TensorFlow's wall clock, and the fetch number of its first element once a read found
        # it (_UNKNOWN_FIRST if the ring had overwritten it by then). Read and extended under
        # the lock: the sender threads of two runs of one model may read at once.
        self._start_times: list[float] = []
        self._firsts: list[int | None] = []
        self._unresolved: list[int] = []  # the generations (0-based) whose first is not found
        self._lock = threading.Lock()
        self._classes: dict[type, type] = {}

    def stamped(self, iterator: Any) -> Any | None:
        """`iterator` as the same iterator whose fetches are stamped; None for a kind of
        iterator this cannot stamp (the fit then runs unstamped).

        A `tf.distribute` iterator is stamped where each worker fetches its own elements
        (its per-worker iterators), not around its whole `get_next`: under
        `MultiWorkerMirroredStrategy` that also waits for the other workers (a collective
        says which have data), and a fast worker would take a slow one's input wait."""
        cls = type(iterator)
        stamped_cls = self._classes.get(cls)
        if stamped_cls is None:
            stamped_cls = self._classes[cls] = _stamped_class(cls, self)
        if stamped_cls is _UNSTAMPABLE:
            return None
        copy: Any = object.__new__(stamped_cls)
        copy.__dict__.update(iterator.__dict__)
        if _DISTRIBUTED in stamped_cls.__dict__:
            copy._iterators = [self._stamped_worker(worker) for worker in iterator._iterators]
        # Its type spec, made once: the train function's call reads it at every step.
        copy._stoker_spec = copy._stoker_spec_of()
        return copy

    def _stamped_worker(self, worker: Any) -> Any:
        cls = type(worker)
        stamped_cls = self._classes.get(cls)
        if stamped_cls is None:
            stamped_cls = self._classes[cls] = _stamped_worker_class(cls, self)
        copy: Any = object.__new__(stamped_cls)
        copy.__dict__.update(worker.__dict__)
        return copy

    def started(self) -> int:
        """A new iterator is about to be fetched from: its generation (1, 2, ...).

        Only the time is noted (TensorFlow's `tf.timestamp` clock is the wall clock, to the
        microsecond; 2 µs are taken off so that rounding cannot put its first request before
        it): its fetches are asked for after it, its predecessor's all before it."""
        now = math.floor(time.time() * 1e6) / 1e6 - 2e-6
        with self._lock:
            self._start_times.append(now)
            self._firsts.append(None)
            self._unresolved.append(len(self._firsts) - 1)
            return len(self._start_times)

    def read(
        self,
        wall_to_perf_s: float,
        after: tuple[int, int] | None = None,
        batch_hint: int | None = None,
        since: int = 1,
    ) -> Any:
        """The stamps still in the ring as a `StampTable` keyed by (generation, index), in
        perf_counter time: with `after=(generation, index)`, those from that element on, else
        those of generation `since` on. A fetch whose batch size the graph could not read
        (`get_next_as_optional`, under `steps_per_execution`) gets `batch_hint`, the size the
        pipeline batches to. Any thread may read, while the train function runs too: a row is
        whole (the variable's update and read exclude each other), and a slot not yet written
        for its fetch holds an older fetch's number, which is left out. The work after the
        read is in proportion to the fetches wanted, not to the ring."""
        import tensorflow as tf

        from trainer_agent.capture.input_wait import StampTable

        # The fetch count, then only the rows wanted (two small ops; the whole ring is
        # 512 KiB). A fetch counted after the count was read is left for the next read; one
        # counted before it whose row is not written yet holds an older fetch's number.
        last = int(tf.raw_ops.ReadVariableOp(resource=self._count.handle, dtype=tf.int64))
        since = after[0] if after is not None else since
        with self._lock:
            known = self._firsts[since - 1] if 0 < since <= len(self._firsts) else None
            lo = max(1, last - self.size + 1)
            if known is not None and known >= 0:
                lo = max(lo, known + (after[1] if after is not None else 0))
            else:  # its first fetch is not found yet: it comes after those before it
                lo = max(lo, self._first_before(since))
        # From the fetch before `lo`: whether an iterator's first fetch is its first.
        wanted = np.arange(max(1, lo - 1), last + 1, dtype=np.int64)
        rows = tf.raw_ops.ResourceGather(
            resource=self._rows.handle, indices=wanted % self.size, dtype=tf.float64
        ).numpy()
        rows = rows[rows[:, _FETCH] == wanted]  # the slot still holds that fetch
        with self._lock:
            self._find_firsts(rows, since)
            times = np.asarray(self._start_times, dtype=np.float64)
            firsts = np.asarray(
                [_UNKNOWN_FIRST if f is None else f for f in self._firsts], dtype=np.float64
            )
        window = rows[rows[:, _FETCH] >= lo]
        window = window[window[:, _BATCH] != NO_ELEMENT]  # an exhausted optional: no element
        generation = np.searchsorted(times, window[:, _REQUESTED], side="right")
        keep = generation >= max(1, since)
        window, generation = window[keep], generation[keep]
        start = firsts[generation - 1]
        keep = start >= 0
        window, generation, start = window[keep], generation[keep], start[keep]
        table = np.empty((len(window), 5))
        table[:, 0] = window[:, _REQUESTED] - wall_to_perf_s
        table[:, 1] = window[:, _HANDED_OVER] - wall_to_perf_s
        table[:, 2] = generation
        table[:, 3] = window[:, _FETCH] - start
        table[:, 4] = window[:, _BATCH]
        if batch_hint is not None:
            table[table[:, 4] == BATCH_UNKNOWN, 4] = batch_hint
        return StampTable(table)

    def _find_firsts(self, rows: Any, since: int) -> None:
        """The first fetch number of each iterator from `since` on not found yet, from the
        `rows` (whole, in fetch order) asked for within its time. It is the first when the
        fetch before it is among the rows, asked for before that time (or there was none);
        if that one was overwritten, the iterator's first is not known and its fetches give
        no waits (never wrong ones). Generations before `since` are another reader's."""
        pending = [g for g in self._unresolved if g >= since - 1]
        if not pending:
            return
        times = self._start_times
        fetches = rows[:, _FETCH]
        for g in pending:
            within = rows[:, _REQUESTED] >= times[g]
            if g + 1 < len(times):
                within &= rows[:, _REQUESTED] < times[g + 1]
            if not within.any():
                continue  # nothing fetched yet (or all of it overwritten: see below)
            first = int(fetches[within].min())
            held = first == 1 or bool((fetches == first - 1).any())
            self._firsts[g] = first if held else _UNKNOWN_FIRST
        # An iterator with no row left while a later one has rows was overwritten whole.
        for g in pending:
            if self._firsts[g] is None and any(f is not None for f in self._firsts[g + 1 :]):
                self._firsts[g] = _UNKNOWN_FIRST
        self._unresolved = [g for g in self._unresolved if self._firsts[g] is None]

    def _first_before(self, generation: int) -> int:
        """The first fetch of the latest generation before `generation` whose first is known
        (1 if none is): `generation`'s fetches come after it."""
        for first in reversed(self._firsts[: generation - 1]):
            if first is not None and first >= 0:
                return first
        return 1

    def record(self, requested: Any, arrived: list[Any], batch: Any) -> None:
        """Graph code, run once per fetch: the hand-over stamp (once `arrived`, the fetched
        tensors, exist) and the fetch's row. Nothing the step computes depends on it."""
        try:
            self._record(requested, arrived, batch)
        except Exception as error:
            # Never in the way: the train function traces on without the stamps (its
            # fetches then have no rows, and their steps no input wait), said once.
            warn_once(
                f"stamps:{type(error).__name__}",
                "Stoker: input wait is not measured for this fit: its input cannot be "
                "stamped (%s: %s). Step times and device metrics are still recorded.",
                type(error).__name__, error,
            )  # fmt: skip

    def _record(self, requested: Any, arrived: list[Any], batch: Any) -> None:
        import tensorflow as tf

        with tf.device(self._device):
            with tf.control_dependencies(arrived):
                handed_over = tf.timestamp()
            with tf.control_dependencies([handed_over]):  # counted once the fetch succeeded
                fetch = self._count.assign_add(_one()).read_value()  # read once
            # One row at one (scalar) slot: no concatenation or reshaping of the row.
            row = tf.stack([requested, handed_over, batch, tf.cast(fetch, tf.float64)])
            self._rows.scatter_update(tf.IndexedSlices(row, tf.math.floormod(fetch, self.size)))


# Dataset classes that keep each element's leading dimension; `batch_hint` looks through them.
_KEEP_BATCH = {
    "_PrefetchDataset", "_MapDataset", "_ParallelMapDataset", "CacheDataset", "_CacheDataset",
    "_MemoryCacheDataset", "RepeatDataset", "_RepeatDataset", "_OptionsDataset", "_TakeDataset",
    "_SkipDataset", "ShuffleDataset", "_ShuffleDataset", "_AssertCardinalityDataset",
    "_IgnoreErrorsDataset", "_ShardDataset",
}  # fmt: skip
_BATCHES = {"_BatchDataset", "_ParallelBatchDataset", "_PaddedBatchDataset", "_MapAndBatchDataset"}


def batch_hint(dataset: Any, max_nodes: int = 50) -> int | None:
    """The batch size `dataset` batches its elements to, when its outermost batching stage
    says so (`batch(n)`; the last, partial batch of an epoch then counts as n), else None."""
    node = dataset
    for _ in range(max_nodes):
        name = type(node).__name__
        if name in _BATCHES:
            size = getattr(node, "_batch_size", None)
            try:
                return int(size) if size is not None else None
            except (TypeError, ValueError):
                return None
        if name not in _KEEP_BATCH:
            return None
        node = getattr(node, "_input_dataset", None)
        if node is None:
            return None
    return None


def _float64(value: float) -> Any:
    import tensorflow as tf

    return tf.constant(value, tf.float64)


def _one() -> Any:
    import tensorflow as tf

    return tf.constant(1, tf.int64)


def _batch_of(element: Any, spec: Any) -> Any:
    """Graph code: the batch size of `element`, a constant when its spec fixes it."""
    import tensorflow as tf

    leaves = tf.nest.flatten(spec)
    shape = getattr(leaves[0], "shape", None) if leaves else None
    if shape is None or not shape.rank:
        return tf.constant(BATCH_UNKNOWN, tf.float64)
    if shape[0] is not None:
        return tf.constant(float(shape[0]), tf.float64)
    first = tf.nest.flatten(element, expand_composites=True)[0]
    return tf.cast(tf.shape(first)[0], tf.float64)


def _batch_of_value(element: Any, replicas: int) -> Any:
    """Graph code: the batch size of one replica's `element` times the replicas."""
    import tensorflow as tf

    first = tf.nest.flatten(element, expand_composites=True)[0]
    shape = first.shape
    if not shape.rank:
        return tf.constant(BATCH_UNKNOWN, tf.float64)
    if shape[0] is not None:
        return tf.constant(float(shape[0] * replicas), tf.float64)
    return tf.cast(tf.shape(first)[0] * replicas, tf.float64)


_UNSTAMPABLE = type("_Unstampable", (), {})
# The attribute that marks a stamped `tf.distribute` iterator class (its workers are stamped).
_DISTRIBUTED = "_stoker_distributed"


def _stamped_worker_class(cls: type, ring: StampRing) -> type:
    """A subclass of a `tf.distribute` per-worker iterator class (one list element per local
    device) whose fetches are stamped: the worker's own input, before any collective."""
    import tensorflow as tf

    def get_next_as_list(self: Any, name: Any = None) -> Any:
        with tf.device(ring._device):
            asked = tf.timestamp()
        with tf.control_dependencies([asked]):
            values = cls.get_next_as_list(self, name)  # type: ignore[attr-defined]
        leaves = tf.nest.flatten(values, expand_composites=True)
        with tf.device(ring._device):
            batch = _batch_of_value(values[0], replicas=len(values))
        ring.record(asked, leaves, batch)
        return values

    def get_next_as_optional_list(self: Any) -> Any:
        with tf.device(ring._device):
            asked = tf.timestamp()
        with tf.control_dependencies([asked]):
            optionals = cls.get_next_as_optional_list(self)  # type: ignore[attr-defined]
        with tf.device(ring._device):
            has_value = optionals[0].has_value()
            batch = tf.where(has_value, _float64(BATCH_UNKNOWN), _float64(NO_ELEMENT))
        arrived = [optional._variant_tensor for optional in optionals] + [has_value]
        ring.record(asked, arrived, batch)
        return optionals

    return type(
        f"Stoker{cls.__name__}",
        (cls,),
        {
            "get_next_as_list": get_next_as_list,
            "get_next_as_optional_list": get_next_as_optional_list,
            "__module__": __name__,
        },
    )


def _stamped_class(cls: type, ring: StampRing) -> type:
    """A subclass of the iterator class `cls` whose fetches are stamped into `ring`."""
    import tensorflow as tf

    owned = hasattr(cls, "_next_internal")  # OwnedIterator: get_next and __next__ use it
    # tf.distribute's DistributedIterator: its per-worker iterators fetch (see `stamped`).
    distributed = hasattr(cls, "_get_next_no_partial_batch_handling")
    if not (owned or hasattr(cls, "get_next")) or not hasattr(cls, "_type_spec"):
        return _UNSTAMPABLE

    def requested() -> Any:
        with tf.device(ring._device):
            return tf.timestamp()

    def stamp_element(fetch: Callable[[], Any], spec: Any) -> Any:
        asked = requested()
        with tf.control_dependencies([asked]):
            element = fetch()
        leaves = tf.nest.flatten(element, expand_composites=True)
        with tf.device(ring._device):
            batch = _batch_of(element, spec)
        ring.record(asked, leaves, batch)
        return element

    specs: dict[type, type] = {}

    def stamped_spec(spec: Any) -> Any:
        base = type(spec)
        sub = specs.get(base)
        if sub is None:

            def _from_components(self: Any, components: Any) -> Any:
                value = base._from_components(self, components)
                value.__class__ = stamped
                if distributed:
                    for worker in value._iterators:
                        worker.__class__ = ring._classes.get(type(worker)) or type(worker)
                return value

            sub = specs[base] = type(
                f"Stoker{base.__name__}",
                (base,),
                {
                    "__slots__": (),
                    "value_type": property(lambda self: stamped),
                    "_from_components": _from_components,
                    "__module__": __name__,
                },
            )
        spec.__class__ = sub
        return spec

    def _stoker_spec_of(self: Any) -> Any:
        return stamped_spec(cls._type_spec.__get__(self))

    def _type_spec(self: Any) -> Any:
        spec = self.__dict__.get("_stoker_spec")
        return spec if spec is not None else self._stoker_spec_of()

    def __tf_tracing_type__(self: Any, context: Any) -> Any:
        spec = self._stoker_spec
        return spec if spec is not None else self._stoker_spec_of()

    def get_next_as_optional(self: Any) -> Any:
        asked = requested()
        with tf.control_dependencies([asked]):
            optional = cls.get_next_as_optional(self)  # type: ignore[attr-defined]
        with tf.device(ring._device):
            has_value = optional.has_value()
            batch = tf.where(has_value, _float64(BATCH_UNKNOWN), _float64(NO_ELEMENT))
        ring.record(asked, [optional._variant_tensor, has_value], batch)
        return optional

    attributes: dict[str, Any] = {
        "_stoker_spec_of": _stoker_spec_of,
        "_stoker_spec": None,  # an iterator made from components has none of its own
        "_type_spec": property(_type_spec),
        "__tf_tracing_type__": __tf_tracing_type__,
        "get_next_as_optional": get_next_as_optional,
        "__module__": __name__,
    }
    if distributed:
        attributes[_DISTRIBUTED] = True
        del attributes["get_next_as_optional"]  # the workers' fetches are stamped instead
    elif owned:

        def _next_internal(self: Any) -> Any:
            return stamp_element(lambda: cls._next_internal(self), self.element_spec)  # type: ignore[attr-defined]

        attributes["_next_internal"] = _next_internal
    else:

        def get_next(self: Any, name: Any = None) -> Any:
            return stamp_element(lambda: cls.get_next(self, name), self.element_spec)  # type: ignore[attr-defined]

        attributes["get_next"] = get_next
    stamped = type(f"Stoker{cls.__name__}", (cls,), attributes)
    return stamped


_rings: "weakref.WeakKeyDictionary[Any, StampRing]" = weakref.WeakKeyDictionary()
_rings_lock = threading.Lock()


def ring_for(model: Any) -> StampRing:
    """The model's ring, made at its first stamped fit: its traced train function writes
    there for the model's life."""
    with _rings_lock:
        ring = _rings.get(model)
        if ring is None:
            ring = _rings[model] = StampRing()
        return ring


def outside_any_strategy(make: Callable[[], T]) -> T:
    """`make()` run where no `tf.distribute` strategy's scope is entered.

    Under `strategy.scope()` a `tf.Variable` becomes a distributed (mirrored) variable, which
    the stamps cannot update from the train function's outer graph. A strategy's scope, like
    TensorFlow's variable-creator scopes, is kept per thread, so a thread of its own creates
    a plain variable whichever scope the training thread is in.
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
