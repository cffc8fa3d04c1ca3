"""Transport robustness: disk spool and replay, `stoker upload` and the background upload
(a refused batch included), HTTP fallback, exit status."""

import json
import logging
import os
import subprocess
import sys
import uuid
from pathlib import Path
from typing import Any

import pytest

from tests.harness.support import REPO, ServerProcess, free_port, upload_spool, wait_for
from trainer_agent.delivery.spool import Spool
from trainer_agent.delivery.upload import start_background_upload


def _loop(server_url: str, *args: str, env: dict[str, str] | None = None) -> list[str]:
    return [sys.executable, "-m", "tests.harness.loop_script", "--server", server_url, *args]


def _spooled_batches(spool_dir: Path) -> list[Path]:
    return sorted(spool_dir.glob("*/batches/*.json"))


def test_spool_keeps_batches_in_seq_order_and_refuses_beyond_cap(tmp_path: Path) -> None:
    spool = Spool(tmp_path / "run", max_bytes=400)
    hello = {"type": "hello", "run_key": "k" * 12}
    batch = {"type": "batch", "steps": {"step": [0], "t": [1.0], "dur": [0.1]}}
    assert all(spool.add(hello, {**batch, "seq": seq}) for seq in (2, 1, 10))
    assert [Spool.load(p)["seq"] for p in spool.batch_paths()] == [1, 2, 10]
    big = {**batch, "seq": 11, "steps": {"step": list(range(100)), "t": [1.0] * 100}}
    assert spool.add(hello, big) is False
    spool.remove(spool.batch_paths()[0])
    assert [Spool.load(p)["seq"] for p in spool.batch_paths()] == [2, 10]


def test_server_down_then_up_spools_and_replays_every_step_in_order(
    tmp_path: Path, agent_spool_dir: Path
) -> None:
    server = ServerProcess(data_dir=tmp_path / "server", port=free_port())
    stop = tmp_path / "stop"
    child = subprocess.Popen(
        _loop(server.url, "--stop-file", str(stop), "--step-s", "0.02"), cwd=REPO
    )
    try:
        wait_for(lambda: _spooled_batches(agent_spool_dir), timeout_s=60, what="spooled batches")
        server.start()
        wait_for(
            lambda: (
                server.get("/api/v1/runs")["count"] == 1 and not _spooled_batches(agent_spool_dir)
            ),
            timeout_s=60,
            what="the spool replayed",
        )
        stop.touch()
        assert child.wait(timeout=60) == 0
        run = server.get("/api/v1/runs")["data"][0]
        assert run["status"] == "finished"
        series = server.get(f"/api/v1/runs/{run['id']}/steps", max_points=100_000)
        assert series["step"] == list(range(run["summary"]["steps"]))
        assert run["summary"]["steps"] > 10
        assert run["summary"]["dropped_rows"] == 0
    finally:
        stop.touch()
        child.wait(timeout=60)
        server.stop()


def test_exit_with_server_down_leaves_spool_that_upload_sends(
    tmp_path: Path, agent_spool_dir: Path
) -> None:
    server = ServerProcess(data_dir=tmp_path / "server", port=free_port())
    result = subprocess.run(
        _loop(server.url, "--steps", "30", "--step-s", "0.01"),
        cwd=REPO, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    assert "stoker upload" in result.stderr
    (run_dir,) = [p for p in agent_spool_dir.iterdir() if p.is_dir()]
    assert json.loads((run_dir / "end.json").read_text())["status"] == "finished"

    server.start()
    try:
        upload_spool(agent_spool_dir, server.url)
        run = server.get("/api/v1/runs")["data"][0]
        assert run["status"] == "finished"
        assert run["summary"]["steps"] == 30
        series = server.get(f"/api/v1/runs/{run['id']}/steps")
        assert series["step"] == list(range(30))
        assert not run_dir.exists()
    finally:
        server.stop()


def test_spool_cap_reached_counts_dropped_rows_in_the_run(
    tmp_path: Path, agent_spool_dir: Path
) -> None:
    server = ServerProcess(data_dir=tmp_path / "server", port=free_port())
    env = {**os.environ, "STOKER_SPOOL_MAX_BYTES": "2500"}
    result = subprocess.run(
        _loop(server.url, "--steps", "200", "--step-s", "0.005"),
        cwd=REPO, env=env, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    server.start()
    try:
        upload_spool(agent_spool_dir, server.url)
        run = server.get("/api/v1/runs")["data"][0]
        assert run["summary"]["steps"] < 200
        assert run["summary"]["dropped_rows"] > 0
    finally:
        server.stop()


def test_http_transport_delivers_every_step(server: ServerProcess) -> None:
    env = {**os.environ, "STOKER_TRANSPORT": "http"}
    result = subprocess.run(
        _loop(server.url, "--steps", "25", "--step-s", "0.01"),
        cwd=REPO, env=env, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    run = server.get("/api/v1/runs")["data"][0]
    assert run["status"] == "finished"
    assert server.get(f"/api/v1/runs/{run['id']}/steps")["step"] == list(range(25))
    assert server.rows("SELECT COUNT(*) FROM hostsample")[0][0] >= 1


def test_fit_that_raises_ends_the_run_as_failed(server: ServerProcess) -> None:
    result = subprocess.run(
        [sys.executable, "-m", "tests.harness.train_script", "--server", server.url, "--name",
         "boom", "--epochs", "1", "--batches", "20", "--fail-at-batch", "12"],
        cwd=REPO, capture_output=True, text=True, timeout=180,
    )  # fmt: skip
    assert result.returncode != 0
    assert "loss diverged" in result.stderr
    run = server.get("/api/v1/runs")["data"][0]
    assert run["status"] == "failed"
    assert run["summary"]["steps"] >= 11


def _spool_run(spool_dir: Path, server_url: str, name: str, batches: list[dict[str, Any]]) -> Path:
    """A run an earlier process spooled for `server_url` and ended cleanly."""
    hello = {"type": "hello", "protocol": 1, "run_key": uuid.uuid4().hex, "name": name}
    spool = Spool(spool_dir / hello["run_key"], server=server_url)
    for batch in batches:
        assert spool.add(hello, batch)
    spool.write_end(hello, "finished", {"dropped_rows": 0, "spooled_rows": 1}, len(batches) + 1)
    spool.release()
    return spool.directory


def test_background_upload_drops_a_spooled_batch_the_server_refuses_and_ends(
    server: ServerProcess, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A batch the server refuses (422: invalid, retrying cannot help) is dropped and said, as
    the live sender does; the uploader does not retry it every 5-300 s for as long as the
    process lives (it did: the next agent's `stoker-upload` thread never ended)."""
    spool_dir = tmp_path / "left-behind"
    steps = {"step": [0, 1], "t": [1.0, 2.0], "dur": [0.1, 0.1]}
    good = _spool_run(spool_dir, server.url, "good", [{"type": "batch", "seq": 1, "steps": steps}])
    bad = _spool_run(spool_dir, server.url, "bad", [{"type": "batch", "seq": 1, "bogus": 1}])
    with caplog.at_level(logging.WARNING, logger="trainer_agent"):
        thread = start_background_upload(spool_dir, server=server.url, token=None)
        assert thread is not None
        thread.join(timeout=30)
        assert not thread.is_alive(), "the uploader is still retrying a refused batch"
    assert not good.exists() and not bad.exists()
    refused = [r.getMessage() for r in caplog.records if "the server refused" in r.getMessage()]
    assert len(refused) == 1 and f"batches 1-1 of the run spooled in {bad}" in refused[0]
    assert "bogus" in refused[0]  # the server's reason
    runs = {run["name"]: run for run in server.get("/api/v1/runs")["data"]}
    assert runs["good"]["summary"]["steps"] == 2 and runs["good"]["status"] == "finished"
    assert runs["bad"]["summary"]["steps"] == 0 and runs["bad"]["status"] == "finished"
