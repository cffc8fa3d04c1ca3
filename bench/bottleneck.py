"""Does Stoker name the stage that starves the steps? Pipelines whose slow stage is known.

GPU-like regime (`tests.harness.gpu_like`): the step holds `--hold-ms` without the CPU once its
batch arrived; the slow stage sleeps, so the pipeline and the step do not share the CPUs. The step
time C with cached input is measured first, in the same run; each slow stage is given
MARGIN x C a batch (a stage on k threads k x that, so it still starves).

For each scenario, `--runs` one-epoch fits of the pipeline wrapped as `cb.wrap` and `stoker
run` wrap it (Stoker's stamping stage after it; `--no-wrap`: as is); during each, the agent's
`PipelineSource` reads tf.data's autotuning model (through the same `train_function` wrapper
StokerCallback installs) three quarters into the epoch, and `find_bottleneck` (the server's
attribution, called directly: no server) judges the stages with the step demand 1/C and the
wait share 1 - C / (median step interval). Columns: "stage", the right stage kind named (none
for the fed runs); "function", that and the user's function name right (the interleave's own
function for a stage inside it; all of a fused stage's functions, and the one its advice
singles out).

Follow the advice: for the scenarios with a `followed` variant (the first advice applied to
the same shape), `--follow-runs` fits of it; the median wait must drop below 0.7 of the
original's, or the advice must change: the same advice again (its text without the stage
label) is a FAIL either way.

Also: the cost of one model read (get_model_proto + conversion, µs) and that cost spread
over the steps of the default 5 s interval: the first read of each pipeline (it searches how
the user's datasets became the model's nodes, and the first of a set of options probes
tf.data's rewrites), and a later read of the same pipeline (the search is cached by the
model's shape), as a run reads every 5 s.

Usage: .venv/bin/python -m bench.bottleneck [--runs 10] [--follow-runs 3] [--steps 40]
       [--hold-ms 20] [--only NAME] [--explain] [--no-wrap]
"""

import argparse
import os
import re
import statistics
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np
import tensorflow as tf

from stoker_server.diagnosis.bottleneck import capacities, find_bottleneck
from tests.harness.gpu_like import MARGIN, held_model, measure_step_s
from trainer_agent import StokerCallback
from trainer_agent.capture.dataset_graph import read_dataset
from trainer_agent.capture.pipeline_model import DEFAULT_INTERVAL_S, PipelineSource
from trainer_agent.capture.recorder import Recorder
from trainer_agent.capture.train_function import unwatch_train_function, watch_train_function

BATCH = 16
FEATURES = 8


def _sleeper(delay_s: float, name: str, *, stateful: bool = True) -> Callable[..., Any]:
    def sleep(v: np.ndarray) -> np.ndarray:
        time.sleep(delay_s)
        return v

    def stage(a: Any, b: Any) -> Any:
        out = tf.numpy_function(sleep, [a], a.dtype, stateful=stateful)
        return tf.ensure_shape(out, a.shape), b

    stage.__name__ = name
    return stage


def _fast(name: str) -> Callable[..., Any]:
    def stage(a: Any, b: Any) -> Any:
        return a * 1.0001, b

    stage.__name__ = name
    return stage


def _xy(n: int) -> tuple[np.ndarray, np.ndarray]:
    x = np.random.default_rng(0).normal(size=(n, FEATURES)).astype("float32")
    return x, x[:, :1]


def _private_threads(ds: tf.data.Dataset) -> tf.data.Dataset:
    options = tf.data.Options()
    options.threading.private_threadpool_size = 8  # the threads sleep, not the CPUs
    return ds.with_options(options)


def _rows(n: int) -> tf.data.Dataset:
    return tf.data.Dataset.from_tensor_slices(_xy(n))


def generator(n: int, batch_delay_s: float) -> tf.data.Dataset:
    x, y = _xy(n)

    def rows():
        for i in range(n):
            time.sleep(batch_delay_s / BATCH)
            yield x[i], y[i]

    signature = (tf.TensorSpec((FEATURES,), tf.float32), tf.TensorSpec((1,), tf.float32))
    ds = tf.data.Dataset.from_generator(rows, output_signature=signature)
    return ds.map(_fast("scale"), num_parallel_calls=2).batch(BATCH).prefetch(2)


def _write_records(directory: str, n: int, files: int = 4) -> list[str]:
    x, _ = _xy(n)
    paths = []
    for f in range(files):
        path = os.path.join(directory, f"part-{f}.tfrecord")
        with tf.io.TFRecordWriter(path) as writer:
            for row in x[f::files]:
                writer.write(row.tobytes())
        paths.append(path)
    return paths


def _parse(r: Any) -> Any:
    a = tf.reshape(tf.io.decode_raw(r, tf.float32), [FEATURES])
    return a, a[:1]


def _records(
    n: int, per_record_s: float, how: str, cycle_length: int = 1, parallel: int | None = None
) -> tf.data.Dataset:
    """TFRecord shards in a temp dir, each record read slowly (a slow disk or network file
    system), through `how`: "flat_map" or "interleave"."""
    paths = _write_records(tempfile.mkdtemp(prefix="stoker-bench-"), n)

    def slow_read(v: bytes) -> bytes:
        time.sleep(per_record_s)
        return v

    def read_file(path: Any) -> tf.data.Dataset:
        records = tf.data.TFRecordDataset(path)
        return records.map(
            lambda r: tf.ensure_shape(
                tf.numpy_function(slow_read, [r], tf.string, stateful=True), []
            )
        )

    files = tf.data.Dataset.from_tensor_slices(paths)
    if how == "flat_map":
        reads = files.flat_map(read_file)
    else:
        reads = files.interleave(read_file, cycle_length=cycle_length, num_parallel_calls=parallel)
    return _private_threads(reads.map(_parse, num_parallel_calls=2).batch(BATCH).prefetch(2))


def file_reads(n: int, batch_delay_s: float) -> tf.data.Dataset:
    return _records(n, batch_delay_s / BATCH, "flat_map")


def file_reads_followed(n: int, batch_delay_s: float) -> tf.data.Dataset:
    return _records(n, batch_delay_s / BATCH, "interleave", 4, tf.data.AUTOTUNE)


def interleave_cycle_1(n: int, batch_delay_s: float) -> tf.data.Dataset:
    return _records(n, batch_delay_s / BATCH, "interleave", 1)


def parallel_interleave_shards(n: int, batch_delay_s: float) -> tf.data.Dataset:
    # Two shards read at once, each record twice the serial delay: still MARGIN x the step.
    return _records(n, 2 * batch_delay_s / BATCH, "interleave", 2, 2)


def serial_map(n: int, batch_delay_s: float) -> tf.data.Dataset:
    ds = _rows(n).map(_sleeper(batch_delay_s / BATCH, "decode"))
    return ds.batch(BATCH).prefetch(2)


def serial_map_followed(n: int, batch_delay_s: float) -> tf.data.Dataset:
    ds = _rows(n).map(
        _sleeper(batch_delay_s / BATCH, "decode"), num_parallel_calls=tf.data.AUTOTUNE
    )
    return _private_threads(ds.batch(BATCH).prefetch(2))


def under_parallel_map(n: int, batch_delay_s: float, *, cache: bool = False) -> tf.data.Dataset:
    # Two threads, each element twice the serial delay: still MARGIN x the step a batch.
    ds = _rows(n).map(_fast("normalize"), num_parallel_calls=tf.data.AUTOTUNE)
    ds = ds.map(_sleeper(2 * batch_delay_s / BATCH, "augment"), num_parallel_calls=2)
    if cache:
        ds = ds.cache()
    ds = ds.map(_fast("clip"), num_parallel_calls=tf.data.AUTOTUNE)
    return _private_threads(ds.batch(BATCH).prefetch(2))


def under_parallel_map_cached(n: int, batch_delay_s: float) -> tf.data.Dataset:
    return under_parallel_map(n, batch_delay_s, cache=True)


def map_before_batch(n: int, batch_delay_s: float) -> tf.data.Dataset:
    # A per-element map ahead of batch whose work would be one call on the batch.
    ds = _rows(n).map(_sleeper(batch_delay_s / BATCH, "per_element_resize"))
    ds = ds.batch(BATCH).map(_fast("batch_cast"), num_parallel_calls=2)
    return ds.prefetch(2)


def slow_between_fast(n: int, batch_delay_s: float) -> tf.data.Dataset:
    ds = _rows(n).batch(BATCH).map(_fast("fast_normalize"))
    ds = ds.map(_sleeper(batch_delay_s, "slow_decode")).map(_fast("fast_normalize"))
    return ds.prefetch(4)


def single_named_map(n: int, batch_delay_s: float, parallel: int | None = None) -> tf.data.Dataset:
    ds = _rows(n).batch(BATCH).map(_sleeper(batch_delay_s, "slow_decode"), parallel)
    return _private_threads(ds.prefetch(2))


def single_named_map_followed(n: int, batch_delay_s: float) -> tf.data.Dataset:
    return single_named_map(n, batch_delay_s, tf.data.AUTOTUNE)


def heavy_augment_2(n: int, batch_delay_s: float) -> tf.data.Dataset:
    ds = _rows(n).batch(BATCH)
    ds = ds.map(_sleeper(2 * batch_delay_s, "heavy_augment"), num_parallel_calls=2)
    return _private_threads(ds.prefetch(2))


def _read_shard(per_row_s: float) -> Callable[[Any], tf.data.Dataset]:
    x, y = _xy(64)

    def read_shard(i: Any) -> tf.data.Dataset:
        return tf.data.Dataset.from_tensor_slices((x, y)).map(_sleeper(per_row_s, "read_row"))

    return read_shard


def serial_interleave(n: int, batch_delay_s: float, followed: bool = False) -> tf.data.Dataset:
    shards = tf.data.Dataset.range(max(1, n // 64 + 1))
    read = _read_shard(batch_delay_s / BATCH)
    if followed:
        ds = shards.interleave(read, cycle_length=8, num_parallel_calls=tf.data.AUTOTUNE)
    else:
        ds = shards.interleave(read, cycle_length=1)
    return _private_threads(ds.batch(BATCH).prefetch(2))


def serial_interleave_followed(n: int, batch_delay_s: float) -> tf.data.Dataset:
    return serial_interleave(n, batch_delay_s, followed=True)


def flat_map_shards(n: int, batch_delay_s: float) -> tf.data.Dataset:
    shards = tf.data.Dataset.range(max(1, n // 64 + 1))
    ds = shards.flat_map(_read_shard(batch_delay_s / BATCH))
    return ds.batch(BATCH).prefetch(2)


def map_and_batch_autotune(n: int, batch_delay_s: float, *, cache: bool = False) -> tf.data.Dataset:
    # The autotuner's most threads are the host's cores: slow enough to starve even then.
    per_element_s = batch_delay_s * (os.cpu_count() or 1) / BATCH
    ds = _rows(n).map(_sleeper(per_element_s, "slow"), num_parallel_calls=tf.data.AUTOTUNE)
    if cache:
        ds = ds.cache()
    return ds.batch(BATCH).prefetch(tf.data.AUTOTUNE)


def map_and_batch_autotune_cached(n: int, batch_delay_s: float) -> tf.data.Dataset:
    return map_and_batch_autotune(n, batch_delay_s, cache=True)


def heavy_filter(n: int, batch_delay_s: float) -> tf.data.Dataset:
    per_element_s = batch_delay_s / BATCH

    def keep(v: np.ndarray) -> np.bool_:
        time.sleep(per_element_s)
        return np.bool_(True)

    def heavy_filter(a: Any, b: Any) -> Any:
        return tf.ensure_shape(tf.numpy_function(keep, [a], tf.bool, stateful=True), [])

    return _rows(n).filter(heavy_filter).batch(BATCH).prefetch(2)


def _kept(a: Any, b: Any, keep: Any) -> Any:
    return keep


def _without_flag(a: Any, b: Any, keep: Any) -> Any:
    return a, b


def heavy_filter_followed(n: int, batch_delay_s: float) -> tf.data.Dataset:
    # The advice: the expensive part in a parallel map, the filter on its result.
    per_element_s = batch_delay_s / BATCH

    def flag(v: np.ndarray) -> np.bool_:
        time.sleep(per_element_s)
        return np.bool_(True)

    def compute_keep(a: Any, b: Any) -> Any:
        keep = tf.ensure_shape(tf.numpy_function(flag, [a], tf.bool, stateful=True), [])
        return a, b, keep

    ds = _rows(n).map(compute_keep, num_parallel_calls=tf.data.AUTOTUNE)
    ds = ds.filter(_kept).map(_without_flag)
    return _private_threads(ds.batch(BATCH).prefetch(2))


def cache_after_slow(n: int, batch_delay_s: float) -> tf.data.Dataset:
    ds = _rows(n).map(_sleeper(batch_delay_s / BATCH, "slow_decode")).cache()
    return ds.shuffle(64).batch(BATCH).prefetch(2)


def large_shuffle(n: int, batch_delay_s: float) -> tf.data.Dataset:
    ds = _rows(n).map(_sleeper(batch_delay_s / BATCH, "load"))
    # 5 batches' worth at 40 steps: the model read (3/4 into the epoch) comes before the
    # buffer holds the last elements (then the map's iterator is gone from the model).
    return ds.shuffle(max(BATCH, n // 8)).batch(BATCH).prefetch(2)


def py_function_decode(n: int, batch_delay_s: float) -> tf.data.Dataset:
    per_element_s = batch_delay_s / BATCH

    def slow_identity(v: Any) -> Any:
        time.sleep(per_element_s)
        return v

    def py_decode(a: Any, b: Any) -> Any:
        out = tf.py_function(slow_identity, [a], a.dtype)
        return tf.ensure_shape(out, a.shape), b

    return _rows(n).map(py_decode).batch(BATCH).prefetch(2)


def fed(n: int, batch_delay_s: float) -> tf.data.Dataset:
    return _rows(n).map(_fast("scale"), num_parallel_calls=2).batch(BATCH).cache().prefetch(2)


def fed_short(n: int, batch_delay_s: float) -> tf.data.Dataset:
    # The demo's fed shape: cache + parallel map + prefetch.
    ds = _rows(n).cache().map(_fast("scale"), num_parallel_calls=tf.data.AUTOTUNE)
    return ds.batch(BATCH).prefetch(tf.data.AUTOTUNE)


# --- issue 38's shapes: tf.data rewrites around the slow stage, and kinds the bench lacked ---


def _batches(n: int) -> tf.data.Dataset:
    """The rows in batches, repeated: a fit with steps_per_epoch, as in a notebook."""
    return _rows(n).batch(BATCH).repeat()


def three_maps(n: int, batch_delay_s: float) -> tf.data.Dataset:
    ds = _batches(n).map(_fast("fast_normalize")).map(_sleeper(batch_delay_s, "slow_decode"))
    return ds.map(_fast("fast_normalize")).prefetch(4)


def two_parallel_maps(n: int, batch_delay_s: float) -> tf.data.Dataset:
    ds = _batches(n).map(_fast("fast_normalize"), num_parallel_calls=8)
    ds = ds.map(_sleeper(2 * batch_delay_s, "heavy_augment"), num_parallel_calls=2)
    return _private_threads(ds.prefetch(2))


def shuffled_map_batch(n: int, batch_delay_s: float) -> tf.data.Dataset:
    ds = _rows(n).repeat().shuffle(64).map(_sleeper(batch_delay_s / BATCH, "slow_decode"))
    return ds.batch(BATCH).prefetch(2)


def records_augment(n: int, batch_delay_s: float) -> tf.data.Dataset:
    paths = _write_records(tempfile.mkdtemp(prefix="stoker-bench-"), n)
    ds = tf.data.TFRecordDataset(paths).repeat().map(_parse)
    ds = ds.map(_sleeper(batch_delay_s / BATCH, "augment"))
    return ds.batch(BATCH).prefetch(2)


def zipped_slow_map(n: int, batch_delay_s: float) -> tf.data.Dataset:
    x, y = _xy(n)
    pair = (tf.data.Dataset.from_tensor_slices(x), tf.data.Dataset.from_tensor_slices(y))
    ds = tf.data.Dataset.zip(pair).repeat().map(_sleeper(batch_delay_s / BATCH, "slow_decode"))
    return ds.batch(BATCH).prefetch(2)


def batch_repeat_serial_map(n: int, batch_delay_s: float) -> tf.data.Dataset:
    return _batches(n).map(_sleeper(batch_delay_s, "slow_decode"))


def fused_maps(n: int, batch_delay_s: float) -> tf.data.Dataset:
    """map_fusion on: tf.data runs the three maps as one; slow_decode calls Python."""
    slow = _sleeper(batch_delay_s, "slow_decode", stateful=False)
    ds = _batches(n).map(_fast("fast_normalize")).map(slow).map(_fast("fast_normalize"))
    options = tf.data.Options()
    options.experimental_optimization.map_fusion = True
    options.experimental_optimization.map_parallelization = False
    return ds.with_options(options).prefetch(4)


def map_then_slow_filter(n: int, batch_delay_s: float) -> tf.data.Dataset:
    per_element_s = batch_delay_s / BATCH

    def keep(v: np.ndarray) -> np.bool_:
        time.sleep(per_element_s)
        return np.bool_(True)

    def slow_keep(a: Any, b: Any) -> Any:
        return tf.ensure_shape(tf.numpy_function(keep, [a], tf.bool, stateful=True), [])

    ds = _rows(n).repeat().map(_fast("fast_normalize"), num_parallel_calls=2).filter(slow_keep)
    return ds.batch(BATCH).prefetch(2)


def four_maps_into_batch(n: int, batch_delay_s: float) -> tf.data.Dataset:
    ds = _rows(n).repeat().map(_fast("decode")).map(_fast("resize")).map(_fast("normalize"))
    ds = ds.map(_sleeper(batch_delay_s / BATCH, "slow_augment"))
    return ds.batch(BATCH).prefetch(2)


def text_lines(n: int, batch_delay_s: float) -> tf.data.Dataset:
    path = os.path.join(tempfile.mkdtemp(prefix="stoker-bench-"), "rows.csv")
    x, _ = _xy(n)
    with open(path, "w") as handle:
        handle.write("\n".join(",".join(f"{v:.4f}" for v in row) for row in x))
    per_element_s = batch_delay_s / BATCH

    def parse(v: bytes) -> np.ndarray:
        time.sleep(per_element_s)
        return np.array(v.decode().split(","), np.float32)

    def slow_parse(line: Any) -> Any:
        a = tf.ensure_shape(tf.numpy_function(parse, [line], tf.float32, stateful=True),
                            [FEATURES])  # fmt: skip
        return a, a[:1]

    return tf.data.TextLineDataset(path).repeat().map(slow_parse).batch(BATCH).prefetch(2)


def fixed_length_records(n: int, batch_delay_s: float) -> tf.data.Dataset:
    path = os.path.join(tempfile.mkdtemp(prefix="stoker-bench-"), "rows.bin")
    _xy(n)[0].tofile(path)
    per_element_s = batch_delay_s / BATCH

    def decode(v: bytes) -> np.ndarray:
        time.sleep(per_element_s)
        return np.frombuffer(v, np.float32).copy()

    def slow_parse(record: Any) -> Any:
        a = tf.ensure_shape(tf.numpy_function(decode, [record], tf.float32, stateful=True),
                            [FEATURES])  # fmt: skip
        return a, a[:1]

    ds = tf.data.FixedLengthRecordDataset(path, FEATURES * 4).repeat().map(slow_parse)
    return ds.batch(BATCH).prefetch(2)


def concatenated_sources(n: int, batch_delay_s: float) -> tf.data.Dataset:
    half = _rows(n // 2 + 1)
    ds = half.concatenate(_rows(n // 2 + 1)).repeat()
    return ds.map(_sleeper(batch_delay_s / BATCH, "slow_decode")).batch(BATCH).prefetch(2)


def sampled_sources(n: int, batch_delay_s: float) -> tf.data.Dataset:
    ds = tf.data.Dataset.sample_from_datasets([_rows(n).repeat(), _rows(n).repeat()], seed=1)
    return ds.map(_sleeper(batch_delay_s / BATCH, "slow_decode")).batch(BATCH).prefetch(2)


def windows_flat_map(n: int, batch_delay_s: float) -> tf.data.Dataset:
    def rows_of(a: Any, b: Any) -> tf.data.Dataset:
        return tf.data.Dataset.zip((a, b))

    ds = _rows(n).repeat().window(4).flat_map(rows_of)
    return ds.map(_sleeper(batch_delay_s / BATCH, "slow_decode")).batch(BATCH).prefetch(2)


def slow_scan(n: int, batch_delay_s: float) -> tf.data.Dataset:
    per_element_s = batch_delay_s / BATCH

    def wait(v: np.ndarray) -> np.ndarray:
        time.sleep(per_element_s)
        return v

    def running_mean(state: Any, row: Any) -> Any:
        a, b = row
        out = tf.ensure_shape(tf.numpy_function(wait, [a], a.dtype, stateful=True), a.shape)
        return state + 1.0, (out, b)

    ds = _rows(n).repeat().scan(tf.constant(0.0), running_mean)
    return ds.batch(BATCH).prefetch(2)


def map_then_padded_batch(n: int, batch_delay_s: float) -> tf.data.Dataset:
    ds = _rows(n).repeat().map(_sleeper(batch_delay_s / BATCH, "slow_decode"))
    return ds.padded_batch(BATCH).prefetch(2)


def enumerated_rows(n: int, batch_delay_s: float) -> tf.data.Dataset:
    slow = _sleeper(batch_delay_s / BATCH, "slow_decode")

    def drop_index(i: Any, row: Any) -> Any:
        return row

    ds = _rows(n).repeat().enumerate().map(drop_index).map(slow)
    return ds.batch(BATCH).prefetch(2)


MAPS = ("map", "parallel_map", "map_and_batch")


@dataclass
class Scenario:
    name: str
    build: Callable[[int, float], tf.data.Dataset]  # (elements, slow delay a batch) -> dataset
    kinds: tuple[str, ...]  # the stage kinds that are right; () for a fed run: none named
    function: str | None = None  # the user's function(s) the stage must be named by
    followed: Callable[[int, float], tf.data.Dataset] | None = None  # the first advice applied
    focus: str | None = None  # of several fused functions, the one the advice must single out


SCENARIOS = [
    Scenario("generator source", generator, ("generator",), "rows"),
    Scenario("flat_map over slow files", file_reads, ("flat_map",), "read_file",
             file_reads_followed),
    Scenario("interleave cycle_length=1", interleave_cycle_1, ("interleave",), "read_file"),
    Scenario("serial map", serial_map, MAPS, "decode", serial_map_followed),
    Scenario("under-parallel map", under_parallel_map, MAPS, "augment",
             under_parallel_map_cached),
    Scenario("map before batch", map_before_batch, MAPS, "per_element_resize"),
    Scenario("slow map between fast maps", slow_between_fast, MAPS, "slow_decode"),
    Scenario("single named map", single_named_map, MAPS, "slow_decode",
             single_named_map_followed),
    Scenario("parallel map, 2 threads", heavy_augment_2, MAPS, "heavy_augment"),
    Scenario("serial interleave (range)", serial_interleave, ("interleave",), "read_shard",
             serial_interleave_followed),
    Scenario("map-and-batch AUTOTUNE", map_and_batch_autotune, MAPS, "slow",
             map_and_batch_autotune_cached),
    Scenario("parallel interleave, TFRecord", parallel_interleave_shards,
             ("parallel_interleave",), "read_file"),
    Scenario("heavy filter", heavy_filter, ("filter",), "heavy_filter", heavy_filter_followed),
    Scenario("flat_map shards", flat_map_shards, ("flat_map",), "read_shard"),
    Scenario("cache after slow stage", cache_after_slow, MAPS, "slow_decode"),
    Scenario("large shuffle buffer", large_shuffle, MAPS, "load"),
    Scenario("py_function decode", py_function_decode, MAPS, "py_decode"),
    # issue 38
    Scenario("three maps, slow middle (repeat)", three_maps, MAPS, "slow_decode"),
    Scenario("two parallel maps (repeat)", two_parallel_maps, MAPS, "heavy_augment"),
    Scenario("map+batch after shuffle", shuffled_map_batch, MAPS, "slow_decode"),
    Scenario("TFRecord + parse + augment", records_augment, MAPS, "augment"),
    Scenario("zip, then slow map", zipped_slow_map, MAPS, "slow_decode"),
    Scenario("batch, repeat, serial map", batch_repeat_serial_map, MAPS, "slow_decode"),
    Scenario("three maps fused (map_fusion)", fused_maps, MAPS,
             "fast_normalize+slow_decode+fast_normalize", focus="slow_decode"),
    Scenario("map, then slow filter", map_then_slow_filter, ("filter",), "slow_keep"),
    Scenario("four maps into a batch", four_maps_into_batch, MAPS, "slow_augment"),
    Scenario("text lines, slow parse", text_lines, MAPS, "slow_parse"),
    Scenario("fixed-length records", fixed_length_records, MAPS, "slow_parse"),
    Scenario("concatenate, then slow map", concatenated_sources, MAPS, "slow_decode"),
    Scenario("sample_from_datasets", sampled_sources, MAPS, "slow_decode"),
    Scenario("window + flat_map, slow map", windows_flat_map, MAPS, "slow_decode"),
    Scenario("slow scan", slow_scan, ("scan",), "running_mean"),
    Scenario("map, then padded_batch", map_then_padded_batch, MAPS, "slow_decode"),
    Scenario("enumerate, then slow map", enumerated_rows, MAPS, "slow_decode"),
    Scenario("fed", fed, ()),
    Scenario("fed, cache+AUTOTUNE+prefetch", fed_short, ()),
]  # fmt: skip


class _Probe(tf.keras.callbacks.Callback):
    """Step intervals, and one model read three quarters into the epoch (the one judged) and
    one more at the epoch's end (its cost only: a read of a model whose shape was seen)."""

    def __init__(self, source: PipelineSource, read_at: int, again_at: int) -> None:
        super().__init__()
        self.source, self.read_at, self.again_at = source, read_at, again_at
        self.begins: list[float] = []
        self.recorder = Recorder(max_rows=10)
        self.first_us: float | None = None
        self.later_us: float | None = None

    def on_train_begin(self, logs: Any = None) -> None:
        watch_train_function(self.model, self.source)

    def on_train_batch_begin(self, batch: int, logs: Any = None) -> None:
        self.begins.append(time.perf_counter())

    def on_train_batch_end(self, batch: int, logs: Any = None) -> None:
        if batch == self.read_at:
            self.source.sample(time.time(), self.recorder)
            self.first_us = self.source.last_read_us
        elif batch == self.again_at:
            self.source.sample(time.time(), Recorder(max_rows=10))
            if self.source.last_read_us != self.first_us:
                self.later_us = self.source.last_read_us

    def on_train_end(self, logs: Any = None) -> None:
        unwatch_train_function(self.model)


@dataclass
class Run:
    named: dict[str, Any] | None  # the bottleneck, or None
    wait_share: float
    read_us: float | None
    later_read_us: float | None
    stages: list[dict[str, Any]]


def run_once(
    build: Callable[[int, float], tf.data.Dataset],
    model: Any,
    step_s: float,
    steps: int,
    *,
    wrap: bool = True,
) -> Run:
    dataset = build(steps * BATCH, MARGIN * step_s)
    source = PipelineSource(interval_s=0.5)
    source.describe(read_dataset(dataset), stamped=wrap)
    probe = _Probe(source, read_at=steps * 3 // 4, again_at=steps - 1)
    fitted = StokerCallback(server="http://127.0.0.1:9").wrap(dataset) if wrap else dataset
    model.fit(fitted, epochs=1, steps_per_epoch=steps, callbacks=[probe], verbose=0)
    intervals = [b - a for a, b in zip(probe.begins[1:], probe.begins[2:], strict=False)]
    wait_share = max(0.0, 1.0 - step_s / statistics.median(intervals))
    section = probe.recorder.drain()["pipeline"]
    stages = section["stages"][0] if section["stages"] else []
    found = find_bottleneck(
        stages, demand_steps_per_s=1.0 / step_s, wait_share=wait_share, cpus=os.cpu_count()
    )
    named = None if found is None else found.model_dump()
    return Run(named, wait_share, probe.first_us, probe.later_us, stages)


def _advice(run: Run) -> str | None:
    """The first advice without its stage label ("stage 3 (map 'x')" moves as stages do)."""
    if run.named is None:
        return None
    return re.sub(r"^stage \d+ \([^)]*\) ", "", run.named["fix"])


def _explain(scenario: Scenario, run: Run, step_s: float) -> None:
    reached = (1.0 - run.wait_share) / step_s
    caps = capacities(run.stages, reached)
    print(f"  {scenario.name}: wait {run.wait_share:.0%}, reached {reached:.3g} steps/s")
    for stage, cap in zip(run.stages, caps, strict=True):
        print(
            f"    {stage['position']:2} {stage['kind']:20} {stage['name']:34} "
            f"{stage['function'] or '':16} par {stage['parallelism'] or 0:4.3g} "
            f"ms/el {stage['ms_per_element'] or 0:8.3g} el {stage['elements']:5} "
            f"buf {stage['buffered']}/{stage['buffer_size']} cap {cap:.3g}"
        )
    print(f"    named: {run.named and (run.named['kind'], run.named['function'])}")
    print(f"    fix: {run.named and run.named['fix']}")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=10)
    parser.add_argument("--follow-runs", type=int, default=3, help="runs of each advice followed")
    parser.add_argument("--steps", type=int, default=40, help="steps per fit")
    parser.add_argument("--hold-ms", type=float, default=20.0, help="GPU-like step hold")
    parser.add_argument("--only", default="", help="run the scenarios whose name contains this")
    parser.add_argument("--explain", action="store_true", help="print each run's stages")
    parser.add_argument(
        "--no-wrap", action="store_true", help="fit the pipeline as is, without Stoker's stage"
    )
    args = parser.parse_args()

    model = held_model(FEATURES, args.hold_ms / 1000)
    step_s = measure_step_s(model, _rows(BATCH * 12).batch(BATCH))
    print(f"step with cached input C = {step_s * 1000:.1f} ms; slow stage: {MARGIN:g} x C a batch")
    print(f"{'scenario':38} {'stage':>6} {'function':>8}  {'wait':>5}  expected (last miss)")
    read_costs: list[float] = []
    later_costs: list[float] = []
    follow_rows: list[str] = []
    for scenario in SCENARIOS:
        if args.only and args.only not in scenario.name:
            continue
        stage_hits = function_hits = 0
        miss = None
        runs = []
        for _ in range(args.runs):
            run = run_once(scenario.build, model, step_s, args.steps, wrap=not args.no_wrap)
            runs.append(run)
            if args.explain:
                _explain(scenario, run, step_s)
            if run.read_us is not None:
                read_costs.append(run.read_us)
            if run.later_read_us is not None:
                later_costs.append(run.later_read_us)
            named = run.named
            if not scenario.kinds:
                hit = named is None
                stage_hits += hit
                function_hits += hit
            else:
                hit = named is not None and named["kind"] in scenario.kinds
                stage_hits += hit
                named_fn = named is not None and named["function"] == scenario.function
                if scenario.focus is not None:  # and the advice singles the slow one out
                    named_fn = named_fn and (named or {}).get("focus") == scenario.focus
                function_hits += hit and named_fn
                hit = hit and named_fn
            if not hit:
                miss = named
        expected = (
            "none"
            if not scenario.kinds
            else f"{scenario.kinds[0]} '{scenario.function}'"
            if scenario.function
            else scenario.kinds[0]
        )
        what = "" if miss is None else f"  miss: {(miss['kind'], miss['function'])}"
        print_width = 38
        wait = statistics.median(r.wait_share for r in runs)
        print(
            f"{scenario.name:{print_width}} {stage_hits:>3}/{args.runs} "
            f"{function_hits:>5}/{args.runs}  "
            f"{wait:5.0%}  {expected}{what}",
            flush=True,
        )
        if scenario.followed is not None and args.follow_runs > 0:
            follow_rows.append(_follow(scenario, runs, model, step_s, args))
    if follow_rows:
        print("\nfollow the advice (the first applied): the wait drops or the advice changes")
        for row in follow_rows:
            print(row)
    for what, costs in (("first read of a pipeline", read_costs), ("later reads", later_costs)):
        if not costs:
            continue
        per_read = statistics.median(costs)
        per_step = per_read * step_s / DEFAULT_INTERVAL_S
        p90 = statistics.quantiles(costs, n=10)[-1] if len(costs) > 1 else per_read
        print(
            f"model read, {what}: median {per_read:.0f} µs (p90 {p90:.0f}) over {len(costs)} "
            f"reads; at one read per {DEFAULT_INTERVAL_S:g} s and a {step_s * 1000:.1f} ms "
            f"step: {per_step:.2f} µs a step (on the sampler thread)"
        )


# The followed run's wait must be below this share of the original's to count as dropped.
DROPPED = 0.7


def _follow(
    scenario: Scenario, runs: list[Run], model: Any, step_s: float, args: argparse.Namespace
) -> str:
    assert scenario.followed is not None
    before = [_advice(r) for r in runs if r.named is not None]
    first = max(set(before), key=before.count) if before else None
    wait_before = statistics.median(r.wait_share for r in runs)
    after_runs = [
        run_once(scenario.followed, model, step_s, args.steps, wrap=not args.no_wrap)
        for _ in range(args.follow_runs)
    ]
    if args.explain:
        for run in after_runs:
            _explain(scenario, run, step_s)
    wait_after = statistics.median(r.wait_share for r in after_runs)
    after = [_advice(r) for r in after_runs]
    dropped = wait_after < DROPPED * wait_before
    repeated = sum(a is not None and a == first for a in after)
    changed = repeated == 0
    ok = dropped or changed
    verdict = "pass" if ok and not repeated else "FAIL"
    return (
        f"{scenario.name:32} wait {wait_before:4.0%} -> {wait_after:4.0%} "
        f"({'dropped' if dropped else 'not dropped'}); same advice again {repeated}/"
        f"{len(after_runs)}; {verdict}\n    advice: {(first or '-')[:110]}\n"
        f"    after:  {(after[-1] or 'none')[:110]}"
    )


if __name__ == "__main__":
    main()
