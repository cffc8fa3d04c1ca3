"""`stoker tune`'s rewrites of a real tf.data pipeline keep its elements and their order, and
the changes it cannot apply safely are listed with why (trainer_agent/tune/changes.py,
rebuild.py, source.py). In process: no training, no server."""

import importlib.util
import time
from pathlib import Path
from typing import Any

import numpy as np
import pytest

tf = pytest.importorskip("tensorflow")

from trainer_agent.tune.chain import links, signature  # noqa: E402
from trainer_agent.tune.changes import (  # noqa: E402
    Change,
    Context,
    apply_to_dataset,
    candidate_changes,
    with_file_caches_redirected,
)
from trainer_agent.tune.rebuild import CannotRebuild, rebuild_link  # noqa: E402
from trainer_agent.tune.source import search_files  # noqa: E402

CONTEXT = Context(steps=100, steps_per_epoch=10, cache_budget_bytes=10**9)


def _elements(dataset: Any, epochs: int = 1) -> list[Any]:
    return [tf.nest.map_structure(np.asarray, e) for _ in range(epochs) for e in dataset]


def _assert_same(first: list[Any], second: list[Any]) -> None:
    assert len(first) == len(second)
    for a, b in zip(first, second, strict=True):
        tf.nest.map_structure(np.testing.assert_array_equal, a, b)


def _changes(dataset: Any, context: Context = CONTEXT) -> dict[str, Change]:
    chain = links(dataset)
    return {c.id: c for c in candidate_changes(dataset, chain, search_files(chain), context)}


def _by_advice(changes: dict[str, Change], advice: str) -> Change:
    return next(c for c in changes.values() if c.advice == advice)


def _records() -> Any:
    x = np.arange(60 * 3, dtype="float32").reshape(60, 3)
    return tf.data.Dataset.from_tensor_slices((x, np.arange(60)))


def slow_decode(x: Any, y: Any) -> Any:
    x = tf.numpy_function(lambda v: v * 2.0, [x], tf.float32)
    return tf.ensure_shape(x, [3]), y


def slow_batch(x: Any, y: Any) -> Any:
    x = tf.numpy_function(lambda v: v * 2.0, [x], tf.float32)
    return tf.ensure_shape(x, [None, 3]), y


def normalize(x: Any, y: Any) -> Any:
    return {"features": x / 10.0}, y


def test_parallel_map_rebuilds_every_later_stage_and_keeps_elements_and_order() -> None:
    options = tf.data.Options()
    options.threading.private_threadpool_size = 4
    dataset = (
        _records().map(slow_decode).batch(4).map(normalize).shuffle(8, seed=3)
        .prefetch(2).with_options(options)
    )  # fmt: skip
    change = _by_advice(_changes(dataset), "parallel")
    assert (change.id, change.function, change.python) == ("parallel:1", "slow_decode", True)
    assert change.not_tried is None
    changed = apply_to_dataset(change.id, links(dataset), dataset)
    kinds = [link.kind for link in links(changed)]
    assert kinds == ["TensorSlice", "ParallelMap", "Batch", "Map", "Shuffle", "Prefetch", "Options"]
    assert changed.options().threading.private_threadpool_size == 4
    _assert_same(_elements(dataset, epochs=2), _elements(changed, epochs=2))


def test_serial_interleave_made_parallel_keeps_its_order() -> None:
    def read_file(index: Any) -> Any:
        return tf.data.Dataset.range(index * 100, index * 100 + 7).map(lambda v: v * 3)

    for cycle in (None, 3):
        dataset = tf.data.Dataset.range(6).interleave(read_file, cycle_length=cycle,
                                                      block_length=2)  # fmt: skip
        change = _by_advice(_changes(dataset), "parallel")
        assert change.id == "parallel:1" and change.not_tried is None
        changed = apply_to_dataset(change.id, links(dataset), dataset)
        assert links(changed)[1].kind == "ParallelInterleave"
        _assert_same(_elements(dataset), _elements(changed))


def test_a_stateless_map_is_parallel_already_and_not_tried() -> None:
    dataset = _records().map(lambda x, y: (x * 2.0, y)).batch(4)
    change = _by_advice(_changes(dataset), "parallel")
    assert change.not_tried is not None and "map_parallelization" in change.not_tried


def test_cache_after_a_deterministic_prefix_keeps_every_epochs_elements() -> None:
    def decode(x: Any, y: Any) -> Any:
        return tf.math.sqrt(x + 1.0), y

    dataset = _records().map(decode).map(normalize).shuffle(60, seed=1).batch(6)
    changes = _changes(dataset)
    cache = _by_advice(changes, "cache")
    assert (cache.id, cache.not_tried, cache.title) == (
        "cache:2",
        None,
        "cache() after map normalize",
    )
    changed = apply_to_dataset(cache.id, links(dataset), dataset)
    assert [link.kind for link in links(changed)][3] == "Cache"
    _assert_same(_elements(dataset, epochs=3), _elements(changed, epochs=3))


def test_cache_is_not_tried_after_a_random_op_a_python_function_or_a_shuffle() -> None:
    def augment(x: Any, y: Any) -> Any:
        return x + tf.random.uniform([3]), y

    random = _by_advice(_changes(_records().map(augment).batch(4)), "cache")
    assert random.not_tried is not None
    assert "map augment (stage 1) draws random numbers (RandomUniform)" in random.not_tried
    python = _by_advice(_changes(_records().map(slow_decode).batch(4)), "cache")
    assert python.not_tried is not None and "runs Python" in python.not_tried
    shuffled = _records().shuffle(60).map(lambda x, y: (tf.sqrt(x), y)).batch(4)
    after_shuffle = _by_advice(_changes(shuffled), "cache")
    assert after_shuffle.not_tried is not None and "shuffles" in after_shuffle.not_tried


def test_cache_is_not_tried_over_the_memory_allowed_or_within_one_epoch() -> None:
    dataset = _records().map(lambda x, y: (tf.sqrt(x), y)).batch(4)
    small = Context(steps=100, steps_per_epoch=15, cache_budget_bytes=100)
    over = _by_advice(_changes(dataset, small), "cache")
    assert over.not_tried is not None and "more than the memory allowed" in over.not_tried
    short = Context(steps=10, steps_per_epoch=15, cache_budget_bytes=10**9)
    within = _by_advice(_changes(dataset, short), "cache")
    assert within.not_tried is not None and "--steps 30" in within.not_tried


def test_prefetch_is_in_effect_when_tf_data_appends_it_and_tried_when_nothing_does() -> None:
    dataset = _records().batch(4).map(slow_batch)
    in_effect = _by_advice(_changes(dataset), "prefetch")
    assert in_effect.not_tried is not None and "inject_prefetch" in in_effect.not_tried
    options = tf.data.Options()
    options.autotune.enabled = False
    off = dataset.with_options(options)
    changes = _changes(off)
    assert _by_advice(changes, "prefetch").not_tried is None
    assert _by_advice(changes, "autotune").not_tried is None
    for advice in ("prefetch", "autotune"):
        changed = apply_to_dataset(_by_advice(changes, advice).id, links(off), off)
        _assert_same(_elements(off), _elements(changed))
    autotuned = apply_to_dataset("autotune", links(off), off)
    assert autotuned.options().autotune.enabled is True


def test_a_shuffle_seeded_by_the_global_seed_alone_keeps_its_order_or_is_refused() -> None:
    # A script that sets the global seed keeps it set when it fits: the rebuilt shuffle draws
    # the same seeds. Were it reset in between, the order could not be drawn again: refused.
    tf.random.set_seed(7)
    try:
        dataset = _records().map(slow_decode).shuffle(60).batch(4)
        change = _by_advice(_changes(dataset), "parallel")
        changed = apply_to_dataset(change.id, links(dataset), dataset)
        _assert_same(_elements(dataset), _elements(changed))
    finally:
        tf.random.set_seed(None)
    with pytest.raises(CannotRebuild, match="pass seed= to shuffle"):
        apply_to_dataset(change.id, links(dataset), dataset)


def test_a_kind_stoker_cannot_rebuild_after_the_change_is_not_tried() -> None:
    dataset = _records().map(slow_decode).batch(4).rebatch(2)
    change = _by_advice(_changes(dataset), "parallel")
    assert change.not_tried is not None and "Stoker cannot rebuild the" in change.not_tried
    with pytest.raises(CannotRebuild):
        rebuild_link(links(dataset)[-1], links(dataset)[-2].node, None)


def test_a_cache_file_is_each_trials_own(tmp_path: Path) -> None:
    cached = _records().map(lambda x, y: (tf.sqrt(x), y)).cache(str(tmp_path / "users"))
    dataset = cached.batch(4)
    redirected = with_file_caches_redirected(links(dataset), lambda i: str(tmp_path / f"t{i}"))
    assert redirected is not None and signature(links(redirected)) == signature(links(dataset))
    _assert_same(_elements(dataset), _elements(redirected))
    assert (tmp_path / "t2.index").exists()


PIPELINE_SOURCE = """
import tensorflow as tf


def read_image(x, y):
    return tf.numpy_function(lambda v: v, [x], tf.float32), y


def pipeline(records):
    return (
        records.shuffle(60)
        .map(read_image)
        .batch(4, drop_remainder=True)
    )
"""


def test_the_line_to_edit_is_the_users_own_call(tmp_path: Path) -> None:
    path = tmp_path / "train.py"
    path.write_text(PIPELINE_SOURCE)
    spec = importlib.util.spec_from_file_location("tune_train_example", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    changes = _changes(module.pipeline(_records()))
    edit = _by_advice(changes, "parallel").edit
    assert edit is not None
    assert (edit["path"], edit["line"], edit["before"]) == (str(path), 12, ".map(read_image)")
    assert edit["after"] == (
        ".map(read_image, num_parallel_calls=tf.data.AUTOTUNE, deterministic=True)"
    )
    prefetch = _by_advice(changes, "prefetch").edit
    assert prefetch is not None and prefetch["line"] == 13
    assert prefetch["after"] == ".batch(4, drop_remainder=True).prefetch(tf.data.AUTOTUNE)"
    assert _by_advice(changes, "parallel").defined_at is not None


def test_the_rewrite_runs_the_users_traced_function_not_a_new_trace() -> None:
    calls: list[float] = []

    def counted(x: Any, y: Any) -> Any:
        calls.append(time.perf_counter())  # runs when traced, never per element
        return x + 1.0, y

    dataset = _records().map(slow_decode).map(counted).batch(4)
    traced = len(calls)
    change = _by_advice(_changes(dataset), "parallel")
    apply_to_dataset(change.id, links(dataset), dataset)
    assert len(calls) == traced
