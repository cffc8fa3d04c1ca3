"""More calls in flight than cores, for a map whose function waits.

AUTOTUNE gives a map at most as many calls at once as tf.data has threads: the cores, unless
`options.threading.private_threadpool_size` says more. That suits a function that computes,
and leaves one that waits (on storage, the network, a service) with the cores idle and the
steps starved. The unchanged run tells them apart: while its steps waited for input, the
process used (CPU time over wall time) about a core per call of a function that computes,
and far less for one that waits. For a map whose function waits, `stoker tune` also tries a
fixed `num_parallel_calls` of `PER_CORE` times the cores (at most `MAX_CALLS`), its calls
run on tf.data's unbounded thread pool meant for I/O (`use_unbounded_threadpool=True`; on a
TensorFlow without it, a private thread pool of as many threads), in order as the parallel
change is. A function that computes is not tried: more calls than cores compete for them.

On a machine loaded by others a function that computes gets less of a core and may look as
if it waited: it is tried then, and the table shows what it measured. One bound by the GIL
runs one call at a time however many are in flight: when it waits holding the GIL it is
tried, and the table says it gains nothing, and why.
"""

import inspect
from typing import Any

from trainer_agent.figures import share_text
from trainer_agent.input_bound import highly_input_bound
from trainer_agent.tune.chain import AUTOTUNE, Link, schedulable_cpus

PREFIX = "inflight"
PER_CORE = 4
MAX_CALLS = 64
# A function waits when the process used under this share of a core per call it ran at once.
WAITS_BELOW = 0.5


def calls_in_flight(cpus: int | None = None) -> int:
    """The `num_parallel_calls` tried: `PER_CORE` times the cores, at most `MAX_CALLS`."""
    return min(MAX_CALLS, PER_CORE * (cpus or schedulable_cpus()))


def has_unbounded_threadpool() -> bool:
    """Whether this TensorFlow's `Dataset.map` takes `use_unbounded_threadpool`."""
    import tensorflow as tf

    return "use_unbounded_threadpool" in inspect.signature(tf.data.Dataset.map).parameters


def autotune_ceiling(options: Any, cpus: int) -> int:
    """The most calls AUTOTUNE runs at once: the pipeline's thread pool, the cores by default."""
    threads = getattr(getattr(options, "threading", None), "private_threadpool_size", None)
    return int(threads) if threads and threads > 0 else cpus


def calls_at_once(link: Link, options: Any, cpus: int, *, parallelized: bool) -> int:
    """How many calls the map runs at once as written (`parallelized`: tf.data's own rewrite
    makes it AUTOTUNE)."""
    if link.kind == "Map":
        return autotune_ceiling(options, cpus) if parallelized else 1
    if link.parallelism is None or link.parallelism == AUTOTUNE:
        return autotune_ceiling(options, cpus)
    return int(link.parallelism)


def why_not(link: Link, options: Any, cpus: int, at_once: int) -> str | None:
    """Why more calls in flight would change nothing, or None: the map runs as many already,
    or AUTOTUNE (the parallel change, or tf.data's own) reaches them in its thread pool."""
    calls = calls_in_flight(cpus)
    ceiling = autotune_ceiling(options, cpus)
    if at_once >= calls:
        return f"{link.label} runs {at_once} calls at once already ({calls} would be tried)"
    if ceiling >= calls:
        return (
            f"num_parallel_calls=AUTOTUNE runs up to {ceiling} calls of {link.function_name} at "
            f"once here already (options.threading.private_threadpool_size = {ceiling})"
        )
    return None


def keywords(serial: bool, calls: int, unbounded: bool) -> dict[str, str]:
    """The map's keywords for the edit."""
    written = {"num_parallel_calls": str(calls)}
    if serial:
        written["deterministic"] = "True"
    if unbounded:
        written["use_unbounded_threadpool"] = "True"
    return written


def title(name: str, serial: bool, calls: int, cpus: int, unbounded: bool) -> str:
    order = ", deterministic=True" if serial else ""
    threads = (
        ", use_unbounded_threadpool=True"
        if unbounded
        else f", with options.threading.private_threadpool_size = {calls}"
    )
    return (
        f"num_parallel_calls={calls} ({calls // cpus}x the {cpus} cores){order}{threads} "
        f"on map {name}"
    )


def decide(
    change: dict[str, Any], wait_share: float | None, cpu_cores: float | None
) -> dict[str, Any]:
    """The pending change decided on the unchanged run: tried when its steps starved while
    the process left the cores idle (the function waits), with why; else why not."""
    decided = {**change, "pending": False}
    if change.get("not_tried"):
        return decided  # not tried whatever the run shows (listed so, or ranked out)
    name = change.get("function") or "the map's function"
    at_once = max(1, int(change.get("threads") or 1))
    if wait_share is None or not highly_input_bound(wait_share):
        waited = "were not measured" if wait_share is None else f"took {share_text(wait_share)}"
        decided["not_tried"] = (
            f"the steps' waits for input {waited} of their time: more calls in flight cannot "
            "help steps the input does not starve"
        )
        return decided
    if cpu_cores is None:
        decided["not_tried"] = "the unchanged run measured no CPU time to tell whether it waits"
        return decided
    calls = "call" if at_once == 1 else "calls"
    used = (
        f"while the steps waited for input {share_text(wait_share)} of their time, the process "
        f"used {cpu_cores:.2g} cores (CPU time over wall time) for {at_once} {calls} of {name} "
        "at once, where a function that computes keeps a core per call busy"
    )
    if cpu_cores >= WAITS_BELOW * at_once:
        decided["not_tried"] = (
            f"{name} computes: {used}. More calls in flight than cores would compete for them"
        )
        return decided
    decided["why"] = f"{name} waits: {used}. So: more calls in flight than cores"
    return decided


def apply(link: Link, upstream: Any, calls: int, deterministic: bool | None) -> Any:
    """The map made again on `upstream` with `calls` calls in flight, on threads that may
    wait (the unbounded pool; without it, the caller widens the thread pool: `threadpool`)."""
    from trainer_agent.tune.rebuild import replayed

    unbounded = {"use_unbounded_threadpool": True} if has_unbounded_threadpool() else {}
    return upstream.map(
        replayed(link.wrapper),
        num_parallel_calls=calls,
        deterministic=deterministic,
        **unbounded,
    )


def threadpool(dataset: Any, calls: int) -> Any:
    """`dataset` with a thread pool of at least `calls` threads, where tf.data has no
    unbounded pool for a map (else `dataset` as it is)."""
    import tensorflow as tf

    if has_unbounded_threadpool():
        return dataset
    if autotune_ceiling(dataset.options(), 0) >= calls:
        return dataset
    options = tf.data.Options()
    options.threading.private_threadpool_size = calls
    return dataset.with_options(options)
