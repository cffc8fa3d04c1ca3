"""The user's functions named on the stages tf.data runs, checked against tf.data's own
rewritten graph (trainer_agent/capture/pipeline_rewrites.py, dataset_graph.py).

The truth: `FinalizeDataset` applies the pipeline's options and tf.data's rewrites exactly as
an iterator does; `DatasetToGraphV2` serializes the result. Each node of that graph names the
function it runs: the traced function of one user dataset, or a function tf.data fused from
several. Every function here carries a constant of its own, so a fused function's members are
read from its body. What Stoker names comes only from the live iterator's autotuning model
and the user's dataset objects; both must agree, node by node, for random pipelines of every
dataset kind, random rewrite options, wrapped by Stoker's stamping stage or not.
"""

import os
import random
import time
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest
import tensorflow as tf
from tensorflow.core.framework import graph_pb2

from trainer_agent.capture.dataset_graph import family, read_dataset
from trainer_agent.capture.pipeline import describe_pipeline
from trainer_agent.capture.pipeline_model import stages_from_proto
from trainer_agent.capture.pipeline_rewrites import (
    REWRITES,
    ModelNode,
    align,
    applied_rewrites,
    model_tree,
)

pytestmark = pytest.mark.tf_matrix  # also on the oldest TF and tf_keras: make test-tf-matrix

HAS_MODEL = hasattr(tf.data.experimental, "get_model_proto")
needs_model = pytest.mark.skipif(
    not HAS_MODEL, reason="no tf.data.experimental.get_model_proto in this TensorFlow"
)
ROWS = 400
OPTIONS = (
    "map_fusion",
    "filter_fusion",
    "map_and_filter_fusion",
    "map_parallelization",
    "map_and_batch_fusion",
    "noop_elimination",
    "shuffle_and_repeat_fusion",
)


class Namer:
    """Functions, each with a name and a constant of its own."""

    def __init__(self) -> None:
        self.count = 0
        self.by_constant: dict[float, str] = {}

    def _next(self, prefix: str) -> tuple[str, float]:
        self.count += 1
        name, constant = f"{prefix}{self.count}", float(1000 + self.count)
        self.by_constant[constant] = name
        return name, constant

    def map(self, *, python: bool = False, stateful: bool = True) -> Callable[[Any], Any]:
        """`python`: it calls a numpy_function (`stateful`: tf.data neither fuses nor
        parallelizes it then)."""
        name, constant = self._next("fn")
        if python:

            def function(x: Any) -> Any:
                y = tf.numpy_function(lambda v: v, [x], x.dtype, stateful=stateful)
                return tf.ensure_shape(y, x.shape) * constant
        else:

            def function(x: Any) -> Any:
                return x * constant

        function.__name__ = name
        return function

    def predicate(self) -> Callable[[Any], Any]:
        name, constant = self._next("keep")
        self.by_constant[-constant] = name

        def predicate(x: Any) -> Any:
            return tf.reduce_sum(x) > -constant

        predicate.__name__ = name
        return predicate

    def named(self, prefix: str, body: Callable[[Any, float], Any]) -> Callable[..., Any]:
        name, constant = self._next(prefix)

        def function(*args: Any) -> Any:
            return body(args, constant)

        function.__name__ = name
        return function


def _records(directory: str) -> list[str]:
    paths = []
    for index in range(2):
        path = os.path.join(directory, f"part-{index}.tfrecord")
        if not os.path.exists(path):
            with tf.io.TFRecordWriter(path) as writer:
                for row in range(ROWS // 2):
                    writer.write(np.full(4, row, np.float32).tobytes())
        paths.append(path)
    return paths


def _parse(namer: Namer) -> Callable[..., Any]:
    return namer.named(
        "parse", lambda a, c: tf.reshape(tf.io.decode_raw(a[0], tf.float32), [4]) * c
    )


def _source(rng: random.Random, namer: Namer, directory: str) -> tf.data.Dataset:
    rows = np.ones((ROWS, 4), np.float32)
    kind = rng.choice(
        ["slices", "range", "generator", "records", "zip", "tensors", "files", "choose",
         "concatenate", "counter"]
    )  # fmt: skip
    if kind == "slices":
        return tf.data.Dataset.from_tensor_slices(rows)
    if kind == "range":
        fill = namer.named("fill", lambda a, c: tf.fill([4], tf.cast(a[0], tf.float32)) * c)
        return tf.data.Dataset.range(ROWS).map(fill)
    if kind == "counter":
        fill = namer.named("fill", lambda a, c: tf.fill([4], tf.cast(a[0], tf.float32)) * c)
        return tf.data.Dataset.counter().take(ROWS).map(fill)
    if kind == "generator":

        def numbers() -> Any:
            yield from rows

        signature = tf.TensorSpec((4,), tf.float32)
        return tf.data.Dataset.from_generator(numbers, output_signature=signature)
    if kind == "records":
        return tf.data.TFRecordDataset(_records(directory)).map(_parse(namer))
    if kind == "files":
        _records(directory)
        files = tf.data.Dataset.list_files(os.path.join(directory, "*.tfrecord"), shuffle=False)
        reads = files.interleave(tf.data.TFRecordDataset, cycle_length=2, num_parallel_calls=2)
        return reads.map(_parse(namer))
    if kind == "zip":
        pair = (tf.data.Dataset.from_tensor_slices(rows), tf.data.Dataset.from_tensor_slices(rows))
        return tf.data.Dataset.zip(pair).map(namer.named("join", lambda a, c: a[0] + a[1] * c))
    if kind == "choose":
        parts = [tf.data.Dataset.from_tensor_slices(rows).map(namer.map()) for _ in range(2)]
        selector = tf.data.Dataset.range(2).repeat(ROWS // 2)
        return tf.data.Dataset.choose_from_datasets(parts, selector)
    if kind == "concatenate":
        half = tf.data.Dataset.from_tensor_slices(rows[: ROWS // 2])
        return half.map(namer.map()).concatenate(half.map(namer.map()))
    return tf.data.Dataset.from_tensors(rows[0]).repeat(ROWS)


def _random_pipeline(rng: random.Random, namer: Namer, directory: str) -> tf.data.Dataset:
    dataset = _source(rng, namer, directory)
    batched = False
    for _ in range(rng.randint(2, 7)):
        op = rng.choice(
            ["map", "map", "map", "parallel_map", "python_map", "filter", "batch", "shuffle",
             "repeat", "prefetch", "cache", "take", "skip", "interleave", "flat_map", "scan",
             "shard", "take_while", "unbatch", "padded_batch", "ignore_errors"]
        )  # fmt: skip
        if op in ("map", "python_map"):
            python = op == "python_map"
            dataset = dataset.map(namer.map(python=python, stateful=rng.random() < 0.5))
        elif op == "parallel_map":
            calls = rng.choice([2, tf.data.AUTOTUNE])
            dataset = dataset.map(namer.map(), num_parallel_calls=calls)
        elif op == "filter":
            dataset = dataset.filter(namer.predicate())
        elif op in ("batch", "padded_batch") and not batched:
            batched = True
            dataset = dataset.batch(4) if op == "batch" else dataset.padded_batch(4)
        elif op == "unbatch" and batched:
            batched = False
            dataset = dataset.unbatch()
        elif op == "shuffle":
            dataset = dataset.shuffle(16)
        elif op == "repeat":
            dataset = dataset.repeat(rng.choice([None, 1, 2]))
        elif op == "prefetch":
            dataset = dataset.prefetch(rng.choice([0, 2]))
        elif op == "cache":
            dataset = dataset.cache()
        elif op == "take":
            dataset = dataset.take(rng.choice([-1, ROWS * 2]))
        elif op == "skip":
            dataset = dataset.skip(rng.choice([0, 3]))
        elif op == "shard":
            dataset = dataset.shard(rng.choice([1, 2]), 0)
        elif op in ("interleave", "flat_map"):
            inner = namer.map()
            expand = namer.named(
                op, lambda a, c, f=inner: tf.data.Dataset.from_tensors(a[0] * c).map(f)
            )
            if op == "flat_map":
                dataset = dataset.flat_map(expand)
            else:
                calls = rng.choice([None, 2])
                dataset = dataset.interleave(expand, cycle_length=2, num_parallel_calls=calls)
        elif op == "scan":
            step = namer.named("scan", lambda a, c: (a[0] + 1, a[1] * c))
            dataset = dataset.scan(tf.constant(0, tf.int64), step)
        elif op == "take_while":
            dataset = dataset.take_while(namer.predicate())
        elif op == "ignore_errors":
            dataset = dataset.ignore_errors()
    options = tf.data.Options()
    for name in OPTIONS:
        draw = rng.random()
        if draw < 0.3:
            setattr(options.experimental_optimization, name, True)
        elif draw < 0.45:
            setattr(options.experimental_optimization, name, False)
    return dataset.with_options(options)


def _traced_functions(dataset: Any, found: dict[str, str] | None = None) -> dict[str, str]:
    """The user's traced functions in a dataset's Python objects: graph name -> Python name
    (tf.data's own, such as from_generator's flat_map_fn, left out)."""
    found = {} if found is None else found
    impl = getattr(dataset, "_impl", None)
    if impl is not None:
        return _traced_functions(impl, found)
    for value in vars(dataset).values():
        if type(value).__name__ == "StructuredFunctionWrapper":
            module = str(getattr(value._func, "__module__", ""))
            if module.startswith("tensorflow.") and not isinstance(value._func, type):
                continue
            name = value.function.name
            python_name = getattr(value._func, "__name__", "")
            if isinstance(value._func, type):  # tf.data.TFRecordDataset is TFRecordDatasetV2
                python_name = python_name.removesuffix("V2")
            found[name.decode() if isinstance(name, bytes) else name] = python_name
    try:
        inputs = dataset._inputs()
    except Exception:
        inputs = []
    for child in inputs:
        _traced_functions(child, found)
    return found


# Graph nodes that make no node in the model (or one above `Root`).
_NO_MODEL_NODE = ("Options", "MaxIntraOpParallelism", "PrivateThreadPool", "Model")


class Truth:
    """tf.data's rewritten graph of what an iterator runs, node by node."""

    def __init__(self, iterated: Any, user: Any, namer: Namer) -> None:
        finalized = tf.raw_ops.FinalizeDataset(
            input_dataset=iterated._variant_tensor, output_types=[tf.variant], output_shapes=[[]]
        )
        serialized = tf.raw_ops.DatasetToGraphV2(input_dataset=finalized, external_state_policy=1)
        graph = graph_pb2.GraphDef.FromString(serialized.numpy())
        self.library = {f.signature.name: f for f in graph.library.function}
        self.nodes = {node.name: node for node in graph.node}
        self.traced = _traced_functions(user)
        self.namer = namer
        returned = next(node for node in graph.node if node.op == "_Retval")
        self.top = self.nodes[returned.input[0].split(":")[0]]

    def _members(self, function: str) -> list[str]:
        if function in self.traced:
            return [self.traced[function]]
        body = self.library.get(function)
        if body is None:
            return []
        constants = [
            value
            for node in body.node_def
            if node.op == "Const"
            for value in node.attr["value"].tensor.float_val
        ]
        return [self.namer.by_constant[c] for c in constants if c in self.namer.by_constant]

    def functions(self, node: Any) -> tuple[str, ...]:
        """The user's functions a graph node runs, in the order they were written."""
        names: list[str] = []
        for key in sorted(node.attr):
            if node.attr[key].HasField("func"):
                names += self._members(node.attr[key].func.name)
        return tuple(sorted(names, key=lambda name: int("".join(filter(str.isdigit, name)) or 0)))

    def _inputs(self, node: Any) -> list[Any]:
        found = []
        for reference in node.input:
            source = self.nodes.get(reference.split(":")[0].lstrip("^"))
            if source is not None and "Dataset" in source.op:
                found.append(source)
        return found

    def _past_wrappers(self, node: Any) -> Any:
        while family(node.op) in _NO_MODEL_NODE and self._inputs(node):
            node = self._inputs(node)[0]
        return node

    def per_model_node(self, model: ModelNode) -> dict[int, tuple[str, ...]]:
        """Each model node's graph node's functions: the two trees walked together, a graph
        node the model has not opened (a concatenate's next input) skipped."""
        found: dict[int, tuple[str, ...]] = {}

        def walk(node: Any, model_node: ModelNode) -> None:
            node = self._past_wrappers(node)
            if family(node.op) != model_node.family:
                return
            found[model_node.id] = self.functions(node)
            while (
                len(model_node.children) == 1
                and model_node.children[0].family == model_node.family
                and model_node.children[0].name != model_node.name
            ):
                model_node = model_node.children[0]  # a cache's filling half
                found[model_node.id] = ()
            inputs = [self._past_wrappers(i) for i in self._inputs(node)]
            index = 0
            for child in model_node.children[: model_node.input_count()]:
                while index < len(inputs) and family(inputs[index].op) != child.family:
                    index += 1
                if index < len(inputs):
                    walk(inputs[index], child)
                    index += 1

        walk(self.top, model)
        return found


def wrapped(dataset: Any) -> Any:
    """`dataset` as `model.fit(cb.wrap(dataset))` iterates it (no server is reached here)."""
    from trainer_agent import StokerCallback

    return StokerCallback(server="http://127.0.0.1:9").wrap(dataset)


def named_nodes(dataset: Any, *, wrap: bool, elements: int = 3) -> tuple[Any, ModelNode, dict]:
    """(what was iterated, the model's tree, the user's functions Stoker names per node) for
    the live iterator of `dataset`, wrapped as `fit` wraps it or not."""
    iterated = wrapped(dataset) if wrap else dataset
    iterator = iter(iterated)
    for _ in range(elements):
        try:
            next(iterator)
        except StopIteration:
            break
    tree = _settled_tree(iterator)
    alignment = align(read_dataset(dataset), tree, applied_rewrites(iterated))
    assert alignment is not None
    named = {
        node_id: tuple(f.name for d in datasets for f in d.functions if f.name != "numbers")
        for node_id, datasets in alignment.runs.items()
    }
    return iterated, tree, named


def _shape(tree: ModelNode) -> list[tuple[str, int]]:
    return [(node.name, len(node.children)) for node in tree.walk()]


def _settled_tree(iterator: Any) -> ModelNode:
    """The model's tree once two reads 20 ms apart agree: the injected prefetch goes on
    filling its buffer after the last `next`, and a read taken while an interleave builds its
    inner iterator sees that inner chain half made (1 read in 40 here), which no alignment can
    name; the truth is compared on a settled model."""
    previous = None
    for _ in range(50):
        proto = tf.data.experimental.get_model_proto(iterator)
        nodes = dict(proto.nodes)
        tree = model_tree(nodes, nodes[proto.output].inputs[0])
        assert tree is not None
        if previous is not None and _shape(tree) == _shape(previous):
            return tree
        previous = tree
        time.sleep(0.02)
    return tree


def _check(dataset: Any, namer: Namer, *, wrap: bool, label: str) -> int:
    """Stoker's names against the truth on every model node tf.data's graph explains; the
    number of nodes that run a user function."""
    iterated, tree, named = named_nodes(dataset, wrap=wrap)
    expected = Truth(iterated, dataset, namer).per_model_node(tree)
    wrong = {
        node.name: (named.get(node.id, ()), expected[node.id])
        for node in tree.walk()
        if node.id in expected and named.get(node.id, ()) != expected[node.id]
    }
    assert not wrong, f"{label}: node: (named, tf.data runs) {wrong}"
    return sum(1 for functions in expected.values() if functions)


@needs_model
@pytest.mark.parametrize("block", range(4))
def test_random_pipelines_name_what_tf_datas_rewritten_graph_runs(tmp_path, block) -> None:
    """12 random pipelines per block (48 in all), each against tf.data's rewritten graph."""
    rng = random.Random(38_000 + block)
    checked = 0
    for index in range(12):
        namer = Namer()
        dataset = _random_pipeline(rng, namer, str(tmp_path))
        wrap = rng.random() < 0.5
        checked += _check(dataset, namer, wrap=wrap, label=f"pipeline {block}.{index}")
    assert checked >= 24  # the pipelines ran user functions on that many nodes


def _kinds(directory: str) -> dict[str, Callable[[Namer], tf.data.Dataset]]:
    rows = np.ones((ROWS, 4), np.float32)

    def slices() -> tf.data.Dataset:
        return tf.data.Dataset.from_tensor_slices(rows)

    text = os.path.join(directory, "lines.txt")
    with open(text, "w") as handle:
        handle.write("\n".join("1 2 3 4" for _ in range(ROWS)))
    fixed = os.path.join(directory, "rows.bin")
    rows.tofile(fixed)

    def to_numbers(namer: Namer) -> Callable[..., Any]:
        return namer.named(
            "to_numbers",
            lambda a, c: tf.strings.to_number(tf.strings.split(a[0], " ")[:4]) * c,
        )

    return {
        "text_lines": lambda n: tf.data.TextLineDataset(text).map(to_numbers(n)),
        "fixed_length_records": lambda n: tf.data.FixedLengthRecordDataset(fixed, 16).map(
            _parse(n)
        ),
        "tfrecord_parallel_reads": lambda n: tf.data.TFRecordDataset(
            _records(directory), num_parallel_reads=2
        ).map(_parse(n)),
        "window_flat_map": lambda n: (
            slices()
            .window(4)
            .flat_map(n.named("windows", lambda a, c: a[0].batch(4).map(lambda x: x * c)))
        ),
        "group_by_window": lambda n: slices().group_by_window(
            n.named("key", lambda a, c: tf.cast(tf.reduce_sum(a[0]) > c, tf.int64)),
            n.named("reduce", lambda a, c: a[1].batch(2).map(lambda x: x * c)),
            window_size=2,
        ),
        "sample_from_datasets": lambda n: tf.data.Dataset.sample_from_datasets(
            [slices().map(n.map()), slices().map(n.map())], seed=1
        ),
        "enumerate": lambda n: (
            slices().enumerate().map(n.named("drop_index", lambda a, c: a[1] * c))
        ),
        "rebatch": lambda n: slices().batch(8).rebatch(4).map(n.map()),
        "ragged_batch": lambda n: slices().map(n.map()).ragged_batch(4),
        "unique": lambda n: (
            tf.data.Dataset.range(ROWS)
            .unique()
            .map(n.named("fill", lambda a, c: tf.fill([4], tf.cast(a[0], tf.float32)) * c))
        ),
        "random": lambda n: (
            tf.data.Dataset.random(seed=1)
            .take(ROWS)
            .map(n.named("fill", lambda a, c: tf.fill([4], tf.cast(a[0], tf.float32)) * c))
        ),
        "map_and_batch": lambda n: slices().apply(
            tf.data.experimental.map_and_batch(n.map(python=True), 4)
        ),
        "parallel_batch": lambda n: (
            slices().map(n.map()).batch(4, num_parallel_calls=2).map(n.map())
        ),
        "bucket_by_sequence_length": lambda n: (
            slices()
            .map(n.map())
            .bucket_by_sequence_length(
                n.named("length", lambda a, c: tf.cast(tf.constant(c) * 0, tf.int32) + 4),
                [8],
                [4, 4],
            )
        ),
        "cache_to_file": lambda n: (
            slices().map(n.map(python=True)).cache(os.path.join(directory, "cache")).map(n.map())
        ),
        "snapshot": lambda n: (
            slices().map(n.map()).snapshot(os.path.join(directory, "snapshot")).map(n.map())
        ),
        "filter_then_map_fused": lambda n: (
            slices().map(n.map()).filter(n.predicate()).map(n.map()).with_options(_fusing())
        ),
        "three_maps_fused_into_a_batch": lambda n: (
            slices()
            .map(n.map())
            .map(n.map(python=True, stateful=False))
            .map(n.map())
            .batch(4)
            .with_options(_fusing())
        ),
    }


def _fusing() -> tf.data.Options:
    options = tf.data.Options()
    for name in ("map_fusion", "filter_fusion", "map_and_filter_fusion"):
        setattr(options.experimental_optimization, name, True)
    return options


KIND_NAMES = [
    "text_lines", "fixed_length_records", "tfrecord_parallel_reads", "window_flat_map",
    "group_by_window", "sample_from_datasets", "enumerate", "rebatch", "ragged_batch",
    "unique", "random", "map_and_batch", "parallel_batch", "bucket_by_sequence_length",
    "cache_to_file", "snapshot", "filter_then_map_fused", "three_maps_fused_into_a_batch",
]  # fmt: skip


@needs_model
@pytest.mark.parametrize("wrap", [False, True])
def test_every_dataset_kind_names_what_tf_datas_rewritten_graph_runs(tmp_path, wrap) -> None:
    kinds = _kinds(str(tmp_path))
    assert sorted(kinds) == sorted(KIND_NAMES)
    for name in KIND_NAMES:
        namer = Namer()
        assert _check(kinds[name](namer), namer, wrap=wrap, label=name) >= 1, name


@needs_model
def test_a_fused_node_names_all_its_functions_and_which_calls_python(tmp_path) -> None:
    namer = Namer()
    dataset = _kinds(str(tmp_path))["three_maps_fused_into_a_batch"](namer)
    iterator = iter(wrapped(dataset))
    next(iterator)
    stages = stages_from_proto(
        tf.data.experimental.get_model_proto(iterator),
        read_dataset(dataset),
        stamped=True,
        rewrites=applied_rewrites(dataset),
    )
    fused = next(s for s in stages if s["function"] and "+" in s["function"])
    assert fused["kind"] == "map_and_batch"
    assert fused["function"] == "fn1+fn2+fn3"
    assert [f["calls_python"] for f in fused["functions"]] == [False, True, False]
    assert fused["functions"][1]["file"] == __file__ and fused["functions"][1]["line"] > 0


@needs_model
def test_the_probe_reads_the_rewrites_the_options_turn_on_and_off() -> None:
    dataset = tf.data.Dataset.range(4)
    defaults = applied_rewrites(dataset)
    assert defaults <= set(REWRITES)
    assert "map_fusion" not in defaults or tf.__version__ < "2.16"
    on = tf.data.Options()
    on.experimental_optimization.map_fusion = True
    on.experimental_optimization.map_and_batch_fusion = False
    read = applied_rewrites(dataset.with_options(on))
    assert "map_fusion" in read and "map_and_batch_fusion" not in read


def test_a_generator_is_named_on_the_generator_and_the_source_is_told() -> None:
    def numbers() -> Any:
        yield from range(10)

    dataset = tf.data.Dataset.from_generator(
        numbers, output_signature=tf.TensorSpec((), tf.int64)
    ).batch(2)
    tree = read_dataset(dataset)
    generator = next(n for n in tree.walk() if n.family == "Generator")
    assert [f.name for f in generator.functions] == ["numbers"]
    assert describe_pipeline(dataset)["source"] == "generator"
    if HAS_MODEL:
        iterator = iter(dataset)
        next(iterator)
        proto = tf.data.experimental.get_model_proto(iterator)
        stages = stages_from_proto(proto, tree, rewrites=applied_rewrites(dataset))
        assert [s["function"] for s in stages if s["kind"] == "generator"] == ["numbers"]


def test_where_elements_come_from_files_memory_or_a_generator(tmp_path) -> None:
    paths = _records(str(tmp_path))
    in_memory = tf.data.Dataset.from_tensor_slices(np.zeros((8, 4), np.float32)).batch(2)
    assert describe_pipeline(in_memory)["source"] == "memory"
    assert not describe_pipeline(in_memory)["reads_files"]
    records = tf.data.TFRecordDataset(paths).batch(2)
    assert describe_pipeline(records)["source"] == "files"
    files = tf.data.Dataset.from_tensor_slices(paths).interleave(
        tf.data.TFRecordDataset, num_parallel_calls=2
    )
    described = describe_pipeline(files.batch(2).repeat())
    assert described["reads_files"] and described["parallel_interleave"]


def test_reading_the_tree_makes_no_element() -> None:
    """The tree is read in `wrap`, before fit, on the caller's thread: no element is made."""
    made = []

    def numbers() -> Any:
        made.append(1)
        yield from range(10)

    dataset = tf.data.Dataset.from_generator(numbers, output_signature=tf.TensorSpec((), tf.int64))
    for _ in range(10):
        dataset = dataset.map(lambda x: x + 1)
    tree = read_dataset(dataset.batch(2))
    assert tree is not None and tree.size() == 13  # from_generator's 2, 10 maps, batch
    assert not made
