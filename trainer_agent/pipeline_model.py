"""Per-stage figures of a live `tf.data` iterator, from tf.data's own autotuning model.

`tf.data.experimental.get_model_proto(iterator)` (TF 2.13+) returns the model the autotuner
keeps: per node its own processing time (ns, summed over its threads), elements produced,
parallelism, buffered elements and buffer size, bytes. `stages_from_proto` turns it into
stages from the source (position 0) to the stage the model consumes; `PipelineSource` reads
it on the sampler thread. The training thread only hands over the iterator (`watch`).
"""

import logging
import time
from typing import Any

from trainer_agent.recorder import Recorder

log = logging.getLogger("trainer_agent")

DEFAULT_INTERVAL_S = 5.0
MAX_STAGES = 64

# tf.data op names (without the V2/V3... suffix) -> the stage kind users know.
_KINDS: dict[str, str] = {
    "Map": "map",
    "ParallelMap": "parallel_map",
    "MapAndBatch": "map_and_batch",
    "ParallelBatch": "batch",
    "Batch": "batch",
    "PaddedBatch": "batch",
    "Prefetch": "prefetch",
    "Cache": "cache",
    "MemoryCache": "cache",
    "MemoryCacheImpl": "cache",  # the in-memory cache's filling half (TF 2.x)
    "Generator": "generator",
    "FlatMap": "flat_map",
    "Interleave": "interleave",
    "ParallelInterleave": "parallel_interleave",
    "LegacyParallelInterleave": "parallel_interleave",
    "TFRecord": "file_reader",
    "TextLine": "file_reader",
    "FixedLengthRecord": "file_reader",
    "FileReader": "file_reader",
    "Filter": "filter",
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
    "Rebatch": "batch",
}
# Which stages carry a user function, by family (the Python dataset chain is matched by it).
_FAMILIES: dict[str, str] = {
    "map": "map",
    "parallel_map": "map",
    "map_and_batch": "map",
    "flat_map": "interleave",
    "interleave": "interleave",
    "parallel_interleave": "interleave",
    "filter": "filter",
}
_PY_FAMILIES: dict[str, tuple[str, str]] = {
    "MapDataset": ("map", "_map_func"),
    "ParallelMapDataset": ("map", "_map_func"),
    "MapAndBatchDataset": ("map", "_map_func"),
    "FlatMapDataset": ("interleave", "_map_func"),
    "InterleaveDataset": ("interleave", "_map_func"),
    "ParallelInterleaveDataset": ("interleave", "_map_func"),
    "FilterDataset": ("filter", "_predicate"),
}


def kind_of(op_name: str) -> str:
    """`"ParallelMapV2"` -> `"parallel_map"`; unknown ops keep a lower-case name."""
    base = (
        op_name[:-2]
        if len(op_name) > 2 and op_name[-2] == "V" and op_name[-1].isdigit()
        else op_name
    )
    base = base.removesuffix("Dataset")
    return _KINDS.get(base, base.lower() or "unknown")


def function_names(dataset: Any, max_nodes: int = 200) -> list[tuple[str, str]]:
    """(family, user function name) of the map/interleave/filter stages, source first."""
    names: list[tuple[str, str]] = []
    node, seen = dataset, 0
    while node is not None and seen < max_nodes:
        seen += 1
        family_attr = _PY_FAMILIES.get(type(node).__name__.lstrip("_"))
        if family_attr is not None:
            wrapper = getattr(node, family_attr[1], None)
            func = getattr(wrapper, "_func", None)
            name = getattr(func, "__name__", None) or ""
            names.append((family_attr[0], str(name)[:100]))
        node = getattr(node, "_input_dataset", None)
    names.reverse()
    return names


def _parameter(node: Any, name: str) -> float | None:
    for parameter in node.parameters:
        if parameter.name == name:
            return float(parameter.value)
    return None


def _user_root(nodes: dict[int, Any], output: int, stamped: bool) -> int | None:
    """The node the model consumes: below `Root`, and below Stoker's stamping stage
    (a map over `Zip(requests, pipeline)`) when the dataset was wrapped."""
    node = nodes.get(output)
    if node is None:
        return None
    if node.name == "Root":
        if not node.inputs:
            return None
        node = nodes.get(node.inputs[0])
    if stamped:
        while node is not None and kind_of(node.name) in ("map", "parallel_map"):
            node = nodes.get(node.inputs[0]) if node.inputs else None
        if node is not None and node.name.startswith("Zip") and node.inputs:
            node = nodes.get(node.inputs[-1])
    return None if node is None else node.id


def stages_from_proto(
    proto: Any, names: list[tuple[str, str]] | None = None, *, stamped: bool = False
) -> list[dict[str, Any]]:
    """The stages of a `ModelProto`, source (position 0) first.

    Nodes are ordered inputs before consumers. An interleave's inner datasets (one subtree
    per open cycle element, e.g. a `TFRecordDataset` per file) come right before it, summed
    stage by stage into one chain whose parallelism is the interleave's.
    """
    nodes = dict(proto.nodes)
    root = _user_root(nodes, proto.output, stamped)
    if root is None:
        return []
    stages = _chain(nodes, root, None, 0)[-MAX_STAGES:]
    for position, stage in enumerate(stages):
        stage["position"] = position
    _attach_names(stages, names or [])
    for stage in stages:
        elements = stage["elements"]
        processing_ns, produced = stage.pop("processing_ns"), stage.pop("bytes")
        stage["ms_per_element"] = processing_ns / elements / 1e6 if elements else None
        stage["bytes_per_element"] = produced / elements if elements else None
    return stages


def _stage(node: Any, inherited: float | None) -> dict[str, Any]:
    kind = kind_of(node.name)
    parallelism = _parameter(node, "parallelism") or inherited or 1.0
    if kind in _INTERLEAVES:
        parallelism = 1.0  # its own work is handing elements over; its readers are inputs
    buffer_size = _parameter(node, "buffer_size")
    if buffer_size is None and kind in ("parallel_map", "map_and_batch"):
        buffer_size = parallelism
    return {
        "position": 0,
        "kind": kind,
        "name": node.name,
        "function": None,
        "parallelism": parallelism,
        "elements": int(node.num_elements),
        "processing_ns": int(node.processing_time),
        "bytes": int(node.bytes_produced),
        "buffered": int(node.buffered_elements),
        "buffer_size": buffer_size,
    }


_INTERLEAVES = ("interleave", "parallel_interleave", "flat_map")
_SUMMED = ("elements", "processing_ns", "bytes", "buffered")


def _chain(
    nodes: dict[int, Any], node_id: int, inherited: float | None, depth: int
) -> list[dict[str, Any]]:
    """The stages of the subtree under `node_id`, inputs first."""
    node = nodes.get(node_id)
    if node is None or depth > MAX_STAGES:
        return []
    inputs = list(node.inputs)
    kind = kind_of(node.name)
    chain: list[dict[str, Any]] = []
    if kind in _INTERLEAVES and inputs:
        chain += _chain(nodes, inputs[0], inherited, depth + 1)
        inner = 1.0
        if kind != "flat_map":
            inner = _parameter(node, "parallelism") or _parameter(node, "cycle_length") or 1.0
        inner_chain = _merged([_chain(nodes, child, inner, depth + 1) for child in inputs[1:]])
        for stage in inner_chain:
            stage["inner"] = True  # made inside the interleave's function: no user name
        chain += inner_chain
    else:
        for child in inputs:
            chain += _chain(nodes, child, inherited, depth + 1)
    chain.append(_stage(node, inherited))
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


def _attach_names(stages: list[dict[str, Any]], names: list[tuple[str, str]]) -> None:
    """Give the k-th map (interleave, filter) stage the k-th such Python function's name."""
    by_family: dict[str, list[str]] = {}
    for family, name in names:
        by_family.setdefault(family, []).append(name)
    for stage in stages:
        if stage.pop("inner", False):
            continue
        family = _FAMILIES.get(stage["kind"])
        queue = by_family.get(family or "")
        if queue:
            stage["function"] = queue.pop(0) or None


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


class PipelineSource:
    """Reads the model of the watched iterator every `interval_s`, on the sampler thread."""

    def __init__(self, interval_s: float = DEFAULT_INTERVAL_S) -> None:
        self.interval_s = max(0.5, float(interval_s))
        self._iterator: Any = None
        self._names: list[tuple[str, str]] = []
        self._stamped = False
        self._next_read = 0.0
        self._unavailable_logged = False
        self.last_read_us: float | None = None

    def describe(self, names: list[tuple[str, str]], *, stamped: bool) -> None:
        """The user's function names (`function_names` of the dataset before Stoker's
        stamping stage) and whether that stage follows it."""
        self._names = names
        self._stamped = stamped

    def watch(self, iterator: Any) -> None:
        """Training thread: keep a reference (the read happens on the sampler thread)."""
        self._iterator = iterator

    def sample(self, t: float, recorder: Recorder) -> None:
        iterator = self._iterator
        now = time.monotonic()
        if iterator is None or now < self._next_read:
            return
        self._next_read = now + self.interval_s
        started = time.perf_counter()
        try:
            import tensorflow as tf

            owned = owned_iterator(iterator)
            if owned is None:
                raise TypeError(f"no tf.data iterator in {type(iterator).__name__}")
            proto = tf.data.experimental.get_model_proto(owned)
            if not self._names and not self._stamped:
                self._names = function_names(getattr(owned, "_dataset", None))
            stages = stages_from_proto(proto, self._names, stamped=self._stamped)
        except Exception as error:
            if not self._unavailable_logged:
                self._unavailable_logged = True
                log.info("Stoker: tf.data's autotuning model is unavailable (%s)", error)
            recorder.pipeline.append(t, "unavailable", [], None)
            return
        self.last_read_us = (time.perf_counter() - started) * 1e6
        recorder.pipeline.append(t, "autotune_model", stages, round(self.last_read_us, 1))
