"""Two real workers of a `MultiWorkerMirroredStrategy` job on loopback, each in its own
process: a tf.keras fit with `StokerCallback` (the callback once crashed both on
`int(MirroredVariable)`), or a custom loop with `strategy.run` and `Monitor`. The workers of
one job report into one run, with each rank's steps, and a worker whose pipeline starves
the job is named by the diagnosis."""

import importlib.util
import json
import os
import subprocess
import sys
from typing import Any

import pytest

from tests.conftest import require
from tests.harness.support import REPO, ServerProcess, free_port, wait_for

pytest.importorskip("tensorflow")

EPOCHS = 2
BATCHES = 8  # global batches per epoch
STEPS_PER_EXECUTION = 2  # as the script compiles the model
WORKERS = 2


def _run_workers(
    server: ServerProcess, env: dict[str, str], *options: str, legacy_keras: bool = True
) -> list[dict[str, Any]]:
    """Start every worker, wait for all, and return what each printed."""
    addresses = ",".join(f"127.0.0.1:{free_port()}" for _ in range(WORKERS))
    env = {**os.environ, **env}
    env.pop("TF_USE_LEGACY_KERAS", None)
    if legacy_keras and not _keras2_builtin():
        env["TF_USE_LEGACY_KERAS"] = "1"
    command = [
        sys.executable, "-m", "tests.harness.multiworker_script", "--server", server.url,
        "--workers", addresses, "--epochs", str(EPOCHS), "--batches", str(BATCHES), *options,
    ]  # fmt: skip
    workers = [
        subprocess.Popen(
            [*command, "--index", str(index)],
            cwd=REPO,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for index in range(WORKERS)
    ]
    outputs = []
    try:
        for worker in workers:
            stdout, stderr = worker.communicate(timeout=180)
            assert worker.returncode == 0, stderr[-3000:]
            outputs.append({**json.loads(stdout.strip().splitlines()[-1]), "stderr": stderr})
    finally:
        for worker in workers:
            if worker.poll() is None:
                worker.kill()
                worker.wait()
    return outputs


def _keras2_builtin() -> bool:
    """TensorFlow before 2.16 brings Keras 2 as tf.keras; later ones need tf_keras for it."""
    import tensorflow as tf

    return tuple(int(part) for part in tf.__version__.split(".")[:2]) < (2, 16)


def _tf_keras() -> None:
    """Keras 2 for `fit`: TensorFlow's own tf.keras before 2.16, the tf_keras package after."""
    if _keras2_builtin():
        return
    require(importlib.util.find_spec("tf_keras") is not None, "tf_keras (the dev extra)")


def _one_ended_run(server: ServerProcess, status: str) -> dict[str, Any]:
    """The only run on the server, once it ended with `status`."""

    def ended() -> dict[str, Any] | None:
        runs = server.get("/api/v1/runs")["data"]
        assert len(runs) <= 1, [(r["id"], r["environment"].get("rank")) for r in runs]
        return runs[0] if runs and runs[0]["status"] == status else None

    return wait_for(ended, what=f"the job's run {status}")


@pytest.mark.tf_oldest  # also on TF 2.15's tf.keras: make test-tf-matrix
def test_two_worker_tf_keras_fit_is_one_run_with_both_ranks_steps(
    server: ServerProcess,
) -> None:
    _tf_keras()
    outputs = _run_workers(server, {})
    for output in outputs:
        assert output["keras"] == ("keras" if _keras2_builtin() else "tf_keras")  # Keras 2
        assert output["steps_per_execution"] == "MirroredVariable"  # the value that crashed
        assert output["epochs"] == EPOCHS
        assert output["batches"] == EPOCHS * BATCHES // STEPS_PER_EXECUTION
        assert "agent disabled" not in output["stderr"]

    run = _one_ended_run(server, "finished")
    assert run["environment"]["steps_per_execution"] == STEPS_PER_EXECUTION
    assert run["environment"]["replicas"] == WORKERS
    assert run["environment"]["world_size"] == WORKERS
    steps = EPOCHS * BATCHES
    assert run["summary"]["steps"] == steps  # the job's steps: one worker's, not the sum
    workers = run["summary"]["workers"]
    assert [(w["rank"], w["status"], w["steps"]) for w in workers] == [
        (rank, "finished", steps) for rank in range(WORKERS)
    ]
    assert {w["pid"] for w in workers} == {o["pid"] for o in outputs}
    for rank in range(WORKERS):
        series = server.get(f"/api/v1/runs/{run['id']}/steps", rank=rank)
        assert series["step"] == list(range(steps))


@pytest.mark.tf_oldest  # also on TF 2.15's tf.keras: make test-tf-matrix
def test_two_worker_fit_with_a_fault_in_the_batch_hook_finishes_as_without_the_agent(
    server: ServerProcess,
) -> None:
    _tf_keras()
    outputs = _run_workers(server, {}, "--fault", "on_train_batch_begin")
    for output in outputs:
        assert output["epochs"] == EPOCHS
        assert output["batches"] == EPOCHS * BATCHES // STEPS_PER_EXECUTION
        assert output["stderr"].count("agent disabled") == 1

    run = _one_ended_run(server, "interrupted")
    assert [w["status"] for w in run["summary"]["workers"]] == ["interrupted"] * WORKERS


@pytest.mark.tf_oldest  # also on TF 2.15's tf.keras: make test-tf-matrix
def test_two_worker_custom_loop_with_strategy_run_and_monitor_is_one_run(
    server: ServerProcess,
) -> None:
    outputs = _run_workers(server, {}, "--loop", "custom", legacy_keras=False)
    for output in outputs:
        assert output["batches"] == EPOCHS * BATCHES
    run = _one_ended_run(server, "finished")
    assert run["name"] == "multiworker-loop"
    assert run["summary"]["steps"] == EPOCHS * BATCHES
    assert [(w["rank"], w["steps"]) for w in run["summary"]["workers"]] == [
        (rank, EPOCHS * BATCHES) for rank in range(WORKERS)
    ]
    assert run["summary"]["epoch_metrics"]["loss"]["epochs"] == EPOCHS
    for rank in range(WORKERS):
        series = server.get(f"/api/v1/runs/{run['id']}/steps", rank=rank)
        assert series["step"] == list(range(EPOCHS * BATCHES))


def test_worker_with_a_starving_pipeline_is_named_as_the_straggler(
    server: ServerProcess,
) -> None:
    _tf_keras()
    slow = 1
    outputs = _run_workers(
        server, {}, "--slow-rank", str(slow), "--steps-per-execution", "1", "--epochs", "1",
        "--batches", "24",
    )  # fmt: skip
    delay_s = outputs[slow]["delay_s"]
    print(f"measured steps {[o['measured_step_s'] for o in outputs]} s, delay {delay_s} s")
    assert delay_s >= 3 * outputs[slow]["measured_step_s"]
    run = _one_ended_run(server, "finished")
    workers = {w["rank"]: w for w in run["summary"]["workers"]}
    print({r: (w["input_wait_share"], w["step_time_ms_median"]) for r, w in workers.items()})
    assert workers[slow]["input_wait_share"] > 3 * workers[1 - slow]["input_wait_share"]
    diagnosis = server.get(f"/api/v1/runs/{run['id']}/diagnosis")
    evidence = {e["key"]: e for e in diagnosis["evidence"]}
    assert evidence["straggler"]["value"] == slow, diagnosis
    assert evidence["straggler"]["text"].startswith(f"worker {slow} (")
    assert "its pipeline starves the whole job" in evidence["straggler"]["text"]
