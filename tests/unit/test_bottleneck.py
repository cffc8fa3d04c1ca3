"""Bottleneck attribution (backend/stoker_server/diagnosis/bottleneck.py) on scripted stage
figures."""

import math

import pytest

from stoker_server.diagnosis.advice import fix_for
from stoker_server.diagnosis.bottleneck import capacities, find_bottleneck, step_demand


def stage(position, kind, ms, elements, parallelism=1.0, buffered=0, buffer_size=None, **extra):
    return {
        "position": position, "kind": kind, "name": extra.get("name", kind),
        "function": extra.get("function"),
        "parallelism": parallelism, "ms_per_element": ms, "elements": elements,
        "buffered": buffered, "buffer_size": buffer_size, "bytes_per_element": 4.0,
    }  # fmt: skip


def pipeline(slow_map_ms: float, *, prefetched: int = 0):
    """tensor_slices -> map (32 elements a batch) -> batch -> prefetch(2), 100 batches."""
    return [
        stage(0, "tensor_slices", 0.001, 3200),
        stage(1, "parallel_map", slow_map_ms, 3200, parallelism=2, buffer_size=2,
              function="decode"),
        stage(2, "batch", 0.05, 100),
        stage(3, "prefetch", 0.01, 100, buffered=prefetched, buffer_size=2),
    ]  # fmt: skip


def test_capacity_scales_stages_before_batch_by_the_elements_of_a_batch() -> None:
    cap = capacities(pipeline(1.0))
    # The map: 2 threads at 1 ms an element, 32 elements a step: 62.5 steps/s.
    assert cap[1] == pytest.approx(2 * 1000 / 1.0 / 32)
    assert cap[2] == pytest.approx(1000 / 0.05)


def test_the_slow_map_is_named_with_its_fix_when_the_run_waits() -> None:
    found = find_bottleneck(pipeline(5.0), demand_steps_per_s=50.0, wait_share=0.6, cpus=8)
    assert found is not None
    assert (found.position, found.kind, found.function) == (1, "parallel_map", "decode")
    assert "num_parallel_calls" in found.fix  # 2 threads of 8 CPUs
    assert "decode" in found.reason and "60.0 %" in found.reason


def test_a_fed_run_has_no_bottleneck() -> None:
    assert find_bottleneck(pipeline(5.0), demand_steps_per_s=50.0, wait_share=0.01) is None
    assert find_bottleneck(pipeline(5.0), demand_steps_per_s=50.0, wait_share=None) is None
    assert find_bottleneck([], demand_steps_per_s=50.0, wait_share=0.9) is None


def test_full_buffers_after_a_stage_clear_it() -> None:
    stages = pipeline(5.0, prefetched=2)  # the prefetch buffer stays full: the map keeps up
    stages[1]["buffered"] = 2
    assert find_bottleneck(stages, demand_steps_per_s=50.0, wait_share=0.6) is None


def test_the_source_can_be_the_bottleneck() -> None:
    stages = [
        stage(0, "generator", 4.0, 3200),
        stage(1, "parallel_map", 0.5, 3200, parallelism=4, buffer_size=4),
        stage(2, "batch", 0.05, 100),
        stage(3, "prefetch", 0.01, 100, buffer_size=2),
    ]
    found = find_bottleneck(stages, demand_steps_per_s=50.0, wait_share=0.7)
    assert found is not None and found.kind == "generator"
    assert "GIL" in found.fix and "from_generator" in found.fix


@pytest.mark.parametrize(
    ("kind", "parallelism", "cpus", "says"),
    [
        ("map", 1.0, None, "num_parallel_calls"),
        ("parallel_map", 2.0, 8, "num_parallel_calls"),
        ("parallel_map", 8.0, 8, ".cache()"),
        ("parallel_map", 8.0, 8, "batch before it"),
        ("parallel_map", 8.0, 8, "on the device"),
        ("file_reader", 1.0, None, "interleave"),
        ("interleave", 1.0, None, "cycle_length"),
        ("generator", 1.0, None, "GIL"),
    ],
)
def test_each_kind_gets_its_fix(kind: str, parallelism: float, cpus, says: str) -> None:
    stages = pipeline(1.0)
    stages[1] = stage(1, kind, 1.0, 3200, parallelism=parallelism)
    assert says in fix_for(stages[1], stages, cpus)


@pytest.mark.parametrize(("kind", "threads"), [("map", 2.4), ("map_and_batch", 1.28)])
def test_a_serial_map_is_told_it_runs_serially_whatever_its_rate_shows(
    kind: str, threads: float
) -> None:
    # The threads read off a stage's rate carry the model's noise: the demo's serial
    # map_and_batch read 1.28 and was told "num_parallel_calls=1.28068".
    stages = pipeline(1.0)
    stages[1] = stage(1, kind, 1.0, 3200, parallelism=threads)
    fix = fix_for(stages[1], stages, 8)
    assert "runs serially: pass num_parallel_calls=tf.data.AUTOTUNE" in fix
    assert "threads" not in fix


def test_a_parallel_map_is_given_its_integer_num_parallel_calls() -> None:
    stages = pipeline(1.0)
    stages[1] = stage(1, "parallel_map", 1.0, 3200, parallelism=2.3)
    assert "runs on 2 threads (num_parallel_calls=2)" in fix_for(stages[1], stages, 8)


def test_num_parallel_calls_is_what_the_user_set_when_the_run_shows_more_threads() -> None:
    # On a loaded host the run's rate put a num_parallel_calls=2 map at 3.1 threads, and the
    # advice said "num_parallel_calls=3".
    stages = pipeline(1.0)
    stages[1] = stage(1, "parallel_map", 1.0, 3200, parallelism=2.0)
    fix = fix_for(stages[1], stages, 8, threads=3.1)
    assert "runs on 2 threads (num_parallel_calls=2)" in fix


def test_step_demand_is_the_fed_rate_and_the_wait_share() -> None:
    demand, share = step_demand([0.1, 0.1, 0.1], [0.08, 0.08, None])
    assert demand == pytest.approx(1 / 0.02)
    assert share == pytest.approx(0.8)
    assert step_demand([0.1], [None]) is None
    assert math.isinf(step_demand([0.1], [0.1])[0])


def test_a_read_inside_a_serial_interleave_names_the_interleave() -> None:
    """The model holds only the open files' readers: their counts are partial. The slow read
    is made inside the interleave's function: the user changes the interleave."""
    stages = [
        stage(0, "tensor_slices", 0.01, 4),  # file names
        stage(1, "file_reader", 0.02, 20, name="Interleave/TFRecord"),  # the open file's
        stage(2, "map", 4.0, 20, name="Interleave/Map"),  # the slow read
        stage(3, "interleave", 0.02, 500, function="read_shard"),
        stage(4, "batch", 0.05, 31),
        stage(5, "prefetch", 0.01, 31, buffer_size=2),
    ]
    # 500 records in 31 batches: ~16 a step through the read, at 4 ms each.
    assert capacities(stages)[2] == pytest.approx(1000 / 4.0 / (500 / 31))
    found = find_bottleneck(stages, demand_steps_per_s=40.0, wait_share=0.7)
    assert found is not None
    assert (found.position, found.kind, found.function) == (3, "interleave", "read_shard")
    assert "cycle_length" in found.fix and "num_parallel_calls" in found.fix
    assert "map" in found.reason  # where inside it the time goes


def test_a_flat_map_is_told_to_become_a_parallel_interleave() -> None:
    stages = [
        stage(0, "range", 0.01, 4),
        stage(1, "map", 4.0, 20, name="FlatMap/Map"),
        stage(2, "flat_map", 0.02, 500, function="read_shard"),
        stage(3, "batch", 0.05, 31),
    ]
    found = find_bottleneck(stages, demand_steps_per_s=40.0, wait_share=0.7)
    assert found is not None and (found.kind, found.function) == ("flat_map", "read_shard")
    assert "interleave(" in found.fix and "num_parallel_calls=tf.data.AUTOTUNE" in found.fix


def test_a_capacity_below_the_rate_the_run_reached_is_raised_to_it() -> None:
    """map(slow, AUTOTUNE).batch(32).prefetch: the model read 1 thread of a fused
    MapAndBatch (14.5 steps/s) while the run did 29 steps/s."""
    stages = [
        stage(0, "tensor_slices", 0.001, 3200),
        stage(1, "map_and_batch", 1000 / 14.5, 100, parallelism=1.0, buffer_size=1,
              function="slow", name="MapAndBatch (autotune)"),
        stage(2, "prefetch", 0.01, 100, buffer_size=2),
    ]  # fmt: skip
    assert capacities(stages)[1] == pytest.approx(14.5)
    assert capacities(stages, 29.0)[1] == pytest.approx(29.0)
    found = find_bottleneck(stages, demand_steps_per_s=50.0, wait_share=0.42, cpus=8)
    assert found is not None and found.function == "slow"
    assert found.capacity_steps_per_s == pytest.approx(50.0 * 0.58)
    assert "reached" in found.reason and "14.5" in found.reason
    # AUTOTUNE is set: never "pass num_parallel_calls", nor "runs serially".
    assert "pass num_parallel_calls" not in found.fix and "serially" not in found.fix
    assert "AUTOTUNE" in found.fix and ".cache()" in found.fix


@pytest.mark.parametrize(
    ("kind", "name", "parallelism", "cpus"),
    [
        ("parallel_map", "ParallelMapV2 (autotune)", 2.0, 8),
        ("map_and_batch", "MapAndBatch (autotune)", 1.0, 8),
        ("parallel_map", "ParallelMapV2", 8.0, 8),
        ("parallel_interleave", "ParallelInterleaveV4 (autotune)", 1.0, 8),
    ],
)
def test_advice_never_adds_what_the_pipeline_has(kind, name, parallelism, cpus) -> None:
    stages = pipeline(1.0)
    stages[1] = stage(1, kind, 1.0, 3200, parallelism=parallelism, name=name)
    stages.insert(2, stage(2, "cache", 0.001, 3200))
    for position, each in enumerate(stages):
        each["position"] = position
    fix = fix_for(stages[1], stages, cpus)
    assert "pass num_parallel_calls" not in fix
    assert "put .cache()" not in fix  # there is one after it
    for phrase in ("num_parallel_calls", ".cache()", "offline", "on the device"):
        assert fix.count(phrase) <= 1, (phrase, fix)  # each said once


def test_stages_that_are_not_the_users_are_never_named() -> None:
    stages = pipeline(0.001)
    stages[3] = stage(3, "prefetch", 500.0, 100, buffer_size=2, name="stoker:Prefetch")
    assert find_bottleneck(stages, demand_steps_per_s=50.0, wait_share=0.6) is None


FUSED = [
    {"name": "fast_normalize", "file": "/src/train.py", "line": 10, "calls_python": False},
    {"name": "slow_decode", "file": "/src/train.py", "line": 14, "calls_python": True},
    {"name": "fast_normalize", "file": "/src/train.py", "line": 10, "calls_python": False},
]


def test_a_fused_stage_is_named_by_all_its_functions_and_the_fix_singles_out_one() -> None:
    stages = pipeline(5.0)
    stages[1] = dict(
        stage(1, "map", 5.0, 3200, function="fast_normalize+slow_decode+fast_normalize"),
        functions=FUSED,
    )
    found = find_bottleneck(stages, demand_steps_per_s=50.0, wait_share=0.6, cpus=8)
    assert found is not None
    assert found.function == "fast_normalize+slow_decode+fast_normalize"
    assert found.focus == "slow_decode" and found.functions == FUSED
    assert "stage 1 (map 'fast_normalize+slow_decode+fast_normalize')" in found.fix
    assert "slow_decode (train.py:14) calls Python" in found.fix
    assert "runs serially" in found.fix


def test_a_stage_of_one_function_says_where_it_is_written() -> None:
    stages = pipeline(5.0)
    stages[1] = dict(stage(1, "map", 5.0, 3200, function="slow_decode"), functions=[FUSED[1]])
    found = find_bottleneck(stages, demand_steps_per_s=50.0, wait_share=0.6, cpus=8)
    assert found is not None and found.focus == "slow_decode"
    assert found.fix.startswith("stage 1 (map 'slow_decode' at train.py:14) runs serially")
    assert "calls Python" not in found.fix  # nothing to single out of one function
