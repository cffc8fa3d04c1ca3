"""Does Stoker name the stage that starves the steps? Pipelines whose slow stage is known.

GPU-like regime (`tests.gpu_like`): the step holds `--hold-ms` without the CPU once its batch
arrived; the slow stage sleeps, so the pipeline and the step do not share the CPUs. The step
time C with cached input is measured first; each slow stage is given MARGIN x C a batch.

For each scenario, `--runs` one-epoch fits; during each, the agent's `PipelineSource` reads
tf.data's autotuning model (through the same `train_function` wrapper StokerCallback
installs) three quarters into the epoch, and `find_bottleneck` (the server's attribution,
called directly: no server) judges the stages with the step demand 1/C and the wait share
1 - C / (median step interval). A hit is the right stage named (none for `fed`).

Also: the cost of one model read (get_model_proto + conversion, µs) and that cost spread
over the steps of the default 5 s interval.

Usage: .venv/bin/python bench/bottleneck.py [--runs 10] [--steps 40] [--hold-ms 20]
       [--only NAME]
"""

import argparse
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import numpy as np
import tensorflow as tf

from backend.diagnosis.bottleneck import find_bottleneck
from tests.gpu_like import MARGIN, held_model, measure_step_s
from trainer_agent.pipeline_model import (
    DEFAULT_INTERVAL_S,
    PipelineSource,
    function_names,
)
from trainer_agent.recorder import Recorder
from trainer_agent.train_function import unwatch_train_function, watch_train_function

BATCH = 16
FEATURES = 8


def _sleeper(delay_s: float, name: str) -> Callable[..., Any]:
    def sleep(v: np.ndarray) -> np.ndarray:
        time.sleep(delay_s)
        return v

    def stage(a: Any, b: Any) -> Any:
        out = tf.numpy_function(sleep, [a], a.dtype, stateful=True)
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


@dataclass
class Scenario:
    name: str
    build: Callable[[int, float], tf.data.Dataset]  # (elements, slow delay a batch) -> dataset
    expected: Callable[[dict[str, Any]], bool] | None  # None: no bottleneck


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


def _records(n: int, batch_delay_s: float, cycle_length: int | None) -> tf.data.Dataset:
    directory = tempfile.mkdtemp(prefix="stoker-bench-")
    paths = _write_records(directory, n)
    per_record_s = batch_delay_s / BATCH

    def slow_read(v: bytes) -> bytes:
        time.sleep(per_record_s)  # a slow disk or network file system
        return v

    def read_file(path: Any) -> tf.data.Dataset:
        records = tf.data.TFRecordDataset(path)
        return records.map(
            lambda r: tf.ensure_shape(
                tf.numpy_function(slow_read, [r], tf.string, stateful=True), []
            )
        )

    files = tf.data.Dataset.from_tensor_slices(paths)
    if cycle_length is None:  # a flat_map: one file after the other
        reads = files.flat_map(read_file)
    else:
        reads = files.interleave(read_file, cycle_length=cycle_length)

    def parse(r: Any) -> Any:
        a = tf.reshape(tf.io.decode_raw(r, tf.float32), [FEATURES])
        return a, a[:1]

    return reads.map(parse, num_parallel_calls=2).batch(BATCH).prefetch(2)


def file_reads(n: int, batch_delay_s: float) -> tf.data.Dataset:
    return _records(n, batch_delay_s, None)


def interleave_cycle_1(n: int, batch_delay_s: float) -> tf.data.Dataset:
    return _records(n, batch_delay_s, 1)


def serial_map(n: int, batch_delay_s: float) -> tf.data.Dataset:
    ds = tf.data.Dataset.from_tensor_slices(_xy(n))
    ds = ds.map(_sleeper(batch_delay_s / BATCH, "decode"))
    return ds.batch(BATCH).prefetch(2)


def under_parallel_map(n: int, batch_delay_s: float) -> tf.data.Dataset:
    # Two threads, each element twice the serial delay: still MARGIN x the step a batch.
    options = tf.data.Options()
    options.threading.private_threadpool_size = 8  # the threads sleep, not the CPUs
    ds = tf.data.Dataset.from_tensor_slices(_xy(n))
    ds = ds.map(_fast("normalize"), num_parallel_calls=tf.data.AUTOTUNE)
    ds = ds.map(_sleeper(2 * batch_delay_s / BATCH, "augment"), num_parallel_calls=2)
    ds = ds.map(_fast("clip"), num_parallel_calls=tf.data.AUTOTUNE)
    return ds.batch(BATCH).prefetch(2).with_options(options)


def map_before_batch(n: int, batch_delay_s: float) -> tf.data.Dataset:
    # A per-element map ahead of batch whose work would be one call on the batch.
    ds = tf.data.Dataset.from_tensor_slices(_xy(n))
    ds = ds.map(_sleeper(batch_delay_s / BATCH, "per_element_resize"))
    ds = ds.batch(BATCH).map(_fast("batch_cast"), num_parallel_calls=2)
    return ds.prefetch(2)


def fed(n: int, batch_delay_s: float) -> tf.data.Dataset:
    ds = tf.data.Dataset.from_tensor_slices(_xy(n))
    return ds.map(_fast("scale"), num_parallel_calls=2).batch(BATCH).cache().prefetch(2)


def _function(name: str) -> Callable[[dict[str, Any]], bool]:
    return lambda b: b["function"] == name


def _slow_read(b: dict[str, Any]) -> bool:
    # The sleeping read is a map made inside the interleave's function: no user name.
    return b["kind"] in ("map", "parallel_map", "file_reader") and b["function"] is None


SCENARIOS = [
    Scenario("generator source", generator, lambda b: b["kind"] == "generator"),
    Scenario("slow file reads (flat_map)", file_reads, _slow_read),
    Scenario("interleave cycle_length=1", interleave_cycle_1, _slow_read),
    Scenario("serial map", serial_map, _function("decode")),
    Scenario("under-parallel map", under_parallel_map, _function("augment")),
    Scenario("map before batch", map_before_batch, _function("per_element_resize")),
    Scenario("fed", fed, None),
]


class _Probe(tf.keras.callbacks.Callback):
    """Step intervals, and one model read three quarters into the epoch."""

    def __init__(self, source: PipelineSource, read_at: int) -> None:
        super().__init__()
        self.source, self.read_at = source, read_at
        self.begins: list[float] = []
        self.recorder = Recorder(max_rows=10)

    def on_train_begin(self, logs: Any = None) -> None:
        watch_train_function(self.model, self.source)

    def on_train_batch_begin(self, batch: int, logs: Any = None) -> None:
        self.begins.append(time.perf_counter())

    def on_train_batch_end(self, batch: int, logs: Any = None) -> None:
        if batch == self.read_at:
            self.source.sample(time.time(), self.recorder)

    def on_train_end(self, logs: Any = None) -> None:
        unwatch_train_function(self.model)


def run_once(
    scenario: Scenario, model: Any, step_s: float, steps: int
) -> tuple[bool, dict[str, Any] | None, float | None]:
    dataset = scenario.build(steps * BATCH, MARGIN * step_s)
    source = PipelineSource()
    source.describe(function_names(dataset), stamped=False)
    probe = _Probe(source, read_at=steps * 3 // 4)
    model.fit(dataset, epochs=1, callbacks=[probe], verbose=0)
    intervals = [b - a for a, b in zip(probe.begins[1:], probe.begins[2:], strict=False)]
    wait_share = max(0.0, 1.0 - step_s / statistics.median(intervals))
    section = probe.recorder.drain()["pipeline"]
    found = find_bottleneck(
        section["stages"][0], demand_steps_per_s=1.0 / step_s, wait_share=wait_share,
        cpus=os.cpu_count(),
    )  # fmt: skip
    named = None if found is None else found.model_dump()
    if scenario.expected is None:
        hit = named is None
    else:
        hit = named is not None and scenario.expected(named)
    return hit, named, source.last_read_us


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=10)
    parser.add_argument("--steps", type=int, default=40, help="steps per fit")
    parser.add_argument("--hold-ms", type=float, default=20.0, help="GPU-like step hold")
    parser.add_argument("--only", default="", help="run the scenarios whose name contains this")
    args = parser.parse_args()

    model = held_model(FEATURES, args.hold_ms / 1000)
    step_s = measure_step_s(model, tf.data.Dataset.from_tensor_slices(_xy(BATCH * 12)).batch(BATCH))
    print(f"step with cached input C = {step_s * 1000:.1f} ms; slow stage: {MARGIN:g} x C a batch")
    print(f"{'scenario':30} {'hits':>6}  named (last miss)")
    read_costs: list[float] = []
    for scenario in SCENARIOS:
        if args.only and args.only not in scenario.name:
            continue
        hits, miss = 0, None
        for _ in range(args.runs):
            hit, named, read_us = run_once(scenario, model, step_s, args.steps)
            hits += hit
            if read_us is not None:
                read_costs.append(read_us)
            if not hit:
                miss = named
        expected = "none" if scenario.expected is None else "the slow stage"
        what = "" if miss is None else f"  miss: {miss and (miss['kind'], miss['function'])}"
        print(f"{scenario.name:30} {hits:>3}/{args.runs}  (expected {expected}){what}", flush=True)
    if read_costs:
        per_read = statistics.median(read_costs)
        per_step = per_read * step_s / DEFAULT_INTERVAL_S
        print(
            f"model read: median {per_read:.0f} µs (p90 "
            f"{statistics.quantiles(read_costs, n=10)[-1]:.0f}) over {len(read_costs)} reads; "
            f"at one read per {DEFAULT_INTERVAL_S:g} s and a {step_s * 1000:.1f} ms step: "
            f"{per_step:.2f} µs a step (on the sampler thread)"
        )


if __name__ == "__main__":
    main()
