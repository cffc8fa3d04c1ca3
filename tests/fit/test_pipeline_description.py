"""`describe_pipeline` tells the diagnosis what a tf.data pipeline does."""

import pytest

from trainer_agent.capture.pipeline import describe_pipeline

tf = pytest.importorskip("tensorflow")


def test_serial_pipeline_without_prefetch_is_described_so() -> None:
    ds = tf.data.Dataset.range(8).map(lambda x: x + 1).batch(2)
    described = describe_pipeline(ds)
    assert described["prefetch"] is False
    assert described["serial_map"] is True and described["parallel_map"] is False


def test_fed_pipeline_is_described_so() -> None:
    ds = tf.data.Dataset.range(8).interleave(
        lambda x: tf.data.Dataset.range(2), num_parallel_calls=tf.data.AUTOTUNE
    )
    ds = ds.map(lambda x: x, num_parallel_calls=tf.data.AUTOTUNE).cache().batch(2)
    described = describe_pipeline(ds.prefetch(tf.data.AUTOTUNE))
    assert described["prefetch"] and described["parallel_map"] and described["cache"]
    assert described["parallel_interleave"] and not described["serial_map"]


def test_something_not_a_dataset_is_described_as_unknown() -> None:
    assert describe_pipeline(object())["stages"] == ["object"]


def test_prefetch_last_tells_a_prefetch_at_the_end_from_one_inside() -> None:
    ds = tf.data.Dataset.range(8).prefetch(2).map(lambda x: x + 1).batch(2)
    described = describe_pipeline(ds)
    assert described["prefetch"] and not described["prefetch_last"]
    flat = tf.data.Dataset.range(2).flat_map(lambda x: tf.data.Dataset.range(3))
    assert describe_pipeline(flat.prefetch(1).with_options(tf.data.Options()))["prefetch_last"]
    assert describe_pipeline(flat)["flat_map"]
