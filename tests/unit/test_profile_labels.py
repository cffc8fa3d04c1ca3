"""A profile's rows in the pipeline's words (backend/stoker_server/ingest/profile_labels.py), on
the rows xprof gave for a real capture of a wrapped `zip(x, y).map(fast_normalize)
.map(slow_decode).batch(16).prefetch(2)` and the stages the agent read of the same iterator."""

from stoker_server.ingest.profile_labels import label_analysis

PREFIX = "Iterator::Root::Map::Zip[1]::Prefetch"


def _stage(position, kind, name, function=None, path="", calls_python=False):
    functions = [{"name": function, "calls_python": calls_python}] if function else []
    return {"position": position, "kind": kind, "name": name, "function": function,
            "functions": functions, "path": path}  # fmt: skip


STAGES = [
    _stage(0, "tensor_slices", "TensorSlice",
           path=f"{PREFIX}::MapAndBatch::ParallelMapV2::Zip[0]::TensorSlice"),
    _stage(1, "tensor_slices", "TensorSlice",
           path=f"{PREFIX}::MapAndBatch::ParallelMapV2::Zip[1]::TensorSlice"),
    _stage(2, "zip", "Zip", path=f"{PREFIX}::MapAndBatch::ParallelMapV2::Zip"),
    _stage(3, "parallel_map", "ParallelMapV2 (autotune)", "fast_normalize",
           f"{PREFIX}::MapAndBatch::ParallelMapV2"),
    _stage(4, "map_and_batch", "MapAndBatch", "slow_decode", f"{PREFIX}::MapAndBatch",
           calls_python=True),
    _stage(5, "prefetch", "Prefetch", path=PREFIX),
]  # fmt: skip


def _iterator(name, ms):
    return {"name": name, "count": 21.0, "ms": ms, "self_ms": ms, "category": "Preprocessing"}


ANALYSIS = {
    "available": True,
    "iterators": [
        _iterator("Iterator::Root::Map", 3533.0),
        _iterator(f"{PREFIX}::MapAndBatch", 3529.6),
        _iterator(f"{PREFIX}::MapAndBatch::ParallelMapV2", 27.3),
        _iterator("Iterator::Root::Map::Zip[0]::Map::Range", 0.13),
    ],
    "top_ops": [
        {"where": "Host", "type": "PyFunc", "name": "PyFunc", "count": 335.0,
         "self_ms": 3609.8},
        {"where": "Host", "type": "Dataset", "name": f"{PREFIX}::MapAndBatch", "count": 20.0,
         "self_ms": 3555.8},
        {"where": "Host", "type": "PyFunc",
         "name": "StatefulPartitionedCall/sequential_1/device_hold_1/PyFunc", "count": 21.0,
         "self_ms": 116.7},
        {"where": "Host", "type": "Mul", "name": "mul", "count": 336.0, "self_ms": 2.8},
    ],
}  # fmt: skip


def test_each_iterator_is_the_stage_the_pipeline_view_shows_and_the_stamp_is_stokers() -> None:
    labelled = label_analysis(ANALYSIS, STAGES)
    rows = {row["name"]: row["stage"] for row in labelled["iterators"]}
    stamp, requests = rows["Iterator::Root::Map"], rows["Iterator::Root::Map::Zip[0]::Map::Range"]
    decode = rows[f"{PREFIX}::MapAndBatch"]
    normalize = rows[f"{PREFIX}::MapAndBatch::ParallelMapV2"]
    assert decode == {"position": 4, "kind": "map_and_batch", "name": "MapAndBatch",
                      "function": "slow_decode", "owner": "user"}  # fmt: skip
    assert normalize["function"] == "fast_normalize" and normalize["position"] == 3
    assert stamp["owner"] == requests["owner"] == "stoker"
    assert stamp["position"] is None and requests["function"] is None


def test_a_python_call_in_the_pipeline_is_tied_to_the_function_that_makes_it() -> None:
    pyfunc, dataset, model_pyfunc, mul = label_analysis(ANALYSIS, STAGES)["top_ops"]
    assert pyfunc["function"] == "slow_decode" and pyfunc["stage"]["position"] == 4
    assert dataset["stage"]["function"] == "slow_decode"
    assert "function" not in model_pyfunc  # the model's own Python call: the train step's
    assert "stage" not in mul


def test_several_python_functions_are_listed_not_guessed() -> None:
    stages = [dict(s) for s in STAGES]
    stages[3] = _stage(3, "parallel_map", "ParallelMapV2", "fast_normalize",
                       f"{PREFIX}::MapAndBatch::ParallelMapV2", calls_python=True)  # fmt: skip
    pyfunc = label_analysis(ANALYSIS, stages)["top_ops"][0]
    assert pyfunc["function"] is None
    assert pyfunc["functions"] == ["fast_normalize", "slow_decode"]


def test_an_interleaves_open_elements_are_its_one_inner_stage() -> None:
    inner = "Iterator::Root::Prefetch::ParallelInterleaveV4[*]::TFRecord"
    stages = [
        _stage(0, "tensor_slices", "TensorSlice",
               path="Iterator::Root::Prefetch::ParallelInterleaveV4::TensorSlice"),
        _stage(1, "file_reader", "ParallelInterleaveV4/TFRecord", path=inner),
        _stage(2, "parallel_interleave", "ParallelInterleaveV4", "read_file",
               "Iterator::Root::Prefetch::ParallelInterleaveV4"),
        _stage(3, "prefetch", "tf.data:Prefetch", path="Iterator::Root::Prefetch"),
    ]  # fmt: skip
    analysis = {"available": True, "iterators": [
        _iterator("Iterator::Root::Prefetch::ParallelInterleaveV4[3]::TFRecord", 9.0),
        _iterator("Iterator::Root::Prefetch", 9.5),
    ]}  # fmt: skip
    rows = {row["name"]: row["stage"] for row in label_analysis(analysis, stages)["iterators"]}
    reader = rows["Iterator::Root::Prefetch::ParallelInterleaveV4[3]::TFRecord"]
    prefetch = rows["Iterator::Root::Prefetch"]
    assert reader["kind"] == "file_reader" and reader["position"] == 1
    assert prefetch["owner"] == "tf.data"  # tf.data's own prefetch, not the user's


def test_without_stages_or_an_analysis_nothing_is_labelled() -> None:
    assert label_analysis(ANALYSIS, []) == ANALYSIS
    assert label_analysis({"available": False}, STAGES) == {"available": False}


def test_a_repeats_repetition_index_is_any_and_a_zips_input_index_is_exact() -> None:
    """The profiler numbers a repeat's input by repetition ("ForeverRepeat[3]"), which the
    agent cannot know; a zip's inputs are its branches."""
    base = "Iterator::Root::AssertCardinality::Map::Zip[1]::Prefetch::ForeverRepeat"
    stages = [
        _stage(0, "tensor_slices", "TensorSlice", path=f"{base}::Zip[0]::TensorSlice"),
        _stage(1, "tensor_slices", "TensorSlice", path=f"{base}::Zip[1]::TensorSlice"),
        _stage(2, "zip", "Zip", path=f"{base}::Zip"),
        _stage(3, "repeat", "ForeverRepeat", path=base),
    ]
    analysis = {"available": True, "iterators": [
        _iterator(f"{base}[3]::Zip[1]::TensorSlice", 1.0),
        _iterator(f"{base}[3]::Zip[0]::TensorSlice", 1.0),
        _iterator("Iterator::Root", 9.0),
        _iterator("Iterator::Root::AssertCardinality", 9.0),
    ]}  # fmt: skip
    rows = {row["name"]: row["stage"] for row in label_analysis(analysis, stages)["iterators"]}
    second, first = rows[f"{base}[3]::Zip[1]::TensorSlice"], rows[f"{base}[3]::Zip[0]::TensorSlice"]
    root, assertion = rows["Iterator::Root"], rows["Iterator::Root::AssertCardinality"]
    assert (second["position"], first["position"]) == (1, 0)
    assert root["owner"] == "tf.data" and assertion["owner"] == "stoker"


def test_the_iterators_of_one_stage_are_one_row() -> None:
    base = "Iterator::Root::Prefetch::ForeverRepeat"
    stages = [
        _stage(0, "map", "Map", "slow_decode", f"{base}::Map"),
        _stage(1, "repeat", "ForeverRepeat", path=base),
    ]
    analysis = {"available": True, "iterators": [
        _iterator(f"{base}[0]::Map", 10.0), _iterator(f"{base}[1]::Map", 5.0), _iterator(base, 1.0),
    ]}  # fmt: skip
    rows = label_analysis(analysis, stages)["iterators"]
    assert [(r["stage"]["position"], r["self_ms"], r["count"]) for r in rows] == [
        (0, 15.0, 42.0),
        (1, 1.0, 21.0),
    ]
