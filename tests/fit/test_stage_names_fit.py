"""Issue 38's pipelines in real fits: the slow stage is named by the user's own function on
every shape tf.data rewrites (maps fused with each other or with a batch, parallelized, under
a zip, after a shuffle or a reader, an infinite pipeline), through the agent, the server's
/pipeline answer and its advice.

Each fit is `model.fit(cb.wrap(ds), ...)` as a user writes it, with the GPU-like held step
(tests/harness/gpu_like.py); the slow stage sleeps MARGIN x the step measured here a batch
(twice that on two threads), so it starves the step on any machine.
"""

import os
import re
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from tests.harness.support import ServerProcess, wait_for

tf = pytest.importorskip("tensorflow")
if not hasattr(tf.data.experimental, "get_model_proto"):
    pytest.skip(
        "no tf.data.experimental.get_model_proto in this TensorFlow", allow_module_level=True
    )

from tests.harness.gpu_like import held_model, measure_step_s, starving_delay_s  # noqa: E402

BATCH = 16
FEATURES = 8
STEPS = 40
HOLD_S = 0.015


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    process = ServerProcess(data_dir=tmp_path_factory.mktemp("stage-names")).start()
    yield process
    process.stop()


def _batch_delay_s(model: Any) -> float:
    """The slow stage's sleep a batch: MARGIN x the held step measured here and now."""
    return starving_delay_s(measure_step_s(model, _rows().batch(BATCH)))


def _xy() -> tuple[np.ndarray, np.ndarray]:
    x = np.random.default_rng(0).normal(size=(STEPS * BATCH, FEATURES)).astype("float32")
    return x, x[:, :1]


def _rows() -> "tf.data.Dataset":
    return tf.data.Dataset.from_tensor_slices(_xy())


def fast_normalize(a: Any, b: Any) -> Any:
    return a * 0.5, b


def _sleeping(delay_s: float, name: str, *, stateful: bool = True) -> Callable[..., Any]:
    def sleep(v: np.ndarray) -> np.ndarray:
        time.sleep(delay_s)
        return v

    def slow(a: Any, b: Any) -> Any:
        out = tf.numpy_function(sleep, [a], a.dtype, stateful=stateful)
        return tf.ensure_shape(out, a.shape), b

    slow.__name__ = name
    return slow


def _threads(ds: "tf.data.Dataset") -> "tf.data.Dataset":
    options = tf.data.Options()
    options.threading.private_threadpool_size = 8  # the threads sleep, not the CPUs
    return ds.with_options(options)


def three_maps(delay_s: float, tmp: Path) -> "tf.data.Dataset":
    """batches().map(fast_normalize).map(slow_decode).map(fast_normalize).prefetch(4)"""
    batches = _rows().batch(BATCH).repeat()
    ds = batches.map(fast_normalize).map(_sleeping(delay_s, "slow_decode")).map(fast_normalize)
    return ds.prefetch(4)


def two_parallel_maps(delay_s: float, tmp: Path) -> "tf.data.Dataset":
    ds = _rows().batch(BATCH).repeat().map(fast_normalize, num_parallel_calls=8)
    ds = ds.map(_sleeping(2 * delay_s, "heavy_augment"), num_parallel_calls=2)
    return _threads(ds.prefetch(2))


def shuffled_map_and_batch(delay_s: float, tmp: Path) -> "tf.data.Dataset":
    ds = _rows().repeat().shuffle(64).map(_sleeping(delay_s / BATCH, "slow_decode"))
    return ds.batch(BATCH).prefetch(2)


def records_then_augment(delay_s: float, tmp: Path) -> "tf.data.Dataset":
    x, _ = _xy()
    paths = []
    for shard in range(2):
        path = str(tmp / f"part-{shard}.tfrecord")
        with tf.io.TFRecordWriter(path) as writer:
            for row in x[shard::2]:
                writer.write(row.tobytes())
        paths.append(path)

    def parse(record: Any) -> Any:
        a = tf.reshape(tf.io.decode_raw(record, tf.float32), [FEATURES])
        return a, a[:1]

    ds = tf.data.TFRecordDataset(paths).repeat().map(parse)
    ds = ds.map(_sleeping(delay_s / BATCH, "augment"))
    return ds.batch(BATCH).prefetch(2)


def zipped_then_slow_map(delay_s: float, tmp: Path) -> "tf.data.Dataset":
    x, y = _xy()
    pair = (tf.data.Dataset.from_tensor_slices(x), tf.data.Dataset.from_tensor_slices(y))
    ds = tf.data.Dataset.zip(pair).repeat().map(_sleeping(delay_s / BATCH, "slow_decode"))
    return ds.batch(BATCH).prefetch(2)


def batch_repeat_serial_map(delay_s: float, tmp: Path) -> "tf.data.Dataset":
    return _rows().batch(BATCH).repeat().map(_sleeping(delay_s, "slow_decode"))


def fused_maps(delay_s: float, tmp: Path) -> "tf.data.Dataset":
    """The three maps with map_fusion on (and stateless functions): tf.data runs one map."""
    slow = _sleeping(delay_s, "slow_decode", stateful=False)
    ds = _rows().batch(BATCH).repeat().map(fast_normalize).map(slow).map(fast_normalize)
    options = tf.data.Options()
    options.experimental_optimization.map_fusion = True
    options.experimental_optimization.map_parallelization = False  # it stays serial
    return ds.with_options(options).prefetch(4)


# name -> (pipeline, the stage kind named, its function(s), the function the advice names,
# what the advice says)
CASES = {
    "three_maps": (three_maps, "map", "slow_decode", "slow_decode", "runs serially"),
    "two_parallel_maps": (
        two_parallel_maps, "parallel_map", "heavy_augment", "heavy_augment",
        # Two threads of a host with more cores, or all of a two-core host's: there the
        # threads at work are read off the run's rate (about 2; 1.8 or 3.1 on a loaded host).
        "runs on 2 threads (num_parallel_calls=2)" if (os.cpu_count() or 1) > 2
        else re.compile(r"already runs in parallel \(about [0-9.]+ threads at work\)"
                        r"|runs on 2 threads \(num_parallel_calls=2\)"),
    ),
    "shuffled_map_and_batch": (
        shuffled_map_and_batch, "map_and_batch", "slow_decode", "slow_decode", "runs serially"
    ),
    "records_then_augment": (
        records_then_augment, "map_and_batch", "augment", "augment", "runs serially"
    ),
    "zipped_then_slow_map": (
        zipped_then_slow_map, "map_and_batch", "slow_decode", "slow_decode", "runs serially"
    ),
    "batch_repeat_serial_map": (
        batch_repeat_serial_map, "map", "slow_decode", "slow_decode", "runs serially"
    ),
    "fused_maps": (
        fused_maps, "map", "fast_normalize+slow_decode+fast_normalize", "slow_decode",
        "calls Python (tf.numpy_function or tf.py_function): start there",
    ),
}  # fmt: skip


@pytest.mark.parametrize("case", list(CASES))
def test_the_slow_stage_is_named_by_the_users_function(
    case: str,
    server: ServerProcess,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from trainer_agent import StokerCallback

    build, kind, function, focus, says = CASES[case]
    monkeypatch.setenv("STOKER_PIPELINE_INTERVAL_S", "0.5")
    callback = StokerCallback(run_name=case, project="stage-names", server=server.url)
    model = held_model(FEATURES, HOLD_S)
    dataset = callback.wrap(build(_batch_delay_s(model), tmp_path))
    model.fit(dataset, epochs=1, steps_per_epoch=STEPS, callbacks=[callback], verbose=0)
    run = wait_for(
        lambda: next(
            (r for r in server.get("/api/v1/runs", project="stage-names")["data"]
             if r["name"] == case and r["status"] == "finished"),
            None,
        ),
        what=f"the run {case} finished",
    )  # fmt: skip
    answer = server.get(f"/api/v1/runs/{run['id']}/pipeline")
    named = answer["bottleneck"]
    assert named is not None, (answer, server.get(f"/api/v1/runs/{run['id']}/diagnosis"))
    assert (named["kind"], named["function"], named["focus"]) == (kind, function, focus), named
    if isinstance(says, re.Pattern):
        assert says.search(named["fix"]), named["fix"]
    else:
        assert says in named["fix"], named["fix"]
    assert f"'{function}'" in named["fix"]
    # Where the function is written, for advice that points at the line to edit.
    written = next(f for f in named["functions"] if f["name"] == focus)
    assert written["file"] == __file__ and written["line"] > 0
    # Stoker's own stage is not the user's: its prefetch is marked, its zip is not listed.
    names = [s["name"] for s in answer["stages"]]
    assert not any(n.startswith("stoker:") and "Prefetch" not in n for n in names), names
    assert all(s["path"].startswith("Iterator::Root::") for s in answer["stages"])
    diagnosis = server.get(f"/api/v1/runs/{run['id']}/diagnosis")
    assert diagnosis["advice"][0] == named["fix"]
    if case == "three_maps":  # the user's three functions, each on its own node
        functions = [s["function"] for s in answer["stages"] if s["function"]]
        assert functions == ["fast_normalize", "slow_decode", "fast_normalize"], functions
    assert os.path.basename(__file__) in named["fix"]  # "at test_stage_names_fit.py:NN"


def test_a_pipeline_in_memory_is_never_told_to_read_files(
    server: ServerProcess, monkeypatch: pytest.MonkeyPatch
) -> None:
    """from_tensor_slices on arrays, a serial map, starved: the advice fits its source, with
    the host idle (as issue 38 saw it) or busy (the host here is whatever it is now)."""
    from stoker_server.diagnosis.advice import input_advice
    from trainer_agent import StokerCallback

    callback = StokerCallback(run_name="in-memory", project="stage-names", server=server.url)
    model = held_model(FEATURES, HOLD_S)
    delay_s = _batch_delay_s(model)
    dataset = _rows().map(_sleeping(delay_s / BATCH, "slow_decode")).batch(BATCH).prefetch(2)
    model.fit(callback.wrap(dataset), epochs=1, callbacks=[callback], verbose=0)
    run = wait_for(
        lambda: next(
            (r for r in server.get("/api/v1/runs", project="stage-names")["data"]
             if r["name"] == "in-memory" and r["status"] == "finished"),
            None,
        ),
        what="the run in-memory finished",
    )  # fmt: skip
    described = server.get(f"/api/v1/runs/{run['id']}")["environment"]["input_pipeline"]
    assert described["source"] == "memory" and described["reads_files"] is False, described
    diagnosis = server.get(f"/api/v1/runs/{run['id']}/diagnosis")
    assert diagnosis["verdict"] == "highly_input_bound", diagnosis
    for advice in (
        diagnosis["advice"],
        input_advice(cpu=20.0, pipeline=described),  # the host idle
        input_advice(cpu=65.0, pipeline=described),
    ):
        text = " ".join(advice)
        assert "file" not in text and "interleave" not in text, advice
        assert "num_parallel_calls" in text, advice
    idle = " ".join(input_advice(cpu=20.0, pipeline=described))
    assert "already in memory" in idle
