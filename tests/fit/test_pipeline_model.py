"""tf.data's autotuning model turned into stages (trainer_agent/capture/pipeline_model.py), on real
protos of small real pipelines on the CPU, and the train_function wrapper in a real fit."""

import time

import numpy as np
import pytest
import tensorflow as tf

from trainer_agent.capture.dataset_graph import read_dataset
from trainer_agent.capture.pipeline_model import (
    PipelineSource,
    is_inner,
    is_users,
    kind_of,
    stages_from_proto,
    with_parallelism_shown,
)
from trainer_agent.capture.recorder import Recorder
from trainer_agent.capture.train_function import (
    is_watched,
    unwatch_train_function,
    watch_train_function,
)

MAP_KINDS = ("map", "parallel_map", "map_and_batch")


def _sleepy(delay_s: float):
    def sleepy_decode(x):
        out = tf.numpy_function(lambda v: (time.sleep(delay_s), v)[1], [x], x.dtype)
        return tf.ensure_shape(out, x.shape)

    return sleepy_decode


def _read(dataset, elements: int, tree=None, stamped=False):
    iterator = iter(dataset)
    for _ in range(elements):
        next(iterator)
    proto = tf.data.experimental.get_model_proto(iterator)
    return stages_from_proto(proto, tree, stamped=stamped)


@pytest.mark.parametrize(
    ("op", "kind"),
    [
        ("ParallelMapV2", "parallel_map"),
        ("TFRecordDataset", "file_reader"),
        ("Generator", "generator"),
        ("BatchV2", "batch"),
        ("ParallelInterleaveDatasetV4", "parallel_interleave"),
        ("MemoryCacheImpl", "cache"),
        ("SomethingNew", "somethingnew"),
    ],
)
def test_op_names_become_kinds(op: str, kind: str) -> None:
    assert kind_of(op) == kind


def test_generator_map_filter_batch_prefetch_in_order_with_function_names() -> None:
    def numbers():
        yield from range(10_000)

    def scale(x):
        return tf.cast(x, tf.float32) * 2.0

    def keep_all(x):
        return x >= 0

    dataset = (
        tf.data.Dataset.from_generator(numbers, output_signature=tf.TensorSpec((), tf.int64))
        .map(scale, num_parallel_calls=2)
        .filter(keep_all)
        .batch(8)
        .prefetch(2)
    )
    stages = _read(dataset, 20, read_dataset(dataset))
    kinds = [s["kind"] for s in stages]
    assert [s["position"] for s in stages] == list(range(len(stages)))
    assert kinds.index("generator") < kinds.index("parallel_map") < kinds.index("filter")
    assert kinds[-2:] == ["batch", "prefetch"]
    by_kind = {s["kind"]: s for s in stages}
    assert by_kind["parallel_map"]["function"] == "scale"
    assert by_kind["parallel_map"]["parallelism"] == 2
    assert by_kind["filter"]["function"] == "keep_all"
    assert by_kind["prefetch"]["buffer_size"] == 2
    # The consumer took 20 batches of 8: the stages before batch produced at least 160.
    assert by_kind["batch"]["elements"] >= 20
    assert by_kind["generator"]["elements"] >= 160
    assert by_kind["batch"]["bytes_per_element"] == 8 * 4


def test_the_slow_stage_has_the_largest_time_per_element() -> None:
    fast = np.arange(4000, dtype=np.float32)
    dataset = (
        tf.data.Dataset.from_tensor_slices(fast)
        .map(lambda x: x + 1, num_parallel_calls=2)
        .map(_sleepy(0.002))
        .batch(4)
    )
    stages = _read(dataset, 10, read_dataset(dataset))
    slowest = max(stages, key=lambda s: s["ms_per_element"] or 0)
    assert slowest["kind"] in MAP_KINDS
    assert slowest["function"] == "sleepy_decode"


def test_tfrecord_files_read_through_an_interleave(tmp_path) -> None:
    paths = []
    for i in range(3):
        path = str(tmp_path / f"part-{i}.tfrecord")
        with tf.io.TFRecordWriter(path) as writer:
            for j in range(50):
                writer.write(f"{i}-{j}".encode())
        paths.append(path)

    def read_file(path):
        return tf.data.TFRecordDataset(path)

    dataset = (
        tf.data.Dataset.from_tensor_slices(paths)
        .interleave(read_file, cycle_length=2, num_parallel_calls=2)
        .batch(5)
    )
    stages = _read(dataset, 10, read_dataset(dataset))
    kinds = [s["kind"] for s in stages]
    readers = [s for s in stages if s["kind"] == "file_reader"]
    assert len(readers) == 1, kinds  # the interleave's readers, summed into one stage
    assert readers[0]["elements"] >= 50
    interleave = stages[kinds.index("parallel_interleave")]
    assert interleave["function"] == "read_file"
    assert kinds.index("file_reader") < kinds.index("parallel_interleave")
    # Made inside read_file: marked so, with no function of its own.
    assert is_inner(readers[0]) and readers[0]["function"] is None
    assert readers[0]["name"].startswith("ParallelInterleave")


def _fast(name):
    def stage(a):
        return a * 1.0001

    stage.__name__ = name
    return stage


def _slow(name, delay_s=0.001):
    def stage(a):
        out = tf.numpy_function(lambda v: (time.sleep(delay_s), v)[1], [a], a.dtype,
                                stateful=True)  # fmt: skip
        return tf.ensure_shape(out, a.shape)

    stage.__name__ = name
    return stage


def test_functions_are_named_by_the_node_that_runs_them_not_by_count() -> None:
    """batch -> map(fast) -> map(slow) -> map(fast): tf.data makes the stateless maps
    parallel."""
    rows = np.zeros((2000, 4), np.float32)
    dataset = (
        tf.data.Dataset.from_tensor_slices(rows)
        .batch(8)
        .map(_fast("fast_normalize"))
        .map(_slow("slow_decode", 0.005))
        .map(_fast("fast_clip"))
    )
    stages = _read(dataset, 20, read_dataset(dataset))
    functions = [(s["kind"], s["function"]) for s in stages if s["function"]]
    assert [f for _, f in functions] == ["fast_normalize", "slow_decode", "fast_clip"]
    # The slow time is under the slow function's name (a parallel map's own time can count
    # its waits on a slow input, so its neighbours are not compared).
    slow = next(s for s in stages if s["function"] == "slow_decode")
    assert slow["kind"] == "map" and slow["ms_per_element"] >= 4.5
    # Every stage is the user's: a parallel map is asynchronous, so tf.data appends no
    # prefetch after it, and Stoker appends nothing.
    assert stages[-1]["function"] == "fast_clip"
    assert all(is_users(s) for s in stages)
    assert "zip" not in [s["kind"] for s in stages]


def test_a_map_fused_with_its_batch_keeps_its_name_and_autotune_shows() -> None:
    rows = np.zeros((2000, 4), np.float32)
    dataset = (
        tf.data.Dataset.from_tensor_slices(rows)
        .map(_slow("slow", 0.0002), num_parallel_calls=tf.data.AUTOTUNE)
        .batch(16)
        .prefetch(tf.data.AUTOTUNE)
    )
    stages = _read(dataset, 10, read_dataset(dataset))
    fused = [s for s in stages if s["kind"] == "map_and_batch"]
    assert len(fused) == 1 and fused[0]["function"] == "slow"
    assert fused[0]["name"] == "MapAndBatch (autotune)"
    assert is_users(stages[-1])  # the user's own prefetch


def test_from_generator_is_a_generator_stage_not_tf_datas_flat_map() -> None:
    def numbers():
        yield from range(1000)

    dataset = tf.data.Dataset.from_generator(
        numbers, output_signature=tf.TensorSpec((), tf.int64)
    ).batch(4)
    stages = _read(dataset, 5, read_dataset(dataset))
    assert "flat_map_fn" not in [s["function"] for s in stages]
    assert [s["function"] for s in stages if s["kind"] == "generator"] == ["numbers"]


def test_keras_fit_hands_the_iterator_to_the_sampler_source() -> None:
    x = np.random.rand(256, 4).astype("float32")
    y = np.random.rand(256, 1).astype("float32")

    def scale(a, b):
        return a * 2.0, b

    dataset = tf.data.Dataset.from_tensor_slices((x, y)).map(scale).batch(16).prefetch(2)
    source = PipelineSource(interval_s=1.0)
    source.describe(read_dataset(dataset), stamped=False)
    recorder = Recorder(max_rows=100)
    keras = tf.keras
    model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(1)])
    model.compile("sgd", "mse")

    class ReadMidway(keras.callbacks.Callback):
        def on_train_begin(self, logs=None):
            watch_train_function(self.model, source)

        def on_train_batch_end(self, batch, logs=None):
            if batch == 8:
                source.sample(123.0, recorder)

        def on_train_end(self, logs=None):
            unwatch_train_function(self.model)

    model.fit(dataset, epochs=1, callbacks=[ReadMidway()], verbose=0)
    section = recorder.drain()["pipeline"]
    assert section["t"] == [123.0]
    assert section["source"] == ["autotune_model"]
    assert section["read_us"][0] > 0
    stages = section["stages"][0]
    kinds = [s["kind"] for s in stages]
    assert kinds[0] == "tensor_slices" and kinds[-1] == "prefetch"
    assert "zip" not in kinds and "range" not in kinds
    assert [s["function"] for s in stages if s["kind"] in MAP_KINDS] == ["scale"]
    assert not is_watched(model)  # restored after fit


def test_an_iterator_without_a_model_reports_unavailable_once() -> None:
    source = PipelineSource(interval_s=0.5)
    source.watch(iter([1, 2, 3]))  # not tf.data
    recorder = Recorder(max_rows=10)
    source.sample(1.0, recorder)
    source.sample(2.0, recorder)  # before the interval: no second read
    section = recorder.drain()["pipeline"]
    assert section["source"] == ["unavailable"] and section["stages"] == [[]]


def test_monitor_iterate_hands_its_tf_data_iterator_to_the_source(monkeypatch) -> None:
    from tests.harness.support import free_port
    from trainer_agent import Monitor

    monkeypatch.setenv("STOKER_SPOOL_DIR", "off")
    monkeypatch.setenv("STOKER_CLOSE_TIMEOUT_S", "0.5")  # no server here

    def double(x):
        return x * 2

    dataset = tf.data.Dataset.range(1000).map(double, num_parallel_calls=2).batch(10)
    recorder = Recorder(max_rows=10)
    monitor = Monitor(server=f"http://127.0.0.1:{free_port()}", run_name="loop").start()
    try:
        for step, _ in enumerate(monitor.iterate(dataset)):
            if step == 20:
                monitor.session.pipeline.sample(5.0, recorder)
                break
    finally:
        monitor.close()
    stages = recorder.drain()["pipeline"]["stages"][0]
    assert stages[0]["kind"] == "range"
    assert stages[-1]["kind"] in ("batch", "map_and_batch")  # tf.data may fuse the map in
    assert [s["function"] for s in stages if s["function"]] == ["double"]


def test_a_parallelism_below_what_the_stage_shows_between_two_reads_is_raised() -> None:
    """MapAndBatch under AUTOTUNE: the model reads 1 thread at 100 ms a batch, while 20
    batches came in the 0.5 s between two reads: 4 threads at work."""
    stages = [
        {"name": "TensorSlice", "elements": 960, "ms_per_element": 0.01, "parallelism": 1.0},
        {"name": "MapAndBatch (autotune)", "elements": 60, "ms_per_element": 100.0,
         "parallelism": 1.0},
    ]  # fmt: skip
    previous = [("TensorSlice", 640), ("MapAndBatch (autotune)", 40)]
    with_parallelism_shown(stages, previous, 0.5)
    assert stages[1]["parallelism"] == pytest.approx(4.0)
    assert stages[0]["parallelism"] == 1.0  # 640 elements/s at 0.01 ms: well under 1 thread
    other = [dict(s, parallelism=1.0) for s in stages]
    with_parallelism_shown(other, [("Other", 0), ("MapAndBatch", 0)], 0.5)  # not the same
    assert other[1]["parallelism"] == 1.0
    # num_parallel_calls=2, written by the user: a busy host's slower calls show no third thread
    fixed = [{"name": "ParallelMapV2", "elements": 60, "ms_per_element": 100.0,
              "parallelism": 2.0}]  # fmt: skip
    with_parallelism_shown(fixed, [("ParallelMapV2", 30)], 1.0)
    assert fixed[0]["parallelism"] == 2.0
