"""The train function's stamped fetches on the CPU: what they record, what they leave alone,
and what they may cost (counted, never timed: traces per `wrap`, ops per fetch)."""

import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import numpy as np
import pytest

pytestmark = pytest.mark.tf_matrix  # also on the oldest TF and tf_keras: make test-tf-matrix

tf = pytest.importorskip("tensorflow")

DELAY_S = 0.03
# What the stamps may add to each element's path: the ops around one fetch in the train
# function's graph (trainer_agent/capture/stamped_iterator.py: 8 ops and 3 constants on
# Keras 3, 11 and 5 where the element spec leaves the batch size open; tf_keras's graph adds
# an Identity and a NoOp to each) and the tf.data stages and function ops added to the
# pipeline (none). The stamping stage before this read 65 and 75; the first stamps in the
# train function's graph 15 and 20 (their row concatenated and reshaped to a slot of one).
MAX_OPS_PER_FETCH = 18


def _slow(n: int, delay_s: float) -> "tf.data.Dataset":
    def slow(a: np.ndarray) -> np.ndarray:
        time.sleep(delay_s)
        return a

    ds = tf.data.Dataset.range(n)
    ds = ds.map(lambda i: tf.ensure_shape(tf.numpy_function(slow, [i], tf.int64), []))
    options = tf.data.Options()
    options.experimental_optimization.inject_prefetch = False  # each fetch runs the map
    return ds.with_options(options)


def _table(ring: Any) -> Any:
    return ring.read(time.time() - time.perf_counter())


def _stamp(table: Any, key: tuple[int, int]) -> Any:
    """The stamp at `key`, its fields by name (the table hands out plain tuples)."""
    from trainer_agent.capture.input_wait import Stamp

    fields = table.get(key)
    return None if fields is None else Stamp(*fields)


@tf.function
def _fetch(iterator: Any) -> Any:
    return next(iterator)


def test_stamped_iterator_yields_the_same_elements_with_the_same_spec() -> None:
    from trainer_agent.capture.stamped_iterator import StampRing

    x = np.arange(24, dtype="float32").reshape(6, 4)
    ds = tf.data.Dataset.from_tensor_slices((x, x[:, :1])).batch(2)
    ring = StampRing()
    plain, stamped = iter(ds), ring.stamped(iter(ds))
    assert isinstance(stamped, type(plain)) and stamped.element_spec == plain.element_spec
    ring.started()
    for _ in range(3):
        (a, b), (c, d) = _fetch(plain), _fetch(stamped)
        np.testing.assert_array_equal(a, c)
        np.testing.assert_array_equal(b, d)
    stamps = [_stamp(_table(ring), (1, i)) for i in range(3)]
    assert all(s is not None and s.batch_size == 2 for s in stamps)


def test_stamps_measure_how_long_each_fetch_blocked() -> None:
    from trainer_agent.capture.stamped_iterator import StampRing

    ring = StampRing()
    _fetch(ring.stamped(iter(_slow(1, 0.0))))  # traced here, not in the fetches timed
    iterator = ring.stamped(iter(_slow(6, DELAY_S)))
    ring.started()
    blocked = []
    for _ in range(6):
        asked = time.perf_counter()
        _fetch(iterator)
        blocked.append(time.perf_counter() - asked)
    table = _table(ring)
    for index in range(1, 6):
        stamp = _stamp(table, (1, index))
        assert stamp is not None and stamp.requested is not None
        wait = stamp.ts - stamp.requested
        # Measured inside the call: never longer than it, and most of the injected delay.
        assert wait <= blocked[index] + 1e-4
        assert wait > DELAY_S * 0.5


def test_prefetched_elements_wait_nothing_and_each_iterator_is_a_generation() -> None:
    from trainer_agent.capture.stamped_iterator import StampRing

    ring = StampRing()
    dataset = _slow(5, DELAY_S).prefetch(5)
    _fetch(ring.stamped(iter(dataset)))  # traced here (its generation is not started)
    for _ in range(2):  # two iterators: generations 1 and 2
        iterator = ring.stamped(iter(dataset))
        ring.started()
        for _ in range(5):
            time.sleep(3 * DELAY_S)  # a slow consumer: the prefetch buffer fills
            _fetch(iterator)
    table = _table(ring)
    assert sorted(table.first_stamps()) == [1, 2]
    for index in range(1, 5):
        stamp = _stamp(table, (2, index))
        assert stamp is not None and stamp.requested is not None
        assert stamp.ts - stamp.requested < DELAY_S / 2  # not the production time
    assert table.get((2, 4)) is not None and table.get((2, 5)) is None


def test_each_iterator_is_known_by_the_time_it_started_whoever_reads_first() -> None:
    """A new iterator costs no read of the ring: its fetches are known by their request stamps
    (after the time it started). Two fits of one model read the same ring: the older fit's
    reader, reading last (its sender sends after the next fit began), still finds its own."""
    from trainer_agent.capture.stamped_iterator import StampRing

    ring = StampRing(size=64)
    dataset = tf.data.Dataset.range(10)
    first = ring.stamped(iter(dataset))
    older = ring.started()
    for _ in range(3):
        _fetch(first)
    second = ring.stamped(iter(dataset))
    newer = ring.started()
    for _ in range(4):
        _fetch(second)
    offset = time.time() - time.perf_counter()
    newest = ring.read(offset, since=newer)
    assert sorted(newest.first_stamps()) == [newer]
    assert [newest.get((newer, i)) is not None for i in range(5)] == [True] * 4 + [False]
    oldest = ring.read(offset, since=older)
    assert sorted(oldest.first_stamps()) == [older, newer]
    assert [oldest.get((older, i)) is not None for i in range(4)] == [True] * 3 + [False]


def test_an_iterator_whose_first_fetches_were_overwritten_gives_no_stamps() -> None:
    """Stamps overwritten before they were read give an unknown wait, never a wrong one: with
    its first fetch gone from the ring, an iterator's fetches cannot be numbered."""
    from trainer_agent.capture.stamped_iterator import StampRing

    ring = StampRing(size=4)
    dataset = tf.data.Dataset.range(10)
    first = ring.stamped(iter(dataset))
    lost = ring.started()
    for _ in range(6):  # fetches 1-6: the ring keeps 3-6
        _fetch(first)
    offset = time.time() - time.perf_counter()
    assert len(ring.read(offset, since=lost).first_stamps()) == 0
    assert ring.read(offset, since=lost).get((lost, 2)) is None
    second = ring.stamped(iter(dataset))
    found = ring.started()
    for _ in range(2):
        _fetch(second)
    table = ring.read(offset, since=lost)
    assert table.get((found, 0)) is not None and table.get((found, 1)) is not None
    assert all(table.get((lost, i)) is None for i in range(6))


def test_wrap_hands_back_the_users_pipeline_untouched() -> None:
    from trainer_agent import StokerCallback

    ds = tf.data.Dataset.range(4).batch(2)
    callback = StokerCallback(server="http://127.0.0.1:9")
    assert callback.wrap(ds) is ds
    assert ds.options().experimental_optimization.inject_prefetch is not False


@contextmanager
def _counting_traces() -> Iterator[list[str]]:
    """Every graph TensorFlow starts tracing (a tf.function, a tf.data function) meanwhile."""
    from tensorflow.python.framework import func_graph

    traced: list[str] = []
    original = func_graph.FuncGraph.__init__

    def counting(self: Any, name: Any, *args: Any, **kwargs: Any) -> None:
        traced.append(str(name))
        original(self, name, *args, **kwargs)

    func_graph.FuncGraph.__init__ = counting
    try:
        yield traced
    finally:
        func_graph.FuncGraph.__init__ = original


def _pipeline() -> "tf.data.Dataset":
    x = np.zeros((64, 4), "float32")
    ds = tf.data.Dataset.from_tensor_slices((x, x[:, :1])).map(lambda a, b: (a * 2.0, b))
    return ds.batch(16).cache().repeat().prefetch(2)


def test_wrap_traces_nothing_on_its_second_call_in_a_process() -> None:
    """CI guard: `wrap()` is free after its first call (the stage it replaced traced its
    two functions at every call of a new pipeline, 22-24 ms each)."""
    from trainer_agent import StokerCallback

    StokerCallback(server="http://127.0.0.1:9").wrap(_pipeline())
    dataset = _pipeline()  # built before counting: its own map traces
    with _counting_traces() as traced:
        StokerCallback(server="http://127.0.0.1:9").wrap(dataset)
    assert traced == []


def _graph_nodes(dataset: Any) -> int:
    """The dataset's ops and the ops of the functions it runs."""
    from tensorflow.core.framework import graph_pb2

    graph = graph_pb2.GraphDef.FromString(dataset._as_serialized_graph().numpy())
    return len(graph.node) + sum(len(f.node_def) for f in graph.library.function)


def _plumbing(filename: str) -> bool:
    """TensorFlow's op-building code (gen_* wrappers, array ops, tracing), which builds the
    ops its caller asks for; tf.data's and tf.distribute's iterators fetch on their own."""
    tensorflow = filename.rpartition("tensorflow/python/")[2]
    return tensorflow != filename and not tensorflow.startswith(("data/", "distribute/"))


@contextmanager
def _counting_stoker_ops() -> Iterator[list[str]]:
    """The graph ops that Stoker's code asks for meanwhile: the first caller outside
    TensorFlow's op-building code is Stoker's."""
    from tensorflow.python.framework import ops

    created: list[str] = []
    original = ops.Graph._create_op_internal

    def counting(self: Any, op_type: str, *args: Any, **kwargs: Any) -> Any:
        frame: Any = sys._getframe(1)
        while frame is not None and _plumbing(frame.f_code.co_filename):
            frame = frame.f_back
        if frame is not None and "trainer_agent" in frame.f_code.co_filename:
            created.append(op_type)
        return original(self, op_type, *args, **kwargs)

    ops.Graph._create_op_internal = counting
    try:
        yield created
    finally:
        ops.Graph._create_op_internal = original


@pytest.mark.parametrize("fixed_batch", [True, False])
def test_ops_stoker_adds_to_each_elements_path_stay_under_the_stated_count(
    fixed_batch: bool,
) -> None:
    """CI guard: the ops on each element's path, counted in the graphs, not timed: the
    tf.data stages and function ops `wrap` adds to the pipeline, plus the ops the stamps add
    around the train function's fetch (Keras 3 traces one fetch at steps_per_execution 1)."""
    from bench.capturing import CapturingCallback

    x = np.zeros((64, 4), "float32")
    dataset = tf.data.Dataset.from_tensor_slices((x, x[:, :1])).batch(
        16, drop_remainder=fixed_batch
    )
    keras = tf.keras
    model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(1)])
    model.compile("sgd", "mse")
    callback = CapturingCallback()
    with _counting_stoker_ops() as created:
        wrapped = callback.wrap(dataset)
        model.fit(wrapped, epochs=1, callbacks=[callback], verbose=0)
    # Each traced fetch has its two timestamps (tf_keras traces its train function twice).
    traced = max(1, created.count("Timestamp") // 2)
    added = _graph_nodes(wrapped) - _graph_nodes(dataset) + len(created) / traced
    print(f"ops Stoker adds per element: {added} ({sorted(created)})")
    assert added <= MAX_OPS_PER_FETCH
    assert sum(r.wait is not None for r in callback.rows) == 3  # it measured: step 0 excepted


def test_a_fit_whose_stamps_fail_to_trace_runs_on_unstamped(caplog: Any) -> None:
    """Never in the way: if building the stamps' ops raises while the train function traces,
    it traces on without them: the fit runs, its steps are recorded without input wait, and
    that is said once."""
    from bench.capturing import CapturingCallback
    from trainer_agent.capture.stamped_iterator import StampRing

    x = np.zeros((64, 4), "float32")
    dataset = tf.data.Dataset.from_tensor_slices((x, x[:, :1])).batch(16)
    keras = tf.keras
    model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(1)])
    model.compile("sgd", "mse")
    callback = CapturingCallback()
    original = StampRing._record

    def broken(self: Any, *args: Any) -> None:
        raise NotImplementedError("no stamps here")

    StampRing._record = broken  # type: ignore[method-assign]
    try:
        history = model.fit(callback.wrap(dataset), epochs=2, callbacks=[callback], verbose=0)
    finally:
        StampRing._record = original  # type: ignore[method-assign]
    assert len(history.history["loss"]) == 2
    assert [r.step for r in callback.rows] == list(range(8))
    assert all(r.wait is None for r in callback.rows)
    assert sum("input wait is not measured" in r.getMessage() for r in caplog.records) == 1
