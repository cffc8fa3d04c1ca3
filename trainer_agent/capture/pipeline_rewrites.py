"""Which of tf.data's documented rewrites ran on a pipeline, and which node runs what.

tf.data rewrites a pipeline before it runs it (`tf.data.experimental.OptimizationOptions`):
it fuses a map with the batch after it (`map_and_batch_fusion`), makes stateless maps
parallel (`map_parallelization`), fuses consecutive maps (`map_fusion`) or filters
(`filter_fusion`), a map with the filter after it (`map_and_filter_fusion`, three nodes), a
shuffle with the repeat after it (`shuffle_and_repeat_fusion`), drops no-ops
(`noop_elimination`) and appends a prefetch (`inject_prefetch`). Which ones are on depends on
the TensorFlow version and the pipeline's options, so `applied_rewrites` reads them from
tf.data itself: it runs a small probe pipeline with the same options and looks at the nodes
its autotuning model shows (the serialized rewritten graph would copy every in-memory array
the pipeline holds).

`align` then searches for the cheapest way the user's dataset tree (`dataset_graph`) became
the model's node tree under those rewrites: a node kept (maybe made parallel), several fused
into one, a no-op dropped, a node tf.data or Stoker added, a node not (or no longer) in the
model (an input iterator exhausted, or not opened yet). Every model node then names the user's
datasets it runs.
"""

import functools
import logging
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from trainer_agent.capture.dataset_graph import INTERLEAVES, DatasetNode, family

log = logging.getLogger("trainer_agent")

REWRITES = (
    "map_and_batch_fusion",
    "map_parallelization",
    "map_fusion",
    "filter_fusion",
    "map_and_filter_fusion",
    "filter_parallelization",
    "shuffle_and_repeat_fusion",
    "noop_elimination",
    "inject_prefetch",
)

# Costs of the search: a node kept costs nothing, a kind changed (made parallel) a little, each
# dataset fused into another a little more, a no-op dropped or a prefetch added some, anything
# unexplained (a node missing or extra) most.
_VARIANT = 0.01
_FUSED = 0.05
_NOOP_DROPPED = 0.1
_ADDED = 0.2
_UNEXPLAINED = 1.0
_OPAQUE = 0.1

# Kinds tf.data changes a node into without fusing it.
_VARIANTS = (
    frozenset({"Map", "ParallelMap"}),
    frozenset({"Filter", "ParallelFilter"}),
    frozenset({"Batch", "ParallelBatch"}),
    frozenset({"Interleave", "ParallelInterleave"}),
)
_MAPS = frozenset({"Map", "ParallelMap"})
_FILTERS = frozenset({"Filter", "ParallelFilter"})
# Nodes tf.data (or Stoker's wrap) adds that are cheap to explain.
_ADDABLE = frozenset(
    {"Prefetch", "AssertCardinality", "MaxIntraOpParallelism", "PrivateThreadPool"}
)


@dataclass(eq=False)
class ModelNode:
    """A node of tf.data's autotuning model, as a tree."""

    id: int
    name: str
    children: list["ModelNode"] = field(default_factory=list)
    family: str = ""

    def __post_init__(self) -> None:
        self.family = family(self.name)

    def walk(self) -> Iterator["ModelNode"]:
        yield self
        for child in self.children:
            yield from child.walk()

    def size(self) -> int:
        return 1 + sum(child.size() for child in self.children)

    def input_count(self) -> int:
        """Children that are inputs; the rest (an interleave's) are its function's datasets."""
        if self.family in INTERLEAVES or self.family in ("GroupByWindow", "Snapshot"):
            return min(1, len(self.children))
        return len(self.children)


def model_tree(nodes: dict[int, Any], node_id: int, depth: int = 0) -> ModelNode | None:
    node = nodes.get(node_id)
    if node is None or depth > 200:
        return None
    tree = ModelNode(node_id, node.name)
    for child in node.inputs:
        subtree = model_tree(nodes, child, depth + 1)
        if subtree is not None:
            tree.children.append(subtree)
    return tree


@dataclass
class Alignment:
    """Which of the user's datasets each model node runs (source first), by node id."""

    root: ModelNode
    cost: float
    runs: dict[int, list[DatasetNode]]


_Pairs = tuple[tuple[int, tuple[DatasetNode, ...]], ...]


class _Search:
    def __init__(self, rewrites: frozenset[str]) -> None:
        self.rewrites = rewrites
        self.memo: dict[tuple[int, int], tuple[float, _Pairs]] = {}
        self._sizes: dict[int, int] = {}

    def size(self, node: DatasetNode | ModelNode) -> int:
        """Nodes in the subtree (memoized: the search asks for each many times)."""
        found = self._sizes.get(id(node))
        if found is None:
            found = self._sizes[id(node)] = node.size()
        return found

    def align(self, user: DatasetNode | None, model: ModelNode | None) -> tuple[float, _Pairs]:
        if user is None:
            return (0.0 if model is None else _UNEXPLAINED * self.size(model)), ()
        if model is None:
            return _UNEXPLAINED * self.size(user), ()
        key = (id(user), id(model))
        found = self.memo.get(key)
        if found is None:
            self.memo[key] = (float("inf"), ())  # a cycle is never the answer
            found = min(self._options(user, model), key=lambda option: option[0])
            self.memo[key] = found
        return found

    def _options(self, user: DatasetNode, model: ModelNode) -> Iterator[tuple[float, _Pairs]]:
        yield _UNEXPLAINED * (self.size(user) + self.size(model)), ()  # nothing explains either
        if user.opaque:
            yield _OPAQUE, ()
        for fused_family, run, cost in self._fusions(user):
            if _compatible(fused_family, model.family) and _may_run_as(run, model.family):
                below, pairs = self._below(run[-1], model)
                yield cost + below, ((model.id, tuple(run)), *pairs)
        yield from self._map_and_filter(user, model)
        if len(user.inputs) <= 1:  # a user dataset tf.data dropped, or missing from the model
            drop = _NOOP_DROPPED if user.noop else _UNEXPLAINED
            below, pairs = self.align(user.inputs[0] if user.inputs else None, model)
            yield drop + below, pairs
        # A model node the user did not write (tf.data's prefetch, Stoker's stage): the user's
        # tree continues in one of its children, the others are unexplained.
        add = _ADDED if model.family in _ADDABLE else _UNEXPLAINED
        for index, child in enumerate(model.children):
            rest = sum(self.size(c) for i, c in enumerate(model.children) if i != index)
            below, pairs = self.align(user, child)
            yield add + _UNEXPLAINED * rest + below, pairs

    def _fusions(self, user: DatasetNode) -> Iterator[tuple[str, list[DatasetNode], float]]:
        """(the model node's family, the user's datasets it runs top-down, cost) for `user`
        kept as it is (maybe made parallel) and for each documented fusion starting at it."""
        yield user.family, [user], (0.0)
        on = self.rewrites
        # The datasets below, one input each; no-ops are gone before anything fuses.
        chain, node = [user], user
        while len(chain) < 16 and len(node.inputs) == 1 and not node.opaque:
            node = node.inputs[0]
            if not (node.noop and "noop_elimination" in on):
                chain.append(node)
        maps = _leading(chain, _MAPS)
        if "map_fusion" in on:
            # tf.data fuses no stateful function with another (a numpy_function, a random op)
            for n in range(2, _leading_stateless(chain, maps) + 1):
                yield "Map", chain[:n], _FUSED * (n - 1)
        if "map_and_batch_fusion" in on and user.family == "Batch":
            below = _leading(chain[1:], _MAPS)
            if below:  # the map right before the batch, and with map_fusion those before it
                longest = _leading_stateless(chain[1:], below) if "map_fusion" in on else 1
                for n in range(1, max(1, longest) + 1):
                    yield "MapAndBatch", chain[: n + 1], _FUSED * n
        if "filter_fusion" in on:
            for n in range(2, _leading(chain, _FILTERS) + 1):
                yield "Filter", chain[:n], _FUSED * (n - 1)
        if "shuffle_and_repeat_fusion" in on and [n.family for n in chain[:2]] == [
            "Repeat",
            "Shuffle",
        ]:
            yield "ShuffleAndRepeat", chain[:2], _FUSED

    def _map_and_filter(
        self, user: DatasetNode, model: ModelNode
    ) -> Iterator[tuple[float, _Pairs]]:
        """map_and_filter_fusion: `map(f).filter(p)` runs as a map computing f and p, a filter
        on p's result and a map dropping it: three model nodes for two datasets."""
        if "map_and_filter_fusion" not in self.rewrites or user.family not in _FILTERS:
            return
        if len(user.inputs) != 1 or user.inputs[0].family not in _MAPS:
            return
        nodes = [model]
        while len(nodes) < 3 and len(nodes[-1].children) == 1:
            nodes.append(nodes[-1].children[0])
        shape = (_MAPS, _FILTERS, _MAPS)
        if len(nodes) != 3 or not all(n.family in f for n, f in zip(nodes, shape, strict=True)):
            return
        # The fused map runs both functions; the filter on its flag and the map dropping the
        # flag are tf.data's own.
        run = (user, user.inputs[0])
        below, pairs = self._below(user.inputs[0], nodes[2])
        own: tuple[DatasetNode, ...] = ()
        yield (
            2 * _FUSED + below,
            ((nodes[0].id, own), (nodes[1].id, own), (nodes[2].id, run), *pairs),
        )

    def _below(self, bottom: DatasetNode, model: ModelNode) -> tuple[float, _Pairs]:
        """The user's inputs (and an interleave's inner dataset) under `bottom`, aligned with
        the model node's; a node the model splits in two (a cache and its filling half) is
        passed through."""
        pairs: _Pairs = ()
        while (
            len(model.children) == 1
            and model.children[0].family == model.family
            and model.children[0].name != model.name  # MemoryCache over MemoryCacheImpl
        ):
            pairs = (*pairs, (model.children[0].id, (bottom,)))
            model = model.children[0]
        count = model.input_count()
        cost, below = self._inputs(bottom.inputs, model.children[:count])
        pairs = (*pairs, *below)
        inner_models = model.children[count:]
        if bottom.inner is not None and inner_models:
            inner_cost, inner = self.align(bottom.inner, inner_models[0])
            cost += inner_cost
            pairs = (*pairs, *inner)
        return cost, pairs

    def _inputs(self, users: list[DatasetNode], models: list[ModelNode]) -> tuple[float, _Pairs]:
        """Inputs aligned in order (a concatenate shows only the input it reads now)."""
        if len(users) == 1 and len(models) == 1:
            return self.align(users[0], models[0])
        n, m = len(users), len(models)
        best: list[list[tuple[float, _Pairs]]] = [[(0.0, ())] * (m + 1) for _ in range(n + 1)]
        for i in range(n, -1, -1):
            for j in range(m, -1, -1):
                if i == n and j == m:
                    continue
                options = []
                if i < n and j < m:
                    cost, pairs = self.align(users[i], models[j])
                    rest = best[i + 1][j + 1]
                    options.append((cost + rest[0], (*pairs, *rest[1])))
                if i < n:
                    rest = best[i + 1][j]
                    options.append((_UNEXPLAINED * self.size(users[i]) + rest[0], rest[1]))
                if j < m:
                    rest = best[i][j + 1]
                    options.append((_UNEXPLAINED * self.size(models[j]) + rest[0], rest[1]))
                best[i][j] = min(options, key=lambda option: option[0])
        return best[0][0]


def _leading(chain: list[DatasetNode], families: frozenset[str]) -> int:
    count = 0
    for node in chain:
        if node.family not in families or node.opaque:
            break
        count += 1
    return count


def _may_run_as(run: list[DatasetNode], model_family: str) -> bool:
    """tf.data makes a serial map parallel (map_parallelization) only when its function is
    stateless: a user's serial map with a stateful function (a numpy_function, a random op)
    cannot be a parallel map node."""
    if model_family != "ParallelMap":
        return True
    return not any(node.family == "Map" and node.stateful for node in run)


def _leading_stateless(chain: list[DatasetNode], count: int) -> int:
    """Of the first `count` maps of `chain`, how many tf.data may fuse into one: a stateful
    one only alone."""
    if count and chain[0].stateful:
        return 1
    stateless = 0
    for node in chain[:count]:
        if node.stateful:
            break
        stateless += 1
    return stateless


def _compatible(user_family: str, model_family: str) -> bool:
    if user_family == model_family:
        return True
    return any(user_family in group and model_family in group for group in _VARIANTS)


def align(user: DatasetNode, model: ModelNode, rewrites: frozenset[str]) -> Alignment | None:
    """The model node where the user's pipeline ends (below what Stoker's wrap and tf.data
    put after it) and which user datasets each model node runs, or None without a match."""
    search = _Search(rewrites)
    best: tuple[float, int, ModelNode, _Pairs] | None = None
    for candidate in model.walk():
        cost, pairs = search.align(user, candidate)
        # Of equal costs the one explaining more nodes wins, then the later node in depth-first
        # order: Stoker's stamping zip reads its request counter first, the user's pipeline
        # second.
        if pairs and (
            best is None or cost < best[0] or (cost == best[0] and len(pairs) >= best[1])
        ):
            best = (cost, len(pairs), candidate, pairs)
    if best is None:
        return None
    runs: dict[int, list[DatasetNode]] = {}
    for node_id, datasets in best[3]:
        runs.setdefault(node_id, [])
        runs[node_id] = list(reversed(datasets))  # source first
    return Alignment(root=best[2], cost=best[0], runs=runs)


class AlignmentCache:
    """The alignments of a user's tree by the shape of the model's tree. A live iterator's
    model keeps its shape from read to read (its node ids change as tf.data makes iterators
    anew), so the search runs once per shape, not at every read."""

    def __init__(self, size: int = 8) -> None:
        self._size = size
        self._entries: dict[
            tuple[int, frozenset[str], tuple[tuple[str, int], ...]],
            tuple[DatasetNode, int, float, dict[int, list[DatasetNode]]],
        ] = {}

    def align(
        self, user: DatasetNode, model: ModelNode, rewrites: frozenset[str]
    ) -> Alignment | None:
        nodes = list(model.walk())
        shape = tuple((node.name, len(node.children)) for node in nodes)
        key = (id(user), rewrites, shape)
        held = self._entries.get(key)
        if held is None or held[0] is not user:
            found = align(user, model, rewrites)
            if found is None:
                return None
            index = {node.id: i for i, node in enumerate(nodes)}
            runs = {index[node_id]: datasets for node_id, datasets in found.runs.items()}
            if len(self._entries) >= self._size:
                self._entries.pop(next(iter(self._entries)))
            self._entries[key] = (user, index[found.root.id], found.cost, runs)
            return found
        _, root, cost, runs = held
        return Alignment(
            root=nodes[root],
            cost=cost,
            runs={nodes[i].id: datasets for i, datasets in runs.items()},
        )


# The probe: segments separated by take(N) barriers, each offering tf.data one rewrite.
_BARRIER = 1_000_000


@functools.lru_cache(maxsize=8)
def _probe_rewrites(options_key: bytes) -> frozenset[str]:
    import tensorflow as tf

    options = tf.data.Options()
    options._from_proto(_options_proto(options_key))

    def double(x: Any) -> Any:
        return x * 2

    def keep(x: Any) -> Any:
        return x >= 0

    dataset = (
        tf.data.Dataset.range(64)
        .map(double).map(double).take(_BARRIER)
        .filter(keep).filter(keep).take(_BARRIER)
        .map(double).filter(keep).take(_BARRIER)
        .shuffle(4).repeat(2).take(_BARRIER)
        .map(double).batch(2).take(-1)
    )  # fmt: skip
    dataset = dataset.with_options(options)
    iterator = iter(dataset)
    next(iterator)
    proto = tf.data.experimental.get_model_proto(iterator)
    nodes = dict(proto.nodes)
    chain: list[str] = []
    node = nodes.get(proto.output)
    while node is not None:
        if node.name != "Root":
            chain.append(family(node.name))
        node = nodes.get(node.inputs[0]) if node.inputs else None
    return _read_probe(chain[::-1])


def _read_probe(chain: list[str]) -> frozenset[str]:
    """The rewrites a probe's model chain (source first) shows."""
    found: set[str] = set()
    if chain and chain[-1] == "Prefetch":
        found.add("inject_prefetch")
        chain = chain[:-1]
    if chain.count("Take") == 4:
        found.add("noop_elimination")  # the take(-1) is gone
    segments: list[list[str]] = [[]]
    for name in chain[1:]:  # after the range
        if name == "Take":
            segments.append([])
        else:
            segments[-1].append(name)
    if len(segments) < 5:
        return frozenset(REWRITES)
    maps, filters, map_filter, shuffle, map_batch = segments[:5]
    if len(maps) == 1:
        found.add("map_fusion")
    if "ParallelMap" in maps + map_filter + map_batch:
        found.add("map_parallelization")
    if len(filters) == 1:
        found.add("filter_fusion")
    if "ParallelFilter" in filters + map_filter:
        found.add("filter_parallelization")
    if len(map_filter) == 3:
        found.add("map_and_filter_fusion")
    if shuffle == ["ShuffleAndRepeat"]:
        found.add("shuffle_and_repeat_fusion")
    if "MapAndBatch" in map_batch:
        found.add("map_and_batch_fusion")
    return frozenset(found)


def _options_proto(key: bytes) -> Any:
    from tensorflow.core.framework import dataset_options_pb2

    proto = dataset_options_pb2.Options()
    proto.ParseFromString(key)
    return proto


def applied_rewrites(dataset: Any) -> frozenset[str]:
    """The rewrites tf.data applies to pipelines with `dataset`'s options, read from a probe
    (cached per options); every documented one when the probe cannot run."""
    try:
        key = dataset.options()._to_proto().SerializeToString()
        return _probe_rewrites(key)
    except Exception as error:
        log.debug("Stoker: tf.data's rewrites not probed (%s)", error)
        return frozenset(REWRITES)
