"""What a `tf.data` pipeline does, for the diagnosis's evidence and advice.

`describe_pipeline(ds)` walks the dataset's graph of input datasets (no element is
produced) and reports whether it prefetches, maps in parallel, caches and interleaves, and
whether any map runs serially. Stoker's own stamping stage (what `StampRing.wrap`
appends: a map over `Zip(map over Range, pipeline)`) is not walked: what is described is
the user's pipeline. Best effort: an unknown structure yields an empty dict.
"""

from typing import Any

_KINDS = {
    "PrefetchDataset": "prefetch",
    "ParallelMapDataset": "parallel_map",
    "MapAndBatchDataset": "parallel_map",  # tf.data.experimental.map_and_batch: parallel
    "MapDataset": "serial_map",
    "CacheDataset": "cache",
    "ParallelInterleaveDataset": "parallel_interleave",
    "InterleaveDataset": "interleave",
    "FlatMapDataset": "flat_map",
    "ParallelBatchDataset": "parallel_batch",
}


def _inputs(node: Any) -> list[Any]:
    inputs = getattr(node, "_inputs", None)
    return list(inputs()) if callable(inputs) else []


def _name(node: Any) -> str:
    return type(node).__name__.lstrip("_")


def _below_stamping(node: Any) -> Any | None:
    """The user's pipeline when `node` is Stoker's stamping stage, else None."""
    inputs = _inputs(node)
    if _name(node) != "MapDataset" or len(inputs) != 1 or _name(inputs[0]) != "ZipDataset":
        return None
    zipped = _inputs(inputs[0])
    if len(zipped) != 2:
        return None
    requests = zipped[0]
    while _name(requests) == "MapDataset" and _inputs(requests):
        requests = _inputs(requests)[0]
    return zipped[1] if _name(requests) == "RangeDataset" else None


def describe_pipeline(dataset: Any, max_nodes: int = 1000) -> dict[str, Any]:
    """`{"prefetch": bool, "prefetch_last": bool, "parallel_map": bool, "serial_map": bool,
    "cache": bool, ..., "stages": [outermost first]}` for a `tf.data.Dataset`, or `{}` when
    it cannot tell. `prefetch_last`: the outermost stage (past options) is a prefetch."""
    try:
        stages: list[str] = []
        found = {kind: False for kind in _KINDS.values()}
        pending, seen = [dataset], 0
        while pending and seen < max_nodes:
            node = pending.pop(0)
            seen += 1
            user = _below_stamping(node)
            if user is not None:
                pending.append(user)
                continue
            name = _name(node)
            stages.append(name)
            kind = _KINDS.get(name)
            if kind is not None:
                found[kind] = True
            pending.extend(_inputs(node))
        outer = [s for s in stages if s not in ("OptionsDataset", "AssertCardinalityDataset")]
        last = bool(outer) and outer[0] == "PrefetchDataset"
        return {**found, "prefetch_last": last, "stages": stages[:50]}
    except Exception:
        return {}
