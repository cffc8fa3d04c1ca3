"""Bottleneck attribution (backend/diagnosis/bottleneck.py) on scripted stage figures."""

import math

import pytest

from backend.diagnosis.bottleneck import capacities, find_bottleneck, fix_for, step_demand


def stage(position, kind, ms, elements, parallelism=1.0, buffered=0, buffer_size=None, **extra):
    return {
        "position": position, "kind": kind, "name": kind, "function": extra.get("function"),
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
    assert "decode" in found.reason and "60%" in found.reason


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
        ("parallel_map", 8.0, 8, "batch before the map"),
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


def test_step_demand_is_the_fed_rate_and_the_wait_share() -> None:
    demand, share = step_demand([0.1, 0.1, 0.1], [0.08, 0.08, None])
    assert demand == pytest.approx(1 / 0.02)
    assert share == pytest.approx(0.8)
    assert step_demand([0.1], [None]) is None
    assert math.isinf(step_demand([0.1], [0.1])[0])


def test_a_read_inside_a_serial_interleave_counts_the_interleave_elements() -> None:
    """The model holds only the open files' readers: their counts are partial."""
    stages = [
        stage(0, "tensor_slices", 0.01, 4),  # file names
        stage(1, "file_reader", 0.02, 20),  # the open file's records so far
        stage(2, "map", 4.0, 20),  # the slow read, inside the interleave's function
        stage(3, "interleave", 0.02, 500),
        stage(4, "batch", 0.05, 31),
        stage(5, "prefetch", 0.01, 31, buffer_size=2),
    ]
    # 500 records in 31 batches: ~16 a step through the read, at 4 ms each.
    assert capacities(stages)[2] == pytest.approx(1000 / 4.0 / (500 / 31))
    found = find_bottleneck(stages, demand_steps_per_s=40.0, wait_share=0.7)
    assert found is not None and found.position == 2
    assert "cycle_length" in found.fix and "num_parallel_calls" in found.fix
