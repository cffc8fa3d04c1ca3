"""Every advice rule (backend/stoker_server/diagnosis/advice.py `RULES`) fires on the shapes it
is written for and stays silent on every other shape of its kind: the whole table, rule by
shape."""

import pytest

from stoker_server.diagnosis.advice import RULES, Facts, Shape, SlowStage, input_advice

# --- pipelines whose steps wait for input (rules of kind "pipeline" and "remedy") ---------
MEMORY = dict(parallel_interleave=False, reads_files=False, source="memory")
FILES = dict(parallel_interleave=False, reads_files=True, source="files")
FED = dict(prefetch=True, parallel_map=True, cache=True, **MEMORY)
PIPELINES: dict[str, Facts] = {
    # from_tensor_slices on arrays, a serial map, the host idle: issue 38's case.
    "memory_serial_idle": Facts(
        Shape(prefetch=True, parallel_map=False, serial_map=True, cache=False, **MEMORY),
        cpu=20.0,
    ),
    "files_serial_idle": Facts(
        Shape(prefetch=True, parallel_map=False, serial_map=True, cache=False, **FILES),
        cpu=20.0,
    ),
    # An agent that described nothing (not wrapped, an older agent).
    "unknown_idle": Facts(Shape(), cpu=20.0),
    "unknown_busy": Facts(Shape(), cpu=65.0),
    "no_prefetch_files": Facts(
        Shape(prefetch=False, parallel_map=True, cache=True, **FILES), cpu=65.0
    ),
    "serial_interleave": Facts(
        Shape(
            prefetch=True,
            parallel_map=True,
            cache=False,
            serial_interleave=True,
            reads_files=True,
            source="files",
        ),
        cpu=65.0,
    ),
    "saturated_memory": Facts(
        Shape(prefetch=True, parallel_map=True, cache=False, **MEMORY), cpu=95.0
    ),
    "fed_short_steps": Facts(Shape(**FED), cpu=40.0, step_s=0.0015),
    "fed_long_steps": Facts(Shape(**FED), cpu=60.0, step_s=0.05),
}


def _stage(kind: str, *, name: str | None = None, threads: float = 1.0, functions=None,
           parallelism: float = 1.0) -> SlowStage:  # fmt: skip
    stages = [
        {"position": 0, "kind": "tensor_slices", "name": "TensorSlice"},
        {
            "position": 1, "kind": kind, "name": name or kind, "parallelism": parallelism,
            "function": "+".join(f["name"] for f in functions or []) or None,
            "functions": functions or [],
        },
        {"position": 2, "kind": "batch", "name": "BatchV2"},
        {"position": 3, "kind": "prefetch", "name": "Prefetch"},
    ]  # fmt: skip
    return SlowStage(stage=stages[1], stages=stages, threads=threads, cpus=8)


FUSED = [
    {"name": "fast_normalize", "file": "/src/train.py", "line": 10, "calls_python": False},
    {"name": "slow_decode", "file": "/src/train.py", "line": 14, "calls_python": True},
    {"name": "fast_normalize", "file": "/src/train.py", "line": 10, "calls_python": False},
]
STAGES: dict[str, Facts] = {
    name: Facts(slow=slow)
    for name, slow in {
        "generator": _stage("generator"),
        "file_reader": _stage("file_reader", name="FlatMap/TFRecord"),
        "flat_map": _stage("flat_map"),
        "interleave": _stage("interleave"),
        "parallel_interleave_2": _stage("parallel_interleave", threads=2.0),
        "parallel_interleave_autotuned": _stage(
            "parallel_interleave", name="ParallelInterleaveV4 (autotune)", threads=8.0
        ),
        "filter": _stage("filter"),
        "serial_map": _stage("map", functions=[FUSED[1]]),
        "parallel_map_2": _stage("parallel_map", threads=2.0, parallelism=2.0),
        "parallel_map_autotuned": _stage(
            "parallel_map", name="ParallelMapV2 (autotune)", threads=6.0
        ),
        "scan": _stage("scan"),
        "fused_maps_one_calls_python": _stage("map", functions=FUSED),
    }.items()
}

DEVICE: dict[str, Facts] = {
    "low_util": Facts(util=40.0, step_s=0.02),
    "short_steps_no_gpu": Facts(util=None, step_s=0.002),
    "busy_gpu": Facts(util=92.0, step_s=0.02),
}

# Rule -> the shapes (of its kind) it fires on; silent on every other shape of its kind.
FIRES: dict[str, set[str]] = {
    # fix
    "generator": {"generator"},
    "file_reader": {"file_reader"},
    "flat_map": {"flat_map"},
    "serial_interleave": {"interleave"},
    "interleave_threads": {"parallel_interleave_2"},
    "interleave_left": {"parallel_interleave_autotuned"},
    "filter": {"filter"},
    "serial_map": {"serial_map", "fused_maps_one_calls_python"},
    "map_threads": {"parallel_map_2"},
    "map_left": {"parallel_map_autotuned"},
    "other_stage": {"scan"},
    "fused_calls_python": {"fused_maps_one_calls_python"},
    # remedy
    "add_parallel_map": {"unknown_idle", "unknown_busy"},
    "add_interleave": {"files_serial_idle", "no_prefetch_files"},
    "add_interleave_if_files": {"unknown_idle", "unknown_busy"},
    "add_cache": {
        "memory_serial_idle",
        "files_serial_idle",
        "unknown_idle",
        "unknown_busy",
        "serial_interleave",
        "saturated_memory",
    },
    "add_prefetch": {"unknown_idle", "unknown_busy"},
    # pipeline
    "no_prefetch": {"no_prefetch_files"},
    "serial_maps": {"memory_serial_idle", "files_serial_idle"},
    "serial_interleaves": {"serial_interleave"},
    "short_steps": {"fed_short_steps"},
    "cpu_saturated": {"saturated_memory"},
    "cpu_idle": {"memory_serial_idle", "files_serial_idle", "unknown_idle"},
    "feed_faster": {"unknown_busy", "serial_interleave", "no_prefetch_files"},
    "host_left": {"fed_short_steps", "fed_long_steps"},
    "cache_placement": {"fed_short_steps", "fed_long_steps"},
    # device
    "low_util": {"low_util"},
    "short_steps_no_gpu": {"short_steps_no_gpu"},
    "keeps_up": {"busy_gpu"},
}
SHAPES_OF = {"fix": STAGES, "remedy": PIPELINES, "pipeline": PIPELINES, "device": DEVICE}


def test_every_rule_is_in_the_table_once() -> None:
    names = [rule.name for rule in RULES]
    assert len(names) == len(set(names))
    assert set(names) == set(FIRES)


def test_one_fix_applies_to_each_stage() -> None:
    for name, facts in STAGES.items():
        fixes = [r.name for r in RULES if r.kind == "fix" and not r.note and r.applies(facts)]
        assert len(fixes) == 1, (name, fixes)


@pytest.mark.parametrize("rule", RULES, ids=lambda rule: rule.name)
def test_the_rule_fires_on_its_shapes_and_stays_silent_on_the_others(rule) -> None:
    shapes = SHAPES_OF[rule.kind]
    fired = {name for name, facts in shapes.items() if rule.applies(facts)}
    assert fired == FIRES[rule.name]
    for name in fired:
        assert rule.says(shapes[name]).strip()


def test_a_pipeline_in_memory_is_not_told_to_read_files() -> None:
    advice = " ".join(input_advice(cpu=20.0, pipeline=_described(PIPELINES["memory_serial_idle"])))
    assert "file" not in advice and "interleave" not in advice
    assert "num_parallel_calls" in advice and "in memory" in advice
    reading = " ".join(input_advice(cpu=20.0, pipeline=_described(PIPELINES["files_serial_idle"])))
    assert "interleave(" in reading and "files" in reading


def _described(facts: Facts) -> dict:
    """The agent's description (trainer_agent.capture.pipeline.describe_pipeline) of a shape."""
    shape = facts.shape
    return {
        "prefetch": shape.prefetch, "parallel_map": shape.parallel_map,
        "serial_map": shape.serial_map, "cache": shape.cache,
        "parallel_interleave": shape.parallel_interleave,
        "interleave": shape.serial_interleave, "reads_files": shape.reads_files,
        "source": shape.source,
    }  # fmt: skip
