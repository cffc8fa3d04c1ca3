"""What a `tf.data` pipeline does, for the diagnosis's evidence and advice.

`describe_pipeline(ds)` reads the dataset's tree (`dataset_graph.read_dataset`: no element
is produced) and reports whether it prefetches, maps in parallel, caches and interleaves,
whether any of the user's maps runs serially, and where its elements come from (files it
reads, arrays in memory, a Python generator). Stoker's own stamping stage (what
`StampRing.wrap` appends: a map over `Zip(map over Range, pipeline)`, under a cardinality
assertion for an infinite pipeline) is not described: what is described is the user's
pipeline. Best effort: an unknown structure yields an empty dict.
"""

from typing import Any

from trainer_agent.capture.dataset_graph import DatasetNode, read_dataset

# Families found in the tree -> the flag they set.
_FLAGS = {
    "Prefetch": "prefetch",
    "ParallelMap": "parallel_map",
    "MapAndBatch": "parallel_map",  # tf.data.experimental.map_and_batch: parallel
    "Cache": "cache",
    "ParallelInterleave": "parallel_interleave",
    "Interleave": "interleave",
    "FlatMap": "flat_map",
    "ParallelBatch": "parallel_batch",
}
# Sources whose elements are already in memory.
_IN_MEMORY = frozenset({"TensorSlice", "FromTensor", "Range", "Random", "SparseTensorSlice"})


def _below_stamping(node: DatasetNode) -> DatasetNode | None:
    """The user's pipeline when `node` is Stoker's stamping stage, else None."""
    for _ in range(4):  # past the cardinality assertion an infinite pipeline gets
        if node.family == "Map" and len(node.inputs) == 1 and node.inputs[0].family == "Zip":
            break
        if len(node.inputs) != 1:
            return None
        node = node.inputs[0]
    if node.family != "Map" or len(node.inputs) != 1 or node.inputs[0].family != "Zip":
        return None
    zipped = node.inputs[0].inputs
    if len(zipped) != 2:
        return None
    requests = zipped[0]
    while requests.family == "Map" and requests.inputs:
        requests = requests.inputs[0]
    return zipped[1] if requests.family == "Range" else None


def source_of(tree: DatasetNode) -> str:
    """Where the pipeline's elements come from: "files" (it reads files), "generator" (a
    Python generator), "memory" (arrays or a range), or "unknown"."""
    nodes = list(tree.walk())
    if any(node.reads_files for node in nodes):
        return "files"
    if any(node.family == "Generator" for node in nodes):
        return "generator"
    leaves = [node for node in nodes if not node.inputs and node.inner is None]
    if leaves and all(node.family in _IN_MEMORY for node in leaves):
        return "memory"
    return "unknown"


def describe_tree(tree: DatasetNode) -> dict[str, Any]:
    """`describe_pipeline` of a tree already read."""
    tree = _below_stamping(tree) or tree
    found = {flag: False for flag in _FLAGS.values()}
    found["serial_map"] = False
    stages = []
    for node in tree.walk():
        stages.append(node.family)
        flag = _FLAGS.get(node.family)
        if flag is not None:
            found[flag] = True
        if node.family == "Map" and node.functions and not node.noop:
            found["serial_map"] = True
    return {
        **found,
        "prefetch_last": tree.family == "Prefetch",
        "reads_files": any(node.reads_files for node in tree.walk()),
        "source": source_of(tree),
        "stages": stages[:50],
    }


def describe_pipeline(dataset: Any) -> dict[str, Any]:
    """`{"prefetch": bool, "prefetch_last": bool, "parallel_map": bool, "serial_map": bool,
    "cache": bool, ..., "reads_files": bool, "source": "files" | "memory" | "generator" |
    "unknown", "stages": [op families, outermost first]}` for a `tf.data.Dataset`, or `{}`
    when it cannot tell. `prefetch_last`: the outermost stage (past options) is a prefetch;
    `serial_map`: a map of the user's runs without num_parallel_calls."""
    tree = read_dataset(dataset)
    return {} if tree is None else describe_tree(tree)
