"""Server outage mid-training: training never blocks, every step arrives exactly once."""

import subprocess
import sys
import time
from pathlib import Path

from tests.support import REPO, ServerProcess, wait_for

BATCHES = 120


def test_server_outage_mid_run_loses_and_duplicates_nothing(
    server: ServerProcess, agent_spool_dir: Path
) -> None:
    training = subprocess.Popen(
        [sys.executable, "-m", "tests.train_script", "--server", server.url, "--name", "outage",
         "--epochs", "1", "--batches", str(BATCHES), "--batch-delay-s", "0.1"],
        cwd=REPO,
    )  # fmt: skip
    try:

        def some_steps_stored() -> bool:
            runs = server.get("/api/v1/runs")["data"]
            return bool(runs) and runs[0]["summary"]["steps"] >= 10

        wait_for(some_steps_stored, timeout_s=90, what="steps before the outage")
        server.stop()
        outage_started = time.monotonic()
        # The outage itself: the server stays down while training goes on.
        time.sleep(4.0)
        assert training.poll() is None, "training must not stop or fail when the server is down"
        server.start()
        outage_s = time.monotonic() - outage_started
        assert training.wait(timeout=180) == 0
    finally:
        if training.poll() is None:
            training.kill()

    run = server.get("/api/v1/runs")["data"][0]
    wait_for(
        lambda: server.get(f"/api/v1/runs/{run['id']}")["status"] == "finished",
        timeout_s=30,
        what="the run to finish",
    )
    series = server.get(f"/api/v1/runs/{run['id']}/steps", max_points=10_000)
    assert series["step"] == list(range(BATCHES))
    assert server.get(f"/api/v1/runs/{run['id']}")["summary"]["steps"] == BATCHES
    # Everything spooled during the outage was delivered: nothing is left for `stoker upload`
    # (which would take a leftover run for one that never ended).
    assert agent_spool_dir.is_dir(), "the outage should have been spooled"
    assert list(agent_spool_dir.iterdir()) == []
    # Steps taken while the server was down kept their pace: no step waited for the network.
    slowest_s = max(series["dur"][1:])
    assert slowest_s < outage_s, f"a step took {slowest_s:.2f}s: training blocked on the outage"
