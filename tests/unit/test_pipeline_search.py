"""The search over tf.data's rewrites (trainer_agent/capture/pipeline_rewrites.py) on trees
written by hand: which user datasets each model node runs. tests/fit/test_pipeline_rewrites.py
checks it against tf.data's own rewritten graphs."""

import itertools

from trainer_agent.capture.dataset_graph import DatasetNode, UserFunction
from trainer_agent.capture.pipeline_rewrites import REWRITES, AlignmentCache, ModelNode, align

DEFAULTS = frozenset({"map_and_batch_fusion", "map_parallelization", "noop_elimination"})
_ids = itertools.count(1)


def chain(*nodes: str, stateful: tuple[str, ...] = ()) -> DatasetNode:
    """Source first: "Range", "Map:fn1", "Batch", ... ("Map:-" an identity map)."""
    tree: DatasetNode | None = None
    for spec in nodes:
        family, _, name = spec.partition(":")
        functions = (UserFunction(name, stateful=name in stateful),) if name and name != "-" else ()
        node = DatasetNode(family, functions=functions, noop=name == "-")
        node.inputs = [tree] if tree is not None else []
        tree = node
    assert tree is not None
    return tree


def model(*names: str) -> ModelNode:
    """A chain of model nodes, source first."""
    tree: ModelNode | None = None
    for name in names:
        node = ModelNode(next(_ids), name)
        node.children = [tree] if tree is not None else []
        tree = node
    assert tree is not None
    return tree


def named(user: DatasetNode, tree: ModelNode, rewrites: frozenset[str] = DEFAULTS) -> list:
    found = align(user, tree, rewrites)
    assert found is not None
    return [
        (node.name, [f.name for d in found.runs.get(node.id, []) for f in d.functions])
        for node in tree.walk()
    ][::-1]


def test_a_map_fused_with_its_batch_names_the_maps_function() -> None:
    user = chain("TensorSlice", "Map:fast", "Map:slow", "Batch", "Prefetch")
    tree = model("TensorSlice", "ParallelMapV2", "MapAndBatch", "Prefetch")
    assert named(user, tree) == [
        ("TensorSlice", []), ("ParallelMapV2", ["fast"]), ("MapAndBatch", ["slow"]),
        ("Prefetch", []),
    ]  # fmt: skip


def test_fused_maps_are_named_together_only_when_map_fusion_is_on() -> None:
    user = chain("Range", "Map:a", "Map:b", "Map:c", "Batch")
    fused = model("Range", "MapAndBatch")
    assert named(user, fused, DEFAULTS | {"map_fusion"})[1] == ("MapAndBatch", ["a", "b", "c"])
    apart = model("Range", "ParallelMapV2", "ParallelMapV2", "MapAndBatch")
    assert named(user, apart, DEFAULTS | {"map_fusion"})[1:] == [
        ("ParallelMapV2", ["a"]), ("ParallelMapV2", ["b"]), ("MapAndBatch", ["c"]),
    ]  # fmt: skip


def test_a_stateful_map_is_neither_fused_nor_made_parallel() -> None:
    """map_fusion fuses no stateful function, map_parallelization leaves it serial: of three
    maps in two nodes, the stateful one is the serial node alone."""
    user = chain("Range", "Map:a", "Map:b", "Map:c", stateful=("a",))
    tree = model("Range", "Map", "ParallelMapV2")
    assert named(user, tree, DEFAULTS | {"map_fusion"})[1:] == [
        ("Map", ["a"]), ("ParallelMapV2", ["b", "c"]),
    ]  # fmt: skip


def test_a_dropped_no_op_and_an_exhausted_source_leave_the_names_in_place() -> None:
    user = chain("TensorSlice", "Batch", "Map:-", "Map:decode", "Take")
    tree = model("BatchV2", "Map", "FiniteTake")  # the source's iterator is gone
    assert named(user, tree) == [("BatchV2", []), ("Map", ["decode"]), ("FiniteTake", [])]


def test_the_users_pipeline_is_found_inside_what_wrap_appends() -> None:
    """Stoker's stage: a map over Zip(map over Range, the pipeline) under a cardinality
    assertion (an infinite pipeline): the user's root is the zip's second input."""
    user = chain("TensorSlice", "Batch", "Repeat", "Map:slow_decode")
    pipeline = model("TensorSlice", "BatchV2", "ForeverRepeat", "Map", "Prefetch")
    requests = model("Range", "Map")
    zipped = ModelNode(next(_ids), "Zip", [requests, pipeline])
    stamp = ModelNode(next(_ids), "Map", [zipped])
    top = ModelNode(next(_ids), "AssertCardinality", [stamp])
    found = align(user, top, frozenset(REWRITES))
    assert found is not None and found.root.id == pipeline.children[0].id  # below the prefetch
    assert [f.name for d in found.runs[pipeline.children[0].id] for f in d.functions] == [
        "slow_decode"
    ]
    assert stamp.id not in found.runs and requests.id not in found.runs


def test_the_search_runs_once_per_shape_of_the_model() -> None:
    user = chain("Range", "Map:a", "Batch")
    cache = AlignmentCache()
    first = cache.align(user, model("Range", "MapAndBatch"), DEFAULTS)
    again_tree = model("Range", "MapAndBatch")  # a new iterator: new node ids, same shape
    again = cache.align(user, again_tree, DEFAULTS)
    assert first is not None and again is not None
    assert [f.name for d in again.runs[again_tree.id] for f in d.functions] == ["a"]
    assert again.root is again_tree and again.cost == first.cost
