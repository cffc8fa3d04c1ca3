"""What a `tf.data` pipeline does, for the diagnosis's evidence and advice.

`describe_pipeline(ds)` walks the dataset's graph of input datasets (no element is
produced) and reports whether it prefetches, maps in parallel, caches and interleaves, and
whether any map runs serially. Best effort: an unknown structure yields an empty dict.
"""

from typing import Any

_KINDS = {
    "PrefetchDataset": "prefetch",
    "ParallelMapDataset": "parallel_map",
    "MapDataset": "serial_map",
    "CacheDataset": "cache",
    "ParallelInterleaveDataset": "parallel_interleave",
    "InterleaveDataset": "interleave",
    "ParallelBatchDataset": "parallel_batch",
}


def describe_pipeline(dataset: Any, max_nodes: int = 1000) -> dict[str, Any]:
    """`{"prefetch": bool, "parallel_map": bool, "serial_map": bool, "cache": bool, ...,
    "stages": [outermost first]}` for a `tf.data.Dataset`, or `{}` when it cannot tell."""
    try:
        stages: list[str] = []
        found = {kind: False for kind in _KINDS.values()}
        pending, seen = [dataset], 0
        while pending and seen < max_nodes:
            node = pending.pop(0)
            seen += 1
            name = type(node).__name__.lstrip("_")
            stages.append(name)
            kind = _KINDS.get(name)
            if kind is not None:
                found[kind] = True
            inputs = getattr(node, "_inputs", None)
            pending.extend(inputs() if callable(inputs) else [])
        return {**found, "stages": stages[:50]}
    except Exception:
        return {}
