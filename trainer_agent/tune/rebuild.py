"""Rebuild the user's pipeline from its own datasets and functions, one link changed.

A change replaces one link (a map made parallel) or adds one after it (a cache) and
rebuilds every later link on the new one with the same arguments, through tf.data's public
methods. Each link's function is not traced again from Python: the rebuilt link calls the
function tf.data already traced for the user's dataset (`replayed`), so it runs the very same
graph, random ops with the same seeds included. A link of a kind this module cannot rebuild
raises `CannotRebuild`, which the table shows as the reason the change was not tried.
"""

from collections.abc import Callable
from typing import Any

from trainer_agent.tune.chain import Link


class CannotRebuild(Exception):
    """The pipeline cannot be rebuilt with the change; the message says why."""


def replayed(wrapper: Any) -> Callable[..., Any]:
    """A Python function for `Dataset.map` (filter, interleave, ...) that calls the function
    tf.data traced for the user's dataset: same graph, same captured state."""
    from tensorflow.python.data.util import structure
    from tensorflow.python.util import nest

    spec = wrapper._input_structure
    output = wrapper._output_structure
    traced = wrapper.function

    def replay(*args: Any) -> Any:
        # tf.data unpacks a tuple element into positional arguments, anything else is one.
        element = args if type(spec) is tuple else args[0]
        flat = traced(*structure.to_tensor_list(spec, element))
        return structure.from_compatible_tensor_list(output, nest.flatten(flat))

    name = getattr(wrapper._func, "__name__", None)
    if isinstance(name, str) and name.isidentifier():
        replay.__name__ = name  # tf.data names the traced function after it
    return replay


def _deterministic(link: Link) -> bool | None:
    return {"true": True, "false": False}.get(link.deterministic)


def _int(tensor: Any) -> int:
    return int(tensor)


def _name(link: Link) -> dict[str, Any]:
    name = getattr(link.node, "_name", None)
    return {"name": name} if name else {}


def _shuffle(link: Link, upstream: Any) -> Any:
    """The shuffle with the seeds the user's one drew: its order, not a new one."""
    node = link.node
    seeds = (_int(node._seed), _int(node._seed2))
    seed = None if seeds == (0, 0) else seeds[1]
    rebuilt = upstream.shuffle(
        _int(node._buffer_size),
        seed=seed,
        reshuffle_each_iteration=node._reshuffle_each_iteration,
        **_name(link),
    )
    if (_int(rebuilt._seed), _int(rebuilt._seed2)) != seeds:
        raise CannotRebuild(
            "its shuffle's seeds came from the global seed's sequence, which a rebuilt "
            "pipeline cannot draw again (pass seed= to shuffle)"
        )
    return rebuilt


def _parallel(link: Link) -> dict[str, Any]:
    """A parallel link's `num_parallel_calls` and `deterministic`; nothing for a serial one."""
    if not link.kind.startswith("Parallel"):
        return {}
    return {"num_parallel_calls": link.parallelism, "deterministic": _deterministic(link)}


def _map(link: Link, upstream: Any) -> Any:
    return upstream.map(replayed(link.wrapper), **_parallel(link), **_name(link))


def _interleave(link: Link, upstream: Any) -> Any:
    node = link.node
    return upstream.interleave(
        replayed(link.wrapper),
        cycle_length=_int(node._cycle_length),
        block_length=_int(node._block_length),
        **_parallel(link),
        **_name(link),
    )


def _batch(link: Link, upstream: Any) -> Any:
    node = link.node
    return upstream.batch(
        _int(node._batch_size),
        drop_remainder=bool(node._drop_remainder),
        **_parallel(link),
        **_name(link),
    )


def _padded_batch(link: Link, upstream: Any) -> Any:
    node = link.node
    return upstream.padded_batch(
        _int(node._batch_size),
        padded_shapes=node._padded_shapes,
        padding_values=node._padding_values,
        drop_remainder=bool(node._drop_remainder),
        **_name(link),
    )


def _assert_cardinality(link: Link, upstream: Any) -> Any:
    import tensorflow as tf

    expected = _int(link.node._expected_cardinality)
    return upstream.apply(tf.data.experimental.assert_cardinality(expected))


_REBUILD: dict[str, Callable[[Link, Any], Any]] = {
    "Map": _map,
    "ParallelMap": _map,
    "Interleave": _interleave,
    "ParallelInterleave": _interleave,
    "FlatMap": lambda link, up: up.flat_map(replayed(link.wrapper), **_name(link)),
    "Filter": lambda link, up: up.filter(replayed(link.wrapper), **_name(link)),
    "Batch": _batch,
    "ParallelBatch": _batch,
    "PaddedBatch": _padded_batch,
    "Unbatch": lambda link, up: up.unbatch(**_name(link)),
    "Shuffle": _shuffle,
    "Prefetch": lambda link, up: up.prefetch(_int(link.node._buffer_size), **_name(link)),
    "Repeat": lambda link, up: up.repeat(_int(link.node._count), **_name(link)),
    "Take": lambda link, up: up.take(_int(link.node._count), **_name(link)),
    "Skip": lambda link, up: up.skip(_int(link.node._count), **_name(link)),
    "Shard": lambda link, up: up.shard(_int(link.node._num_shards), _int(link.node._index)),
    "IgnoreErrors": lambda link, up: up.ignore_errors(),
    "Options": lambda link, up: up.with_options(link.node._options_attr),
    "AssertCardinality": _assert_cardinality,
}
# Caches are rebuilt by `rebuild_link` (a cache file is the trial's own, see there).
REBUILDABLE = frozenset({*_REBUILD, "Cache"})


def rebuild_link(link: Link, upstream: Any, cache_file: Callable[[int], str] | None) -> Any:
    """`link` made again on `upstream` with its own arguments. A cache to a file writes to
    `cache_file(link.index)` instead, so that no trial reads a cache another one filled."""
    if link.kind == "Cache":
        filename = link.node._filename.numpy().decode()
        if filename and cache_file is not None:
            filename = cache_file(link.index)
        return upstream.cache(filename, **_name(link))
    rebuild = _REBUILD.get(link.kind)
    if rebuild is None:
        raise CannotRebuild(f"Stoker cannot rebuild a {link.kind} stage (link {link.index})")
    if link.wrapper is None and link.kind in ("Map", "ParallelMap", "Interleave", "Filter"):
        raise CannotRebuild(f"the {link.kind} stage at link {link.index} has no function")
    try:
        return rebuild(link, upstream)
    except CannotRebuild:
        raise
    except Exception as error:
        raise CannotRebuild(
            f"rebuilding {link.label} (link {link.index}) failed: {type(error).__name__}: {error}"
        ) from error


def rebuilt_after(
    chain: list[Link],
    index: int,
    replacement: Any,
    cache_file: Callable[[int], str] | None = None,
) -> Any:
    """The pipeline with `replacement` in place of link `index`'s output: every later link
    rebuilt on it, in order."""
    current = replacement
    for link in chain[index + 1 :]:
        current = rebuild_link(link, current, cache_file)
    return current


def unrebuildable_after(chain: list[Link], index: int) -> str | None:
    """Why the links after `index` cannot be rebuilt, or None when they can."""
    for link in chain[index + 1 :]:
        if link.kind not in REBUILDABLE:
            return f"Stoker cannot rebuild the {link.label} stage after it"
    return None


def file_caches(chain: list[Link]) -> list[Link]:
    """The links that cache to a file (`cache("path")`)."""
    found = []
    for link in chain:
        if link.kind != "Cache":
            continue
        try:
            filename = link.node._filename.numpy().decode()
        except Exception:
            continue
        if filename:
            found.append(link)
    return found
