"""The user's `tf.data` pipeline as a tree, read from its Python dataset objects.

`read_dataset(dataset)` walks from the dataset handed to `fit` (or iterated) to its sources
without making an element. Each node holds its op family (the name tf.data's autotuning model
gives the node it becomes, without version suffix: "Map", "ParallelMap", "Batch",
"TensorSlice", ...), the user's functions it calls (name, file and line, whether it calls
Python through `tf.numpy_function` / `tf.py_function`), its inputs in order (a zip has
several), and for a flat_map or interleave the dataset its function returns, read from that
function's graph. tf.data's own functions (a reader's `read_one_file`, `from_generator`'s
`flat_map_fn`) are not the user's: a generator names the user's generator instead.

`pipeline_rewrites.align` matches this tree with the nodes tf.data actually runs.
"""

import functools
import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

MAX_NODES = 200
MAX_FUNCTIONS = 8

# Ops through which a function calls back into Python.
_PYTHON_OPS = frozenset({"PyFunc", "PyFuncStateless", "EagerPyFunc"})
# Reader datasets: the pipeline reads files.
_READERS = frozenset({"TFRecord", "TextLine", "FixedLengthRecord", "MatchingFiles"})
# Datasets whose inputs are tensors, not datasets.
_SOURCES = frozenset(
    {
        "TensorSlice",
        "FromTensor",
        "Range",
        "TFRecord",
        "TextLine",
        "FixedLengthRecord",
        "Generator",
        "Random",
        "SparseTensorSlice",
    }
)
# Python dataset classes that make no node of their own.
_TRANSPARENT = frozenset({"Options", "Restructured"})
# Families whose function returns a dataset per input element (its `inner`).
INTERLEAVES = frozenset({"FlatMap", "Interleave", "ParallelInterleave"})
# Function-holding attributes whose function returns a dataset.
_DATASET_FUNCTIONS = ("_map_func", "_reduce_func")


@dataclass(frozen=True)
class UserFunction:
    """A function the user wrote, as one dataset runs it."""

    name: str
    file: str | None = None
    line: int | None = None
    calls_python: bool = False
    stateful: bool = False  # tf.data runs a map of it in parallel only when it is not

    def wire(self) -> dict[str, Any]:
        return {
            "name": self.name[:100],
            "file": None if self.file is None else self.file[-200:],
            "line": self.line,
            "calls_python": self.calls_python,
        }


@dataclass(eq=False)
class DatasetNode:
    """One dataset of the user's pipeline."""

    family: str
    functions: tuple[UserFunction, ...] = ()
    inputs: list["DatasetNode"] = field(default_factory=list)
    inner: "DatasetNode | None" = None  # what a flat_map's or interleave's function returns
    noop: bool = False  # take(-1), skip(0), repeat(1), prefetch(0), an identity map: removed
    opaque: bool = False  # made from a variant (choose_from_datasets' selector): unknown below
    reads_files: bool = False

    def walk(self) -> Iterator["DatasetNode"]:
        """This node, its inputs' subtrees and its inner dataset's, depth first."""
        yield self
        for child in self.inputs:
            yield from child.walk()
        if self.inner is not None:
            yield from self.inner.walk()

    def size(self) -> int:
        """Nodes in this subtree along the inputs (the inner dataset not counted)."""
        return 1 + sum(child.size() for child in self.inputs)

    @property
    def stateful(self) -> bool:
        return any(function.stateful for function in self.functions)


@functools.lru_cache(maxsize=1024)  # a read names the same few ops every time
def family(name: str) -> str:
    """`"_ParallelMapDataset"`, `"ParallelMapDatasetV2"`, `"ParallelMapV2"` -> `"ParallelMap"`;
    the model's iterator names too: `"ForeverRepeat"` -> `"Repeat"`, `"MemoryCacheImpl"` ->
    `"Cache"`, `"LegacyParallelInterleaveV2"` -> `"ParallelInterleave"`."""
    base = re.sub(r"(Dataset)?(V\d+)?$", "", name.lstrip("_"))
    base = re.sub(r"Dataset(V\d+)?$", "", base)
    for prefix in ("Experimental", "Legacy", "Finite", "Forever", "Empty", "Memory", "File"):
        rest = base[len(prefix) :]
        if base.startswith(prefix) and rest[:1].isupper():
            base = rest
    for suffix in ("Impl", "Writer", "Reader"):
        if base.endswith(suffix) and base != suffix and base != "FixedLengthRecord":
            base = base[: -len(suffix)]
    return _ALIASES.get(base, base)


_ALIASES = {"Tensor": "FromTensor"}


def python_kind(dataset: Any) -> str:
    """A dataset's Python class without "_", "Dataset", "V2": `"ParallelMap"`, `"TFRecord"`."""
    return type(dataset).__name__.lstrip("_").removesuffix("V2").removesuffix("Dataset")


def user_datasets(dataset: Any, max_nodes: int = MAX_NODES) -> list[Any]:
    """The dataset objects on the user's input spine, from `dataset` to the source (consumer
    first), as `stoker tune` edits them: the walk follows each dataset's only input and ends
    at a source, a file reader (its input is its file names) or a dataset of several inputs
    (a zip), which is then the last one."""
    nodes: list[Any] = []
    node, seen = dataset, 0
    while node is not None and seen < max_nodes:
        seen += 1
        nodes.append(node)
        inputs = _inputs(node)
        if family(python_kind(node)) in _READERS or len(inputs) != 1:
            break
        node = inputs[0]
    return nodes


def read_dataset(dataset: Any) -> DatasetNode | None:
    """The tree of `dataset` (a `tf.data.Dataset`), or None when it is not one."""
    try:
        return _Reader().node(dataset)
    except Exception:
        return None


class _Reader:
    def __init__(self) -> None:
        self.seen = 0

    def node(self, dataset: Any) -> DatasetNode:
        self.seen += 1
        if self.seen > MAX_NODES:
            return DatasetNode("Unknown", opaque=True)
        inside = _same_dataset_inside(dataset)
        if inside is not None:
            return self.node(inside)  # TFRecordDataset's reader, ragged_batch's map
        name = python_kind(dataset)
        if name in _TRANSPARENT:
            inputs = _inputs(dataset)
            if len(inputs) == 1:
                return self.node(inputs[0])
        if name == "Variant":
            return DatasetNode("Unknown", opaque=True)
        node = DatasetNode(family(name))
        wrappers = _function_wrappers(dataset)
        functions, generator = [], None
        for wrapper in wrappers:
            function, is_generator = _user_function(wrapper)
            if is_generator:
                generator = function
            elif function is not None:
                functions.append(function)
        node.functions = tuple(functions[:MAX_FUNCTIONS])
        node.noop = _is_noop(dataset, node.family, wrappers)
        node.inputs = [self.node(child) for child in _inputs(dataset)]
        for attribute in _DATASET_FUNCTIONS:
            wrapper = getattr(dataset, attribute, None)
            if wrapper is not None and node.family in (*INTERLEAVES, "GroupByWindow"):
                node.inner = _returned_dataset(wrapper)
                break
        if generator is not None and node.inner is not None:
            node.inner.functions = (generator,)  # from_generator: the generator is the user's
        node.reads_files = node.family in _READERS or any(
            n.reads_files for n in ([node.inner] if node.inner else [])
        )
        return node


def _same_dataset_inside(dataset: Any) -> Any | None:
    """The dataset object a wrapper class holds whose variant it hands out as its own."""
    variant = getattr(dataset, "_variant_tensor_attr", None)
    if variant is None:
        return None
    try:
        values = list(vars(dataset).values())
    except TypeError:
        return None
    for value in values:
        if value is not dataset and getattr(value, "_variant_tensor_attr", None) is variant:
            return value
    return None


def _inputs(dataset: Any) -> list[Any]:
    try:
        inputs = dataset._inputs()
    except Exception:
        inputs = None
    if inputs is None:
        single = getattr(dataset, "_input_dataset", None)
        return [] if single is None else [single]
    return [i for i in inputs if hasattr(i, "_variant_tensor")]


def _function_wrappers(dataset: Any) -> list[Any]:
    """The dataset's traced functions (`StructuredFunctionWrapper`s), in attribute order."""
    try:
        values = list(vars(dataset).values())
    except TypeError:
        return []
    return [v for v in values if type(v).__name__ == "StructuredFunctionWrapper"]


def _is_tf_datas(func: Any) -> bool:
    """A function tf.data made (a reader's `read_one_file`, from_generator's `flat_map_fn`,
    group_by_window's wrapper of the user's key function); a tf.data class the user passed
    (`interleave(tf.data.TFRecordDataset)`) is the user's."""
    module = str(getattr(func, "__module__", "") or "")
    return module.startswith("tensorflow.") and not isinstance(func, type)


def _user_callable_behind(func: Any) -> tuple[Any, bool] | None:
    """The user's callable a function tf.data made calls, from its closures (and theirs):
    (the callable, whether it is from_generator's generator), or None."""
    seen: set[int] = set()
    pending = [func]
    while pending and len(seen) < 20:
        current = pending.pop(0)
        if id(current) in seen:
            continue
        seen.add(id(current))
        for cell in getattr(current, "__closure__", None) or ():
            try:
                value = cell.cell_contents
            except ValueError:
                continue
            generator = getattr(value, "_generator", None)
            if callable(generator):
                return generator, True
            if callable(value) and not isinstance(value, type):
                if not _is_tf_datas(value):
                    return value, False
                pending.append(value)
    return None


def _callable_name(func: Any) -> tuple[str, Any]:
    """(name, the Python function holding the code) of a callable, a partial or an object."""
    while hasattr(func, "func") and not hasattr(func, "__code__"):  # functools.partial
        func = func.func
    name = getattr(func, "__name__", None)
    if name is None:
        name = type(func).__name__
        func = type(func).__call__ if callable(func) else func
    func = getattr(func, "__wrapped__", func)
    return str(name).removesuffix("V2"), func


def _user_function(wrapper: Any) -> tuple[UserFunction | None, bool]:
    """The user's function a dataset's traced function runs (behind tf.data's own wrapper,
    if it has one), and whether it is from_generator's generator."""
    func = getattr(wrapper, "_func", None)
    if func is None:
        return None, False
    is_generator = False
    if _is_tf_datas(func):
        behind = _user_callable_behind(func)
        if behind is None:
            return None, False
        func, is_generator = behind
    name, code_holder = _callable_name(func)
    code = getattr(code_holder, "__code__", None)
    ops = _ops_in(getattr(wrapper, "function", None))
    function = UserFunction(
        name=name,
        file=getattr(code, "co_filename", None),
        line=getattr(code, "co_firstlineno", None),
        calls_python=is_generator or bool(ops & _PYTHON_OPS),
        stateful=is_generator or _any_stateful(ops),
    )
    return function, is_generator


def _ops_in(concrete: Any) -> set[str]:
    """The op types a traced function (and every function it calls) runs."""
    try:
        graph_def = concrete.graph.as_graph_def()
    except Exception:
        return set()
    ops = {node.op for node in graph_def.node}
    for function in graph_def.library.function:
        ops.update(node.op for node in function.node_def)
    return ops


def _any_stateful(ops: set[str]) -> bool:
    from tensorflow.python.framework import op_def_registry

    for op in ops:
        definition = op_def_registry.get(op)
        if definition is not None and definition.is_stateful:
            return True
    return False


def _scalar(value: Any) -> int | None:
    try:
        return int(value)
    except Exception:
        return None


def _is_noop(dataset: Any, node_family: str, wrappers: list[Any]) -> bool:
    """What tf.data's noop_elimination removes: take(-1), skip(0), repeat(1), prefetch(0),
    shard(1), and a map whose function returns its arguments."""
    if node_family == "Take":
        return _scalar(getattr(dataset, "_count", None)) == -1
    if node_family == "Skip":
        return _scalar(getattr(dataset, "_count", None)) == 0
    if node_family == "Repeat":
        return _scalar(getattr(dataset, "_count", None)) == 1
    if node_family == "Prefetch":
        return _scalar(getattr(dataset, "_buffer_size", None)) == 0
    if node_family == "Shard":
        return _scalar(getattr(dataset, "_num_shards", None)) == 1
    if node_family in ("Map", "ParallelMap") and wrappers:
        return _is_identity(getattr(wrappers[0], "function", None))
    return False


def _is_identity(concrete: Any) -> bool:
    try:
        outputs = list(concrete.outputs)
        inputs = list(concrete.inputs)
    except Exception:
        return False
    if not outputs:
        return False
    for output in outputs:
        op = output.op
        while op.type == "Identity" and op.inputs:
            op = op.inputs[0].op
        if op.type != "Placeholder" or not any(op.outputs[0] is arg for arg in inputs):
            return False
    return True


# `__inference_Dataset_map_slow_decode_42` -> "slow_decode": what `tf.data` names the functions
# it traces (the transformation, then the Python name, then a number).
_TRACED = re.compile(
    r"^__inference_(?:tf_data_experimental_|Dataset_)?"
    r"(?:map_and_batch|flat_map|interleave|parallel_interleave|filter|map|scan|take_while|"
    r"group_by_window|reduce)_(?P<name>.+)_\d+$"
)
# tf.data's own functions, as traced inside another function (no Python object to ask).
_TF_DATAS_OWN = frozenset({"read_one_file", "flat_map_fn", "classabc.ABCMeta"})


def traced_name(function_name: str) -> str | None:
    """The Python name in a function tf.data traced ("<lambda>" for a lambda), or None for
    tf.data's own and for what is not a traced dataset function."""
    match = _TRACED.match(function_name)
    if match is None or match.group("name") in _TF_DATAS_OWN:
        return None
    name = match.group("name")
    return "<lambda>" if name == "lambda" else name


def _returned_dataset(wrapper: Any) -> DatasetNode | None:
    """The dataset a flat_map's or interleave's function returns, from the function's
    definition (and, for one made inside it, from the definitions it calls)."""
    try:
        concrete = wrapper.function
        library = {f.signature.name: f for f in concrete.graph.as_graph_def().library.function}
        return _returned_by(concrete.function_def, library, 0)
    except Exception:
        return None


def _returned_by(definition: Any, library: dict[str, Any], depth: int) -> DatasetNode | None:
    nodes = {node.name: node for node in definition.node_def}
    if not definition.signature.output_arg or depth > 4:
        return None
    returned = definition.ret.get(definition.signature.output_arg[0].name, "")
    return _defined_node(returned, nodes, library, depth, [0], definition)


def _defined_node(
    reference: str,
    nodes: dict[str, Any],
    library: dict[str, Any],
    depth: int,
    seen: list[int],
    definition: Any,
) -> DatasetNode | None:
    """The dataset a function body's "node:output:0" reference names, as a tree."""
    node = nodes.get(reference.split(":")[0].lstrip("^"))
    seen[0] += 1
    if node is None or seen[0] > MAX_NODES:
        return None
    if node.op == "Identity":
        if not node.input:
            return None
        return _defined_node(node.input[0], nodes, library, depth, seen, definition)
    if "Dataset" not in node.op:
        return None
    tree = DatasetNode(family(node.op))
    functions = []
    for key in sorted(node.attr):
        attr = node.attr[key]
        if not attr.HasField("func"):
            continue
        body = library.get(attr.func.name)
        if tree.family in INTERLEAVES and body is not None and tree.inner is None:
            tree.inner = _returned_by(body, library, depth + 1)
        name = traced_name(attr.func.name)
        if name is not None:
            ops = set() if body is None else {n.op for n in body.node_def}
            functions.append(
                UserFunction(
                    name=name, calls_python=bool(ops & _PYTHON_OPS), stateful=_any_stateful(ops)
                )
            )
    tree.functions = tuple(functions[:MAX_FUNCTIONS])
    arguments = {arg.name for arg in definition.signature.input_arg}
    for reference in node.input:
        if reference.startswith("^"):
            continue
        if reference in arguments and not tree.inputs and tree.family not in _SOURCES:
            # The function's argument (a window, an element's dataset): whatever it is
            tree.inputs.append(DatasetNode("Argument", opaque=True))
            continue
        source = nodes.get(reference.split(":")[0])
        if source is not None and ("Dataset" in source.op or source.op == "Identity"):
            child = _defined_node(reference, nodes, library, depth, seen, definition)
            if child is not None:
                tree.inputs.append(child)
    tree.reads_files = tree.family in _READERS or bool(tree.inner and tree.inner.reads_files)
    return tree
