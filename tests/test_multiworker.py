"""Two real workers of a `MultiWorkerMirroredStrategy` job on loopback, each a tf.keras fit
with `StokerCallback` in its own process (issue 18: the callback crashed both on
`int(MirroredVariable)`). Each worker is its own run for now, one per rank."""

import importlib.util
import json
import os
import subprocess
import sys
from typing import Any

import pytest

from tests.conftest import require
from tests.support import REPO, ServerProcess, free_port, wait_for
from trainer_agent.guard import FAULT_ENV

pytest.importorskip("tensorflow")

EPOCHS = 2
BATCHES = 8  # global batches per epoch
STEPS_PER_EXECUTION = 2  # as the script compiles the model
WORKERS = 2


def _run_workers(server: ServerProcess, env: dict[str, str]) -> list[dict[str, Any]]:
    """Start every worker, wait for all, and return what each printed."""
    addresses = ",".join(f"127.0.0.1:{free_port()}" for _ in range(WORKERS))
    env = {**os.environ, "TF_USE_LEGACY_KERAS": "1", **env}
    command = [
        sys.executable, "-m", "tests.multiworker_script", "--server", server.url,
        "--workers", addresses, "--epochs", str(EPOCHS), "--batches", str(BATCHES),
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


@pytest.fixture(autouse=True)
def _tf_keras() -> None:
    require(importlib.util.find_spec("tf_keras") is not None, "tf_keras (the dev extra)")


def test_two_worker_tf_keras_fit_with_stoker_finishes_and_reports_each_ranks_steps(
    server: ServerProcess,
) -> None:
    outputs = _run_workers(server, {})
    for output in outputs:
        assert output["keras"] == "tf_keras"
        assert output["steps_per_execution"] == "MirroredVariable"  # the value that crashed
        assert output["epochs"] == EPOCHS
        assert output["batches"] == EPOCHS * BATCHES // STEPS_PER_EXECUTION
        assert "agent disabled" not in output["stderr"]

    def ended() -> list[dict[str, Any]] | None:
        runs = server.get("/api/v1/runs")["data"]
        done = len(runs) == WORKERS and all(run["status"] == "finished" for run in runs)
        return runs if done else None

    runs = wait_for(ended, what="both workers' runs finished")
    assert sorted(run["environment"]["rank"] for run in runs) == list(range(WORKERS))
    for run in runs:
        assert run["environment"]["steps_per_execution"] == STEPS_PER_EXECUTION
        assert run["environment"]["replicas"] == WORKERS
        rank = run["environment"]["rank"]
        series = server.get(f"/api/v1/runs/{run['id']}/steps", rank=rank)
        assert series["step"] == list(range(EPOCHS * BATCHES))


def test_two_worker_fit_with_a_fault_in_the_batch_hook_finishes_as_without_the_agent(
    server: ServerProcess,
) -> None:
    outputs = _run_workers(server, {FAULT_ENV: "on_train_batch_begin"})
    for output in outputs:
        assert output["epochs"] == EPOCHS
        assert output["batches"] == EPOCHS * BATCHES // STEPS_PER_EXECUTION
        assert output["stderr"].count("agent disabled") == 1

    def ended() -> bool:
        runs = server.get("/api/v1/runs")["data"]
        return len(runs) == WORKERS and all(run["status"] == "interrupted" for run in runs)

    wait_for(ended, what="both workers' runs ended as interrupted")
