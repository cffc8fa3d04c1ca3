"""The user's `tf.data` pipeline as a chain of links, source first, and what each link does.

The chain is the input spine of the tree the pipeline view reads
(trainer_agent/capture/dataset_graph.py): every dataset on it. A link knows its dataset
object, its kind, the user's function it runs (the Python function and tf.data's traced
wrapper of it), its parallelism and determinism, and what the traced function does that
matters to a rewrite: whether it draws random numbers, runs Python (`numpy_function`,
`py_function`), or holds state tf.data will not parallelize by itself.
"""

import os
from dataclasses import dataclass, field
from typing import Any

from trainer_agent.capture.dataset_graph import python_kind, user_datasets

MAX_LINKS = 200
AUTOTUNE = -1

# Ops that draw from a random state: the same element differs from one pass to the next.
# Stateless random ops (`tf.random.stateless_*`) give the same values for the same seed.
_RANDOM_OPS = frozenset(
    {
        "TruncatedNormal", "Multinomial", "ParameterizedTruncatedNormal", "RngReadAndSkip",
        "RngSkip", "NonDeterministicInts", "SampleDistortedBoundingBox",
        "SampleDistortedBoundingBoxV2", "UniformCandidateSampler",
        "LogUniformCandidateSampler", "AllCandidateSampler", "FixedUnigramCandidateSampler",
        "LearnedUnigramCandidateSampler", "ThreadUnsafeUnigramCandidateSampler",
        "AnonymousSeedGenerator", "AnonymousRandomSeedGenerator", "DummySeedGenerator",
    }
)  # fmt: skip
# Python called from the graph: Stoker cannot tell what it does. `PyFuncStateless` is a
# `numpy_function(..., stateful=False)`: its author declared it free of state.
_PYTHON_OPS = frozenset({"PyFunc", "EagerPyFunc"})
_DECLARED_STATELESS_PYTHON = "PyFuncStateless"


def is_random_op(op_type: str) -> bool:
    if op_type.startswith("Stateless"):
        return False
    return op_type in _RANDOM_OPS or "Random" in op_type or op_type.startswith("Stateful")


@dataclass
class FunctionFacts:
    """What the traced function of a link does (all ops, nested functions included)."""

    random_ops: list[str] = field(default_factory=list)
    python_ops: list[str] = field(default_factory=list)
    # Ops tf.data counts as stateful: a map of such a function is not parallelized by
    # tf.data's own `map_parallelization` rewrite (stateless maps are).
    stateful: bool = False


@dataclass
class Link:
    """One dataset of the user's pipeline."""

    index: int  # from the source (0)
    node: Any  # the tf.data dataset
    kind: str  # the dataset class without "_", "Dataset", "V2": Map, ParallelMap, Batch, ...
    function: Any = None  # the user's Python function, for the links that run one
    wrapper: Any = None  # tf.data's traced wrapper of it (StructuredFunctionWrapper)
    parallelism: int | None = None  # num_parallel_calls (AUTOTUNE = -1); None: serial
    deterministic: str = "default"  # "default", "true" or "false"
    facts: FunctionFacts = field(default_factory=FunctionFacts)

    @property
    def function_name(self) -> str:
        return function_name(self.function)

    @property
    def label(self) -> str:
        """`map slow_decode`, `batch`: how the table names the link."""
        kind = METHODS.get(self.kind, self.kind.lower())
        name = self.function_name
        return f"{kind} {name}" if name else kind


# The Dataset method that makes a link of each kind (how the table names a link, and how
# the line to edit is found in the source).
METHODS = {
    "Map": "map",
    "ParallelMap": "map",
    "Interleave": "interleave",
    "ParallelInterleave": "interleave",
    "FlatMap": "flat_map",
    "Filter": "filter",
    "Batch": "batch",
    "ParallelBatch": "batch",
    "PaddedBatch": "padded_batch",
    "Prefetch": "prefetch",
    "Shuffle": "shuffle",
    "Cache": "cache",
    "Repeat": "repeat",
    "Take": "take",
    "Skip": "skip",
    "Unbatch": "unbatch",
}
# Wrappers that make no tf.data node of their own.
_TRANSPARENT = ("Options",)
_FUNCTION_ATTRIBUTES = ("_map_func", "_predicate")


def function_name(function: Any) -> str:
    """The name a user reads for `function` (a `functools.partial` by the function inside)."""
    while hasattr(function, "func") and not hasattr(function, "__code__"):
        function = function.func
    return str(getattr(function, "__name__", "") or "")[:100]


def links(dataset: Any) -> list["Link"]:
    """The user's pipeline from the source to `dataset`, source first: the datasets the
    pipeline view walks (`user_datasets`), the first one a source, a file reader or a dataset
    of several inputs (zip, concatenate, sample_from_datasets)."""
    chain = [_link(node) for node in reversed(user_datasets(dataset, MAX_LINKS))]
    for index, link in enumerate(chain):
        link.index = index
    return chain


def _link(node: Any) -> Link:
    kind = python_kind(node)
    wrapper = next(
        (getattr(node, a) for a in _FUNCTION_ATTRIBUTES if getattr(node, a, None) is not None),
        None,
    )
    function = getattr(wrapper, "_func", None)
    parallelism = _int_or_none(getattr(node, "_num_parallel_calls", None))
    return Link(
        index=0,
        node=node,
        kind=kind,
        function=function,
        wrapper=wrapper,
        parallelism=parallelism,
        deterministic=str(getattr(node, "_deterministic", "default")),
        facts=function_facts(wrapper) if wrapper is not None else FunctionFacts(),
    )


def _int_or_none(value: Any) -> int | None:
    if value is None:
        return None
    try:
        return int(value)
    except (TypeError, ValueError):
        return None


def function_facts(wrapper: Any) -> FunctionFacts:
    """The random, Python and stateful ops of a traced tf.data function and the functions it
    calls (`tf.cond`, `tf.while_loop`, nested `tf.function`s)."""
    from tensorflow.python.framework import op_def_registry

    graph_def = wrapper.function.graph.as_graph_def()
    op_types = [node.op for node in graph_def.node]
    for library_function in graph_def.library.function:
        op_types += [node.op for node in library_function.node_def]
    facts = FunctionFacts()
    for op_type in dict.fromkeys(op_types):
        if is_random_op(op_type):
            facts.random_ops.append(op_type)
        if op_type in _PYTHON_OPS:
            facts.python_ops.append(op_type)
        op_def = op_def_registry.get(op_type)
        if op_def is not None and op_def.is_stateful and op_type != _DECLARED_STATELESS_PYTHON:
            facts.stateful = True
    return facts


def calls_python(link: Link) -> bool:
    return bool(link.facts.python_ops)


def ordered(link: Link, options: Any) -> bool:
    """Whether the link hands its elements over in a fixed order: a parallel map or
    interleave with `deterministic=False` (or left to `options.deterministic = False`) may
    not."""
    if link.kind not in ("ParallelMap", "ParallelInterleave", "ParallelBatch"):
        return True
    if link.deterministic == "default":
        return getattr(options, "deterministic", None) is not False
    return link.deterministic == "true"


def element_bytes(dataset: Any) -> int | None:
    """The bytes of one element when every component's shape is static, else None."""
    import tensorflow as tf

    total = 0
    for spec in tf.nest.flatten(dataset.element_spec):
        shape = getattr(spec, "shape", None)
        dtype = getattr(spec, "dtype", None)
        if shape is None or dtype is None or not shape.is_fully_defined():
            return None
        if dtype == tf.string or dtype == tf.variant:
            return None
        count = 1
        for dim in shape.as_list():
            count *= int(dim)
        total += count * dtype.size
    return total


def cardinality(dataset: Any) -> int:
    """tf.data's count of elements: -1 infinite, -2 unknown."""
    try:
        return int(dataset.cardinality())
    except Exception:
        return -2


def schedulable_cpus() -> int:
    """The CPUs this process may run on: what tf.data's AUTOTUNE parallelism is bounded by."""
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


def signature(chain: list[Link]) -> list[str]:
    """The chain's shape, `Map:slow_decode`, to check that a trial's script built the same
    pipeline as the unchanged run's."""
    return [f"{link.kind}:{link.function_name}" for link in chain]


def transparent(link: Link) -> bool:
    return link.kind in _TRANSPARENT
