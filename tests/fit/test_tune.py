"""`stoker tune` on real training scripts, against a real `stoker serve` (issue 42).

Each test runs `stoker tune` on tests/examples/tune_fit.py, a script that never mentions
Stoker, with one slow pipeline. The device step is held like a GPU's
(tests/harness/gpu_like.py), and both the hold and the input's delay are derived from steps
measured here: the hold is long next to the step's own overhead, the delay a multiple of the
held step, so the input starves the step on any machine. Each test checks the script file is
unchanged, that every trial's steps took the same elements as the unchanged run's, the
verdicts, and the group the server stored (its trials linked to their runs).

A trial is a process of its own (TensorFlow imported each time): the tests keep their trials
few (`--only` what each proves) and their steps short.
"""

import hashlib
import os
import subprocess
import sys
from dataclasses import dataclass
from typing import Any

import numpy as np
import pytest

from tests.harness.support import REPO, ServerProcess, wait_for

tf = pytest.importorskip("tensorflow")

from tests.harness.gpu_like import MARGIN, held_model, measure_step_s  # noqa: E402
from trainer_agent.tune import inflight  # noqa: E402

SCRIPT = REPO / "tests" / "examples" / "tune_fit.py"
FEATURES, BATCH = 32, 16  # as in the script
STEPS = 20
# The held step is this many times the step's own overhead (the un-held step measured here,
# which the machine's load stretches), and no shorter than HOLD_FLOOR_S.
HOLD_PER_OVERHEAD = 8
HOLD_FLOOR_S = 0.01


@pytest.fixture(scope="module")
def tune_server(shared_server: ServerProcess) -> ServerProcess:
    """The module's server: each test reads only its own project's group."""
    return shared_server


@dataclass(frozen=True)
class Step:
    hold_s: float  # the device hold the script's model gets
    step_s: float  # its step, held, as measured here and now


@pytest.fixture(scope="module")
def step() -> Step:
    """The script's model's step here and now: its overhead without the hold sets the hold,
    and the held step the delays."""
    x = np.random.default_rng(0).normal(size=(20 * BATCH, FEATURES)).astype("float32")
    source = tf.data.Dataset.from_tensor_slices((x, x[:, :1])).batch(BATCH)
    overhead_s = measure_step_s(held_model(FEATURES, 0.0), source)
    hold_s = max(HOLD_FLOOR_S, HOLD_PER_OVERHEAD * overhead_s)
    return Step(hold_s=hold_s, step_s=measure_step_s(held_model(FEATURES, hold_s), source))


def _digest() -> str:
    return hashlib.sha256(SCRIPT.read_bytes()).hexdigest()


def stoker_tune(
    server: ServerProcess,
    pipeline: str,
    delay_s: float,
    *options: str,
    project: str,
    hold_s: float,
    batches: int = 40,
    threads: int = 0,
) -> tuple[str, dict[str, Any]]:
    """Run `stoker tune` on the script; its output and the group the server stored."""
    env = {**os.environ, "PYTHONPATH": str(REPO), "TF_CPP_MIN_LOG_LEVEL": "2",
           "STOKER_SPOOL_DIR": "off"}  # fmt: skip
    command = [
        sys.executable, "-m", "trainer_agent.cli", "tune", "--steps", str(STEPS),
        "--server", server.url, "--project", project, *options, "--",
        sys.executable, str(SCRIPT.relative_to(REPO)), "--pipeline", pipeline,
        "--delay-s", f"{delay_s:.4f}", "--hold-s", f"{hold_s:.4f}", "--batches", str(batches),
        "--threads", str(threads),
    ]  # fmt: skip
    before = _digest()
    done = subprocess.run(command, cwd=REPO, env=env, capture_output=True, text=True,
                          timeout=400)  # fmt: skip
    print(done.stdout, done.stderr)
    assert done.returncode == 0, done.stderr
    assert _digest() == before  # the script file is never touched
    assert "trained: the rest of the script runs too" not in done.stdout
    groups = server.get("/api/v1/tune-groups", project=project)["data"]
    assert len(groups) == 1
    return done.stdout, groups[0]


def _rows(group: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {row["id"]: row for row in group["table"]["rows"]}


def _check_trials(server: ServerProcess, group: dict[str, Any], tried: list[str]) -> None:
    """Every trial is a finished run of the group with N steps, and took the unchanged run's
    elements; the best of those tried ran again."""
    assert group["status"] == "finished"
    rows = _rows(group)
    baseline = rows["unchanged"]
    assert baseline["batches"] == STEPS and baseline["examples"] == STEPS * BATCH
    for change in tried:
        assert rows[change]["batches"] == baseline["batches"]
        assert rows[change]["examples"] == baseline["examples"]
    again = ["repeat"] if tried else []
    assert [t["id"] for t in group["trials"]] == ["unchanged", *tried, *again]

    def linked() -> list[dict[str, Any]]:
        trials = server.get(f"/api/v1/tune-groups/{group['id']}")["trials"]
        done = all(t["run_id"] and t["run_status"] == "finished" for t in trials)
        return trials if done else []

    for trial in wait_for(linked, what="every trial's run stored and finished"):
        run = server.get(f"/api/v1/runs/{trial['run_id']}")
        assert run["tags"] == ["tune"] and run["config"]["tune"]["group"] == group["key"]
        assert run["summary"]["steps"] >= STEPS


def test_tune_parallelizing_a_serial_slow_map_wins_and_points_at_its_line(
    tune_server: ServerProcess, step: Step
) -> None:
    # Each record waits (storage): a serial map feeds a batch in MARGIN steps' time. AUTOTUNE
    # runs as many reads at once as there are cores; the reads leave the CPU idle, so more of
    # them in flight than cores are tried too.
    output, group = stoker_tune(
        tune_server, "serial_map", MARGIN * step.step_s, "--only", "parallel",
        project="tune-serial", hold_s=step.hold_s,
    )  # fmt: skip
    rows = _rows(group)
    row = rows["parallel:1"]
    assert row["verdict"] == "speed-up" and row["function"] == "read_record"
    assert row["speedup"] > 1
    assert row["edit"]["where"].startswith("tests/examples/tune_fit.py:")
    assert row["edit"]["before"] == ".map(read_record)"
    assert row["edit"]["after"] == (
        ".map(read_record, num_parallel_calls=tf.data.AUTOTUNE, deterministic=True)"
    )
    calls = inflight.calls_in_flight()
    waits = rows["inflight:1"]
    assert waits["verdict"] == "speed-up" and waits["speedup"] > 1
    assert waits["label"] == f"map read_record, {calls} calls in flight"
    assert waits["note"].startswith("read_record waits: ")
    assert waits["note"].endswith("So: more calls in flight than cores")
    unbounded = ", use_unbounded_threadpool=True" if inflight.has_unbounded_threadpool() else ""
    assert waits["edit"]["where"] == row["edit"]["where"]  # the same line, another value
    assert waits["edit"]["after"] == (
        f".map(read_record, num_parallel_calls={calls}, deterministic=True{unbounded})"
    )
    assert group["table"]["best"] in ("parallel:1", "inflight:1")
    best = rows[group["table"]["best"]]
    assert best["repeat_speedup"] > 1
    assert f"{best['edit']['where']}  .map(read_record)" in output
    assert rows["prefetch"]["verdict"] == "not tried"  # tf.data appends one itself
    _check_trials(tune_server, group, ["parallel:1", "inflight:1"])


def test_tune_a_missing_prefetch_is_added_and_wins(tune_server: ServerProcess, step: Step) -> None:
    # The last stage decodes each batch for a step's time, and nothing prefetches (the script
    # turned tf.data's autotuning off): decoding and the step take turns.
    _, group = stoker_tune(
        tune_server, "no_prefetch", step.step_s, "--only", "prefetch", project="tune-prefetch",
        hold_s=step.hold_s,
    )  # fmt: skip
    rows = _rows(group)
    assert rows["prefetch"]["verdict"] == "speed-up"
    assert rows["prefetch"]["edit"]["after"] == ".map(decode_batch).prefetch(tf.data.AUTOTUNE)"
    assert rows["autotune"]["verdict"] == "not asked"
    _check_trials(tune_server, group, ["prefetch"])


def test_tune_a_gil_bound_python_map_gains_little_and_says_what_would(
    tune_server: ServerProcess, step: Step
) -> None:
    # Each record is parsed in Python holding the GIL: threads take turns, whatever their count.
    # The script gives tf.data as many threads as calls in flight Stoker would try: AUTOTUNE
    # may run that many at once. Whether that gains nothing, or a little (on a loaded machine
    # the calls' own overhead, which parallel calls overlap, grows: 1.19x on CI's), the GIL
    # holds the training thread up while the calls take it, and Stoker says so either way.
    calls = inflight.calls_in_flight()
    output, group = stoker_tune(
        tune_server, "python_map", 2 * MARGIN * step.step_s, "--only", "parallel",
        project="tune-gil", hold_s=step.hold_s, threads=calls,
    )  # fmt: skip
    rows = _rows(group)
    row = rows["parallel:1"]
    for said in ("parse_in_python runs Python", "GIL", "TF ops", "more processes",
                 "tf.data service"):  # fmt: skip
        assert said in row["note"], row
        assert said.split()[-1] in output
    assert group["table"]["noise"] >= 0.05
    if row["verdict"] == "speed-up":
        assert "each step's own time grew" in row["note"]  # the wait moved into the step
        assert "parse_in_python is held back by the GIL" in output
    else:
        assert row["verdict"] in ("no measurable gain", "slower")
        assert group["table"]["best"] is None
        assert "No change Stoker tried gains more than the noise" in output
    assert rows["inflight:1"]["verdict"] == "not tried"
    assert f"runs up to {calls} calls of parse_in_python" in rows["inflight:1"]["note"]
    _check_trials(tune_server, group, ["parallel:1"])


def test_tune_never_caches_after_a_random_augmentation(
    tune_server: ServerProcess, step: Step
) -> None:
    # Only the cache is asked for, and it is not tried: the unchanged run alone. (Rebuilding
    # a pipeline that draws random numbers keeps its elements: test_tune_rewrites.py.)
    output, group = stoker_tune(
        tune_server, "random_augment", MARGIN * step.step_s, "--only", "cache",
        project="tune-random", hold_s=step.hold_s,
    )  # fmt: skip
    rows = _rows(group)
    cache = rows["cache"]
    assert cache["verdict"] == "not tried"
    assert "map augment (stage 1) draws random numbers (RandomUniform)" in cache["note"]
    parallel = rows["parallel:1"]
    assert parallel["verdict"] == "not asked"
    assert "other random values" in parallel["keeps"]
    assert "Nothing to try of what --only asked for" in output
    _check_trials(tune_server, group, [])


def test_tune_says_why_it_cannot_tune_a_fit_that_brings_its_own_callback(
    tune_server: ServerProcess,
) -> None:
    env = {**os.environ, "PYTHONPATH": str(REPO), "TF_CPP_MIN_LOG_LEVEL": "2",
           "STOKER_SPOOL_DIR": "off"}  # fmt: skip
    script = REPO / "tests" / "examples" / "own_callback_fit.py"
    command = [
        sys.executable, "-m", "trainer_agent.cli", "tune", "--steps", "10",
        "--server", tune_server.url, "--project", "tune-own", "--", sys.executable, str(script),
    ]  # fmt: skip
    done = subprocess.run(command, cwd=REPO, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 1
    assert "passes its own StokerCallback" in done.stdout
    assert "run the script without that callback" in done.stdout
    group = tune_server.get("/api/v1/tune-groups", project="tune-own")["data"][0]
    assert group["status"] == "failed"
    assert "passes its own StokerCallback" in group["table"]["error"]


def test_tune_tries_steps_per_execution_on_short_fed_steps(tune_server: ServerProcess) -> None:
    # Records in memory, a 1 ms step: nothing waits, and each call of the train function costs
    # the host more than the step. Whether fewer calls win here depends on this machine's load;
    # what is checked is that the change runs the same batches, measured after its first call.
    _, group = stoker_tune(
        tune_server, "fed", 0.0, "--only", "steps_per_execution", project="tune-spe",
        hold_s=0.001,
    )  # fmt: skip
    row = _rows(group)["steps_per_execution"]
    assert row["label"].startswith("steps_per_execution=")
    assert row["verdict"] in ("speed-up", "no measurable gain", "slower")
    _check_trials(tune_server, group, ["steps_per_execution"])


def test_tune_caches_a_deterministic_slow_load_and_it_wins_after_the_first_epoch(
    tune_server: ServerProcess, step: Step
) -> None:
    # Its loader is declared stateless (so tf.data runs it in parallel already, as many loads
    # at once as there are cores) and 4 batches make an epoch: from the fifth step on, a cache
    # serves them from memory. The load is long enough that the cache still wins by more than
    # the noise its two runs measure when the machine's load doubles the step in one of them
    # (a loaded CI run: 36.8 and 21.5 steps/s, 13.5 unchanged, with a load of 2 x MARGIN).
    _, group = stoker_tune(
        tune_server, "stateless_load", 4 * MARGIN * step.step_s, "--only", "cache",
        project="tune-cache", hold_s=step.hold_s, batches=4,
    )  # fmt: skip
    rows = _rows(group)
    cache = rows["cache:1"]
    assert cache["title"] == "cache() after map load_record"
    assert cache["verdict"] == "speed-up"
    assert cache["edit"]["after"] == ".map(load_record).cache()"
    assert "already in effect" in rows["parallel:1"]["note"]  # tf.data's map_parallelization
    _check_trials(tune_server, group, ["cache:1"])
