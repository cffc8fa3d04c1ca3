"""Per-stage figures of a live `tf.data` iterator, from tf.data's own autotuning model.

`tf.data.experimental.get_model_proto(iterator)` (TF 2.13+) returns the model the autotuner
keeps: per node its own processing time (ns, summed over its threads), elements produced,
parallelism, buffered elements and buffer size, bytes. `stages_from_proto` turns it into
stages from the source (position 0) to the stage the model consumes; `PipelineSource` reads
it on the sampler thread. The training thread only hands over the iterator (`watch`).

The user's functions are matched to the nodes by aligning the user's dataset chain
(`function_names`) with the nodes after tf.data's rewrites (fusions, parallelized maps, an
injected prefetch), not by counting. A stage's `name` is the node's op name, marked:
"stoker:" / "tf.data:" before it for the prefetch Stoker's wrap or tf.data appends (not the
user's), "<interleave op>/" before it for a stage made inside an interleave's (flat_map's)
function, " (autotune)" after it when the autotuner sets its parallelism.
"""

import logging
import time
import weakref
from collections.abc import Callable
from typing import Any

from trainer_agent.capture.recorder import Recorder

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
# The Python dataset classes (without "_", "Dataset", "V2") -> the kind of their model node;
# "" for wrappers that make no node of their own. Sources (no input) are "source".
_PY_KINDS: dict[str, str] = {
    "Map": "map",
    "ParallelMap": "parallel_map",
    "MapAndBatch": "map_and_batch",
    "Batch": "batch",
    "ParallelBatch": "batch",
    "PaddedBatch": "batch",
    "Prefetch": "prefetch",
    "Cache": "cache",
    "Filter": "filter",
    "FlatMap": "flat_map",
    "Interleave": "interleave",
    "ParallelInterleave": "parallel_interleave",
    "TFRecord": "file_reader",
    "TextLine": "file_reader",
    "FixedLengthRecord": "file_reader",
    "Shuffle": "shuffle",
    "Repeat": "repeat",
    "Take": "take",
    "Skip": "skip",
    "Unbatch": "unbatch",
    "Options": "",
    "AssertCardinality": "",
    "Restructured": "",
}
# The attribute that holds a dataset's traced user function.
_PY_FUNCTION_ATTRS = ("_map_func", "_predicate")

# How Stoker marks the stages that are not the user's, in a stage's `name` (the stage
# schema has no field for it): the prefetch `StampRing.wrap` appends, the one tf.data's
# `inject_prefetch` appends, a stage made inside an interleave's (flat_map's) function, and
# a parallelism the autotuner sets.
STOKER_PREFIX = "stoker:"
TF_DATA_PREFIX = "tf.data:"
INNER_SEPARATOR = "/"
AUTOTUNE_MARK = " (autotune)"

_MAPS = ("map", "parallel_map")
_INTERLEAVES = ("interleave", "parallel_interleave", "flat_map")
_SUMMED = ("elements", "processing_ns", "bytes", "buffered")


def kind_of(op_name: str) -> str:
    """`"ParallelMapV2"` -> `"parallel_map"`; unknown ops keep a lower-case name."""
    base = (
        op_name[:-2]
        if len(op_name) > 2 and op_name[-2] == "V" and op_name[-1].isdigit()
        else op_name
    )
    base = base.removesuffix("Dataset")
    return _KINDS.get(base, base.lower() or "unknown")


def _py_inputs(node: Any) -> list[Any]:
    try:
        inputs = node._inputs()
    except Exception:
        inputs = None
    if inputs is None:
        single = getattr(node, "_input_dataset", None)
        return [] if single is None else [single]
    return list(inputs)


def _py_kind(node: Any) -> str:
    return type(node).__name__.lstrip("_").removesuffix("V2").removesuffix("Dataset")


def _is_stamping(node: Any, inputs: list[Any]) -> bool:
    """Stoker's stamping stage: a map over `Zip(map over Range, the user's pipeline)`."""
    if _py_kind(node) != "Map" or len(inputs) != 1 or _py_kind(inputs[0]) != "Zip":
        return False
    zipped = _py_inputs(inputs[0])
    if len(zipped) != 2:
        return False
    requests = zipped[0]
    while _py_kind(requests) == "Map":
        below = _py_inputs(requests)
        requests = below[0] if below else None
    return requests is not None and _py_kind(requests) == "Range"


def _py_function(node: Any) -> str:
    for attribute in _PY_FUNCTION_ATTRS:
        wrapper = getattr(node, attribute, None)
        name = getattr(getattr(wrapper, "_func", None), "__name__", None)
        if name:
            return str(name)[:100]
    return ""


def _tf_data_own(node: Any) -> bool:
    func = getattr(getattr(node, "_map_func", None), "_func", None)
    return str(getattr(func, "__module__", "")).startswith("tensorflow.")


def user_datasets(dataset: Any, max_nodes: int = 200) -> list[Any]:
    """The datasets on the user's input spine, from `dataset` to the source (consumer first).

    Stoker's own stamping stage (a map over `Zip(Range, pipeline)`) is left out. The walk
    follows each dataset's only input and ends at a source, a file reader (its input is its
    file names) or a dataset of several inputs (a zip), which is then the last one."""
    nodes: list[Any] = []
    node, seen = dataset, 0
    while node is not None and seen < max_nodes:
        seen += 1
        inputs = _py_inputs(node)
        if _is_stamping(node, inputs):
            node = _py_inputs(inputs[0])[-1]
            continue
        nodes.append(node)
        if _PY_KINDS.get(_py_kind(node)) == "file_reader" or len(inputs) != 1:
            break
        node = inputs[0]
    return nodes


def function_names(dataset: Any, max_nodes: int = 200) -> list[tuple[str, str]]:
    """The user's chain of datasets as (kind, function name or ""), source first.

    Every dataset on the input spine (`user_datasets`), not only those with a function:
    `stages_from_proto` aligns this chain with tf.data's model nodes after its rewrites
    (map+batch fused into MapAndBatch, serial maps made parallel, consecutive maps fused, the
    prefetch tf.data or Stoker appends), so a function is named by the node that runs it, not
    by counting.
    """
    chain: list[tuple[str, str]] = []
    for node in user_datasets(dataset, max_nodes):
        base = _py_kind(node)
        kind = _PY_KINDS.get(base)
        if kind is None:
            kind = "source" if not _py_inputs(node) else kind_of(base)
        function = _py_function(node)
        if kind == "flat_map" and _tf_data_own(node):
            kind, function = "generator", ""  # from_generator: a flat_map of tf.data's own
        if kind:
            chain.append((kind, function))
    chain.reverse()
    return chain


def _parameter(node: Any, name: str) -> float | None:
    for parameter in node.parameters:
        if parameter.name == name:
            return float(parameter.value)
    return None


def _tunable(node: Any, name: str) -> bool:
    return any(p.name == name and p.tunable for p in node.parameters)


def _user_root(nodes: dict[int, Any], output: int) -> tuple[int | None, bool]:
    """The node the model consumes, below `Root` and below Stoker's stamping stage (a map
    over `Zip(map over Range, pipeline)`), and whether that stage was there."""
    node = nodes.get(output)
    if node is not None and node.name == "Root":
        node = nodes.get(node.inputs[0]) if node.inputs else None
    top = node
    while node is not None and kind_of(node.name) in _MAPS and node.inputs:
        node = nodes.get(node.inputs[0])
    if node is not None and node.name.startswith("Zip") and len(node.inputs) == 2:
        requests = nodes.get(node.inputs[0])
        while requests is not None and kind_of(requests.name) in _MAPS and requests.inputs:
            requests = nodes.get(requests.inputs[0])
        if requests is not None and requests.name.startswith("Range"):
            return node.inputs[1], True
    return (None, False) if top is None else (top.id, False)


def stages_from_proto(
    proto: Any, names: list[tuple[str, str]] | None = None, *, stamped: bool = False
) -> list[dict[str, Any]]:
    """The stages of a `ModelProto`, source (position 0) first.

    Nodes are ordered inputs before consumers. An interleave's inner datasets (one subtree
    per open cycle element, e.g. a `TFRecordDataset` per file) come right before it, summed
    stage by stage into one chain whose parallelism is the interleave's; their `name` is
    the interleave's node name, "/", their own. `names` (`function_names` of the user's
    dataset) is aligned with the chain of nodes from the source to the root; a prefetch it
    does not account for is Stoker's (when the pipeline was wrapped) or tf.data's.
    """
    nodes = dict(proto.nodes)
    root, found_stamping = _user_root(nodes, proto.output)
    if root is None:
        return []
    stages = _chain(nodes, root, None, 0, spine=True)[-MAX_STAGES:]
    for position, stage in enumerate(stages):
        stage["position"] = position
    _attach_names(stages, names or [], stamped=stamped or found_stamping)
    for stage in stages:
        stage.pop("spine", None)
        stage.pop("leaf", None)
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
    name = node.name + (AUTOTUNE_MARK if _tunable(node, "parallelism") else "")
    return {
        "position": 0,
        "kind": kind,
        "name": name,
        "function": None,
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


def _matches(kind: str, stage: dict[str, Any]) -> bool:
    """Whether the user's dataset of `kind` can be the model node `stage` on its own."""
    other = stage["kind"]
    return (
        kind == other
        or (kind in _MAPS and other in _MAPS)
        or (kind in _INTERLEAVES and other in _INTERLEAVES)
        or (kind == "source" and stage["leaf"])
        or (kind == "generator" and other == "flat_map")
    )


# tf.data's static rewrites of two consecutive datasets (source first) into one node.
_FUSED: dict[tuple[str, str], tuple[str, ...]] = {
    ("map", "batch"): ("map_and_batch",),
    ("parallel_map", "batch"): ("map_and_batch",),
    ("map", "map"): _MAPS,
    ("map", "parallel_map"): _MAPS,
    ("parallel_map", "map"): _MAPS,
    ("parallel_map", "parallel_map"): _MAPS,
    ("map", "filter"): ("filter", "mapandfilter"),
    ("parallel_map", "filter"): ("filter", "mapandfilter"),
    ("filter", "filter"): ("filter",),
    ("shuffle", "repeat"): ("shuffle",),
}


def _align(chain: list[tuple[str, str]], spine: list[dict[str, Any]]) -> list[list[int] | None]:
    """For each spine stage (source first), the indices of the user's datasets it runs, or
    None when it is none of them: the cheapest alignment (an unmatched dataset or node costs
    1, a fusion a little, so a one-to-one match wins)."""
    n, m = len(chain), len(spine)
    inf = float("inf")
    cost = [[inf] * (m + 1) for _ in range(n + 1)]
    move: list[list[tuple[int, int, list[int] | None] | None]] = [
        [None] * (m + 1) for _ in range(n + 1)
    ]
    cost[n][m] = 0.0
    for i in range(n, -1, -1):
        for j in range(m, -1, -1):
            if i == n and j == m:
                continue
            options: list[tuple[float, tuple[int, int, list[int] | None]]] = []
            if i < n and j < m and _matches(chain[i][0], spine[j]):
                options.append((cost[i + 1][j + 1], (1, 1, [i])))
            if i + 1 < n and j < m:
                fused = _FUSED.get((chain[i][0], chain[i + 1][0]), ())
                if spine[j]["kind"] in fused:
                    options.append((0.1 + cost[i + 2][j + 1], (2, 1, [i, i + 1])))
            if i + 2 < n and j < m and spine[j]["kind"] == "map_and_batch":
                # fused maps, then fused with the batch after them
                three = (chain[i][0], chain[i + 1][0], chain[i + 2][0])
                if three[0] in _MAPS and three[1] in _MAPS and three[2] == "batch":
                    options.append((0.2 + cost[i + 3][j + 1], (3, 1, [i, i + 1, i + 2])))
            cache = i < n and j + 1 < m and chain[i][0] == "cache"
            if cache and spine[j]["kind"] == spine[j + 1]["kind"] == "cache":
                options.append((cost[i + 1][j + 2], (1, 2, [i])))
            if j < m:
                options.append((1.0 + cost[i][j + 1], (0, 1, None)))
            if i < n:
                options.append((1.0 + cost[i + 1][j], (1, 0, None)))
            best = min(options, key=lambda option: option[0])
            cost[i][j], move[i][j] = best
    result: list[list[int] | None] = [None] * m
    i = j = 0
    while (i < n or j < m) and move[i][j] is not None:
        di, dj, matched = move[i][j]  # type: ignore[misc]
        for k in range(j, j + dj):
            result[k] = matched
        i, j = i + di, j + dj
    return result


def _attach_names(
    stages: list[dict[str, Any]], chain: list[tuple[str, str]], *, stamped: bool
) -> None:
    """Name each model node on the spine by the user's dataset(s) it runs; mark a prefetch
    that is none of them as Stoker's (wrapped) or tf.data's."""
    spine = [stage for stage in stages if stage["spine"]]
    if not chain or not spine:
        return
    for stage, matched in zip(spine, _align(chain, spine), strict=True):
        if matched is None:
            if stage["kind"] == "prefetch":
                stage["name"] = (STOKER_PREFIX if stamped else TF_DATA_PREFIX) + stage["name"]
            continue
        functions = [chain[k][1] for k in matched if chain[k][1]]
        stage["function"] = "+".join(functions)[:200] or None


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
    AUTOTUNE that runs several, so its capacity read below the rate the run reached."""
    if not previous or elapsed_s <= 0 or [s["name"] for s in stages] != [n for n, _ in previous]:
        return stages
    for stage, (_, before) in zip(stages, previous, strict=True):
        made, ms = stage["elements"] - before, stage.get("ms_per_element")
        if made <= 0 or not ms:
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
        self._names: list[tuple[str, str]] = []
        self._stamped = False
        self._next_read = 0.0
        self._unavailable_logged = False
        self._previous: tuple[Callable[[], Any], float, list[tuple[str, int]]] | None = None
        self.last_read_us: float | None = None

    def describe(self, names: list[tuple[str, str]], *, stamped: bool) -> None:
        """The user's function names (`function_names` of the dataset before Stoker's
        stamping stage) and whether that stage follows it."""
        self._names = names
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
        if not self._names and not self._stamped:
            self._names = function_names(getattr(owned, "_dataset", None))
        return owned, stages_from_proto(proto, self._names, stamped=self._stamped)

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
