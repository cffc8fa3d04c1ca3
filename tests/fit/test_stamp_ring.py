"""The `tf.data` stamping stage on the CPU: what it records and what it leaves unchanged."""

import time

import numpy as np
import pytest

pytestmark = pytest.mark.tf_matrix  # also on the oldest TF and tf_keras: make test-tf-matrix

tf = pytest.importorskip("tensorflow")

DELAY_S = 0.03


def _slow(n: int, delay_s: float) -> "tf.data.Dataset":
    def slow(a: np.ndarray) -> np.ndarray:
        time.sleep(delay_s)
        return a

    ds = tf.data.Dataset.range(n)
    return ds.map(lambda i: tf.ensure_shape(tf.numpy_function(slow, [i], tf.int64), []))


def _table(ring: "object") -> "object":
    from trainer_agent.capture.input_wait import StampTable

    table = ring.read(time.time() - time.perf_counter())
    assert isinstance(table, StampTable)
    return table


def test_wrapped_dataset_yields_the_same_elements_and_cardinality() -> None:
    from trainer_agent.capture.input_wait import StampRing

    x = np.arange(24, dtype="float32").reshape(6, 4)
    ds = tf.data.Dataset.from_tensor_slices((x, x[:, :1])).batch(2)
    wrapped = StampRing().wrap(ds)
    assert int(wrapped.cardinality()) == 3
    assert wrapped.element_spec == ds.element_spec
    for (a, b), (c, d) in zip(wrapped, ds, strict=True):
        np.testing.assert_array_equal(a, c)
        np.testing.assert_array_equal(b, d)
    assert int(StampRing().wrap(ds.repeat()).cardinality()) == tf.data.INFINITE_CARDINALITY
    assert int(StampRing().wrap(ds.filter(lambda a, b: True)).cardinality()) < 0


def test_stage_measures_how_long_each_request_blocked() -> None:
    from trainer_agent.capture.input_wait import StampRing

    ring = StampRing()
    blocked = []
    iterator = iter(ring.wrap(_slow(6, DELAY_S)))
    for _ in range(6):
        asked = time.perf_counter()
        next(iterator)
        blocked.append(time.perf_counter() - asked)
    table = _table(ring)
    for index in range(1, 6):
        stamp = table.get((1, index))
        assert stamp is not None and stamp.requested is not None
        wait = stamp.ts - stamp.requested
        # Measured inside next(): never longer than it, and most of the injected delay.
        assert wait <= blocked[index] + 1e-4
        assert wait > DELAY_S * 0.5


def test_prefetched_elements_wait_nothing_and_each_iterator_is_a_generation() -> None:
    from trainer_agent.capture.input_wait import StampRing

    ring = StampRing()
    wrapped = ring.wrap(_slow(5, DELAY_S))
    for _ in range(2):  # two iterators: generations 1 and 2
        for _element in wrapped:
            time.sleep(3 * DELAY_S)  # a slow consumer: the prefetch (before the stage) fills
    table = _table(ring)
    assert sorted(table.first_stamps()) == [1, 2]
    for index in range(1, 5):
        stamp = table.get((2, index))
        assert stamp is not None and stamp.requested is not None
        assert stamp.ts - stamp.requested < DELAY_S / 2  # not the production time
    assert table.get((2, 0)) is not None and table.get((3, 0)) is None


def test_a_pipeline_that_already_prefetches_keeps_its_own_prefetch() -> None:
    from trainer_agent.capture.input_wait import StampRing
    from trainer_agent.capture.pipeline import describe_pipeline

    ds = _slow(4, 0.0).prefetch(2)
    stages = describe_pipeline(StampRing().wrap(ds))["stages"]
    assert stages.count("Prefetch") == 1
    stages = describe_pipeline(StampRing().wrap(_slow(4, 0.0)))["stages"]
    assert stages.count("Prefetch") == 1  # added before the stage, as tf.data would
    wrapped = StampRing().wrap(_slow(4, 0.0))
    assert wrapped.options().experimental_optimization.inject_prefetch is False
