"""Per-stage figures of a live `tf.data` iterator, from tf.data's own autotuning model.

`tf.data.experimental.get_model_proto(iterator)` (TF 2.13+) returns the model the autotuner
keeps: per node its own processing time (ns, summed over its threads), elements produced,
parallelism, buffered elements and buffer size, bytes. `stages_from_proto` turns it into
stages from the source (position 0) to the stage the model consumes; `PipelineSource` reads
it on the sampler thread. The training thread only hands over the iterator (`watch`).

The user's functions are matched to the nodes by a search over tf.data's documented rewrites
(`pipeline_rewrites.align`) between the user's dataset tree (`dataset_graph.read_dataset`)
and the model's node tree, not by counting: a fused node names all its functions
("fast_normalize+slow_decode+fast_normalize") and lists them with their source lines in
`functions`. A stage's `name` is the node's op name, marked: "stoker:" / "tf.data:" before
it for the prefetch Stoker's wrap or tf.data appends (not the user's), "<interleave op>/"
before it for a stage made inside an interleave's (flat_map's) function, " (autotune)" after
it when the autotuner sets its parallelism. `path` is the iterator's name in profiler traces
("Iterator::Root::Prefetch::MapAndBatch"), with "[*]" for a stage inside an interleave's
function (the profiler numbers each open element).
"""

import logging
import time
import weakref
from collections.abc import Callable
from typing import Any

from trainer_agent.capture.dataset_graph import MAX_FUNCTIONS, DatasetNode, family, read_dataset
from trainer_agent.capture.pipeline_rewrites import (
    REWRITES,
    Alignment,
    AlignmentCache,
    ModelNode,
    align,
    applied_rewrites,
    model_tree,
)
from trainer_agent.capture.recorder import Recorder

log = logging.getLogger("trainer_agent")

DEFAULT_INTERVAL_S = 5.0
MAX_STAGES = 64

# tf.data's op families (`dataset_graph.family`: no version, no "Dataset", an iterator's
# "Forever"/"Finite"/"Memory"/... dropped) -> the stage kind users know.
_KINDS: dict[str, str] = {
    "Map": "map",
    "ParallelMap": "parallel_map",
    "MapAndBatch": "map_and_batch",
    "ParallelBatch": "batch",
    "Batch": "batch",
    "PaddedBatch": "batch",
    "Rebatch": "batch",
    "Prefetch": "prefetch",
    "Cache": "cache",
    "Generator": "generator",
    "FlatMap": "flat_map",
    "Interleave": "interleave",
    "ParallelInterleave": "parallel_interleave",
    "TFRecord": "file_reader",
    "TextLine": "file_reader",
    "FixedLengthRecord": "file_reader",
    "FileReader": "file_reader",
    "Filter": "filter",
    "ParallelFilter": "filter",
    "Shuffle": "shuffle",
    "ShuffleAndRepeat": "shuffle",
    "Repeat": "repeat",
    "Take": "take",
    "Skip": "skip",
    "Zip": "zip",
    "TensorSlice": "tensor_slices",
    "FromTensor": "tensors",
    "Range": "range",
    "Unbatch": "unbatch",
    "Window": "window",
    "Scan": "scan",
}
# How Stoker marks the stages that are not the user's, in a stage's `name` (the stage
# schema has no field for it): the prefetch `StampRing.wrap` appends, the one tf.data's
# `inject_prefetch` appends, a stage made inside an interleave's (flat_map's) function, and
# a parallelism the autotuner sets.
STOKER_PREFIX = "stoker:"
TF_DATA_PREFIX = "tf.data:"
INNER_SEPARATOR = "/"
AUTOTUNE_MARK = " (autotune)"

_MAPS = ("map", "parallel_map")
_USER_MAPS = ("Map", "ParallelMap", "MapAndBatch")
_INTERLEAVES = ("interleave", "parallel_interleave", "flat_map")
_SUMMED = ("elements", "processing_ns", "bytes", "buffered")


def kind_of(op_name: str) -> str:
    """`"ParallelMapV2"` -> `"parallel_map"`, `"ForeverRepeat"` -> `"repeat"`; unknown ops
    keep a lower-case name."""
    base = family(op_name)
    return _KINDS.get(base, base.lower() or "unknown")


def _parameter(node: Any, name: str) -> float | None:
    for parameter in node.parameters:
        if parameter.name == name:
            return float(parameter.value)
    return None


def _tunable(node: Any, name: str) -> bool:
    return any(p.name == name and p.tunable for p in node.parameters)


def _stamping_top(nodes: dict[int, Any], output: int) -> tuple[int | None, bool]:
    """The node the model consumes below `Root`, or, below Stoker's stamping stage (a map
    over `Zip(map over Range, pipeline)` under any single-input nodes, such as the
    cardinality assertion of an infinite pipeline), the user's pipeline; and whether that
    stage was there. Used when the user's dataset tree is not known."""
    node = nodes.get(output)
    if node is not None and node.name == "Root":
        node = nodes.get(node.inputs[0]) if node.inputs else None
    top = node
    for _ in range(8):
        if node is None or len(node.inputs) != 1:
            break
        node = nodes.get(node.inputs[0])
    if node is not None and node.name.startswith("Zip") and len(node.inputs) == 2:
        requests = nodes.get(node.inputs[0])
        while requests is not None and kind_of(requests.name) in _MAPS and requests.inputs:
            requests = nodes.get(requests.inputs[0])
        if requests is not None and requests.name.startswith("Range"):
            return node.inputs[1], True
    return (None, False) if top is None else (top.id, False)


def _paths(tree: ModelNode) -> dict[int, str]:
    """Each node's iterator name in profiler traces: its consumer's, then "[i]" for the i-th
    input of a node with several ("[*]" inside an interleave's function, whose iterators the
    profiler numbers by element), "::" and its own name. (A repeat numbers its input by
    repetition too; that index is not known here, and not written.)"""
    paths: dict[int, str] = {}
    pending: list[tuple[ModelNode, str]] = [(tree, "Iterator::Root")]
    while pending:
        node, prefix = pending.pop()
        path = f"{prefix}::{node.name}"
        paths[node.id] = path
        inputs = node.input_count()
        for index, child in enumerate(node.children):
            if index >= inputs:
                pending.append((child, f"{path}[*]"))
            elif inputs > 1:
                pending.append((child, f"{path}[{index}]"))
            else:
                pending.append((child, path))
    return paths


def stages_from_proto(
    proto: Any,
    user: DatasetNode | None = None,
    *,
    stamped: bool = False,
    rewrites: frozenset[str] = frozenset(REWRITES),
    cache: AlignmentCache | None = None,
) -> list[dict[str, Any]]:
    """The stages of a `ModelProto`, source (position 0) first.

    Nodes are ordered inputs before consumers. An interleave's inner datasets (one subtree
    per open cycle element, e.g. a `TFRecordDataset` per file) come right before it, summed
    stage by stage into one chain whose parallelism is the interleave's; their `name` is
    the interleave's node name, "/", their own. `user` (`read_dataset` of the user's
    dataset) is aligned with the model's nodes under the `rewrites` tf.data applies (once per
    shape of the model with a `cache`); a prefetch right after the user's pipeline that is not
    the user's is Stoker's (when the pipeline was wrapped) or tf.data's.
    """
    nodes = dict(proto.nodes)
    top = nodes.get(proto.output)
    if top is not None and top.name == "Root":
        top = nodes.get(top.inputs[0]) if top.inputs else None
    tree = None if top is None else model_tree(nodes, top.id)
    if tree is None:
        return []
    search = align if cache is None else cache.align
    alignment = search(user, tree, rewrites) if user is not None else None
    root: ModelNode | None
    if alignment is not None:
        root = _with_prefetch_after(tree, alignment)
    else:
        root_id, found_stamping = _stamping_top(nodes, proto.output)
        stamped = stamped or found_stamping
        root = next((n for n in tree.walk() if n.id == root_id), None)
    if root is None:
        return []
    paths = _paths(tree)
    stages = _chain(nodes, root.id, None, 0, spine=True)[-MAX_STAGES:]
    for position, stage in enumerate(stages):
        stage["position"] = position
        stage["path"] = paths.get(stage["id"], "")[-400:]
    _attach_names(stages, alignment, stamped=stamped)
    for stage in stages:
        for key in ("spine", "leaf", "id"):
            stage.pop(key, None)
        elements = stage["elements"]
        processing_ns, produced = stage.pop("processing_ns"), stage.pop("bytes")
        stage["ms_per_element"] = processing_ns / elements / 1e6 if elements else None
        stage["bytes_per_element"] = produced / elements if elements else None
    return stages


def _with_prefetch_after(tree: ModelNode, alignment: Alignment) -> ModelNode:
    """The aligned root, or the prefetch nodes right after it that no user dataset explains
    (Stoker's wrap or tf.data added them), up to the first node with several inputs."""
    parents: dict[int, ModelNode] = {}
    for node in tree.walk():
        for child in node.children:
            parents[child.id] = node
    root = alignment.root
    parent = parents.get(root.id)
    while (
        parent is not None
        and parent.family == "Prefetch"
        and len(parent.children) == 1
        and parent.id not in alignment.runs
    ):
        root, parent = parent, parents.get(parent.id)
    return root


def _stage(node: Any, inherited: float | None) -> dict[str, Any]:
    kind = kind_of(node.name)
    parallelism = _parameter(node, "parallelism") or inherited or 1.0
    if kind in _INTERLEAVES:
        parallelism = 1.0  # its own work is handing elements over; its readers are inputs
    buffer_size = _parameter(node, "buffer_size")
    if buffer_size is None and kind in ("parallel_map", "map_and_batch"):
        buffer_size = parallelism
    name = node.name + (AUTOTUNE_MARK if _tunable(node, "parallelism") else "")
    return {
        "id": node.id,
        "position": 0,
        "kind": kind,
        "name": name,
        "function": None,
        "functions": [],
        "path": "",
        "serial": False,
        "parallelism": parallelism,
        "elements": int(node.num_elements),
        "processing_ns": int(node.processing_time),
        "bytes": int(node.bytes_produced),
        "buffered": int(node.buffered_elements),
        "buffer_size": buffer_size,
        "leaf": not node.inputs,
    }


def _chain(
    nodes: dict[int, Any], node_id: int, inherited: float | None, depth: int, *, spine: bool
) -> list[dict[str, Any]]:
    """The stages of the subtree under `node_id`, inputs first; `spine`: on the path from
    the root to the source through every node's first input (where the user's chain is)."""
    node = nodes.get(node_id)
    if node is None or depth > MAX_STAGES:
        return []
    inputs = list(node.inputs)
    kind = kind_of(node.name)
    chain: list[dict[str, Any]] = []
    if kind in _INTERLEAVES and inputs:
        chain += _chain(nodes, inputs[0], inherited, depth + 1, spine=spine)
        inner = 1.0
        if kind != "flat_map":
            inner = _parameter(node, "parallelism") or _parameter(node, "cycle_length") or 1.0
        cycle = [_chain(nodes, child, inner, depth + 1, spine=False) for child in inputs[1:]]
        for stage in _merged(cycle):
            stage["name"] = f"{node.name}{INNER_SEPARATOR}{stage['name']}"[:200]
            chain.append(stage)
    else:
        for index, child in enumerate(inputs):
            chain += _chain(nodes, child, inherited, depth + 1, spine=spine and index == 0)
    stage = _stage(node, inherited)
    stage["spine"] = spine
    chain.append(stage)
    return chain


def _merged(chains: list[list[dict[str, Any]]]) -> list[dict[str, Any]]:
    """Chains of the same shape (an interleave's cycle elements) summed stage by stage."""
    chains = [chain for chain in chains if chain]
    if not chains:
        return []
    first = chains[0]
    shape = [stage["name"] for stage in first]
    for other in chains[1:]:
        if [stage["name"] for stage in other] != shape:
            continue
        for total, stage in zip(first, other, strict=True):
            for key in _SUMMED:
                total[key] += stage[key]
    return first


def _attach_names(
    stages: list[dict[str, Any]], alignment: Alignment | None, *, stamped: bool
) -> None:
    """Name each model node by the user's datasets it runs (their functions, source first);
    mark a prefetch none of them explains as Stoker's (wrapped) or tf.data's."""
    runs = {} if alignment is None else alignment.runs
    for stage in stages:
        datasets = runs.get(stage["id"])
        if datasets is None:
            if alignment is not None and stage["kind"] == "prefetch" and not is_inner(stage):
                stage["name"] = (STOKER_PREFIX if stamped else TF_DATA_PREFIX) + stage["name"]
            continue
        if not datasets:  # made by a rewrite around the user's datasets, running none
            stage["name"] = TF_DATA_PREFIX + stage["name"]
            continue
        functions = [f for dataset in datasets for f in dataset.functions]
        stage["function"] = "+".join(f.name for f in functions)[:200] or None
        stage["functions"] = [f.wire() for f in functions[:MAX_FUNCTIONS]]
        maps = [d for d in datasets if d.family in _USER_MAPS]
        if stage["kind"] in ("map", "map_and_batch") and AUTOTUNE_MARK not in stage["name"]:
            # The user wrote these maps without num_parallel_calls: tf.data runs them so.
            stage["serial"] = bool(maps) and all(d.family == "Map" for d in maps)


def is_users(stage: dict[str, Any]) -> bool:
    """Whether the stage is one the user wrote (or tf.data made of what they wrote)."""
    name = str(stage.get("name") or "")
    return not (name.startswith(STOKER_PREFIX) or name.startswith(TF_DATA_PREFIX))


def is_inner(stage: dict[str, Any]) -> bool:
    """Whether the stage runs inside an interleave's (flat_map's) function."""
    return INNER_SEPARATOR in str(stage.get("name") or "")


def owned_iterator(iterator: Any, depth: int = 0) -> Any:
    """The `tf.data` `OwnedIterator` inside what Keras hands `train_function` (a distributed
    iterator under a strategy), or None."""
    from tensorflow.python.data.ops import iterator_ops

    if isinstance(iterator, iterator_ops.OwnedIterator):
        return iterator
    if depth > 3:
        return None
    for attribute in ("_iterators", "_iterator"):
        value = getattr(iterator, attribute, None)
        for child in value if isinstance(value, list | tuple) else [value]:
            if child is not None:
                found = owned_iterator(child, depth + 1)
                if found is not None:
                    return found
    return None


# A parallelism below this share of the threads a stage's own rate shows is read wrong.
_SHOWN = 0.8


def with_parallelism_shown(
    stages: list[dict[str, Any]], previous: list[tuple[str, int]] | None, elapsed_s: float
) -> list[dict[str, Any]]:
    """`stages` with each parallelism at least the threads its work shows between two reads
    of the same iterator: elements made since `previous` (name, elements) over `elapsed_s`,
    at its time per element. tf.data's model reads one thread for a fused MapAndBatch under
    AUTOTUNE that runs several, so its capacity read below the rate the run reached. A stage
    whose parallelism the user fixed keeps it: its time per element includes waiting for a
    CPU, which on a busy host would show more threads than it may run."""
    if not previous or elapsed_s <= 0 or [s["name"] for s in stages] != [n for n, _ in previous]:
        return stages
    for stage, (_, before) in zip(stages, previous, strict=True):
        made, ms = stage["elements"] - before, stage.get("ms_per_element")
        if made <= 0 or not ms or not str(stage.get("name", "")).endswith(AUTOTUNE_MARK):
            continue
        shown = made / elapsed_s * ms / 1000.0
        if (stage.get("parallelism") or 1.0) < _SHOWN * shown:
            stage["parallelism"] = round(shown, 2)
    return stages


class PipelineSource:
    """Reads the model of the watched iterator every `interval_s`, on the sampler thread."""

    def __init__(self, interval_s: float = DEFAULT_INTERVAL_S) -> None:
        self.interval_s = max(0.5, float(interval_s))
        # Weak references only: an iterator must die where it would without Stoker. Held here,
        # the last one outlived its fit and died at a later garbage collection on whichever
        # thread ran it, and a tf.data iterator's destructor can block that thread for up to a
        # minute (docs/agent.md, "The iterator Stoker watches").
        self._iterator: Callable[[], Any] = _no_iterator
        self._user: DatasetNode | None = None
        self._stamped = False
        self._next_read = 0.0
        self._unavailable_logged = False
        self._previous: tuple[Callable[[], Any], float, list[tuple[str, int]]] | None = None
        self._alignments = AlignmentCache()
        self._rewrites: tuple[Any, frozenset[str]] | None = None  # for the iterated dataset
        self.last_read_us: float | None = None

    def describe(self, user: DatasetNode | None, *, stamped: bool) -> None:
        """The user's dataset tree (`read_dataset` of the dataset before Stoker's stamping
        stage) and whether that stage follows it."""
        self._user = user
        self._stamped = stamped

    def watch(self, iterator: Any) -> None:
        """Training thread: keep a weak reference (the read happens on the sampler thread)."""
        self._iterator = _weak(iterator)

    def _read(self, iterator: Any) -> tuple[Any, list[dict[str, Any]]]:
        """The tf.data iterator inside `iterator` and its stages, read from its model now."""
        import tensorflow as tf

        owned = owned_iterator(iterator)
        if owned is None:
            raise TypeError(f"no tf.data iterator in {type(iterator).__name__}")
        proto = tf.data.experimental.get_model_proto(owned)
        dataset = getattr(owned, "_dataset", None)
        if self._user is None and not self._stamped:
            self._user = read_dataset(dataset)
        if self._rewrites is None or self._rewrites[0] is not dataset:
            self._rewrites = (dataset, applied_rewrites(dataset))  # probed once per options
        stages = stages_from_proto(
            proto, self._user, stamped=self._stamped, rewrites=self._rewrites[1],
            cache=self._alignments,
        )  # fmt: skip
        return owned, stages

    def stages_now(self) -> list[dict[str, Any]]:
        """The watched iterator's stages, read now on the calling thread (`stoker tune` reads
        them at a trial's last step). Raises when no iterator is watched or the read fails."""
        return self._read(self._iterator())[1]

    def sample(self, t: float, recorder: Recorder) -> None:
        iterator = self._iterator()
        now = time.monotonic()
        if iterator is None or now < self._next_read:
            return
        self._next_read = now + self.interval_s
        started = time.perf_counter()
        try:
            owned, stages = self._read(iterator)
            previous = self._previous
            if previous is not None and previous[0]() is owned:
                with_parallelism_shown(stages, previous[2], now - previous[1])
            self._previous = (_weak(owned), now, [(s["name"], s["elements"]) for s in stages])
        except Exception as error:
            if not self._unavailable_logged:
                self._unavailable_logged = True
                log.info("Stoker: tf.data's autotuning model is unavailable (%s)", error)
            recorder.pipeline.append(t, "unavailable", [], None)
            return
        self.last_read_us = (time.perf_counter() - started) * 1e6
        recorder.pipeline.append(t, "autotune_model", stages, round(self.last_read_us, 1))


def _no_iterator() -> None:
    return None


def _weak(value: Any) -> Callable[[], Any]:
    """A weak reference to `value` (None when there is none); a strong one only for an object
    that takes no weak reference (no tf.data iterator is one)."""
    if value is None:
        return _no_iterator
    try:
        return weakref.ref(value)
    except TypeError:
        return lambda: value
