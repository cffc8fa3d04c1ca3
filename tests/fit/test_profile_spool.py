"""Profiler captures, beyond one live process: a trace survives its process in the agent's spool and
is delivered later (by the next agent, or `stoker upload`), and a run of two workers is
profiled on both, each uploading its own trace into the one profile."""

import os
import signal
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.harness import faults
from tests.harness.support import REPO, ServerProcess, upload_spool, wait_for

pytest.importorskip("tensorflow")


class Worker:
    """`tests.harness.profile_worker_script` in a child process: a monitored Keras fit until
    told."""

    def __init__(
        self, server: ServerProcess, stop_file: Path, *, fault: str | None = None, **env: str
    ) -> None:
        command = [
            sys.executable, "-m", "tests.harness.profile_worker_script", "--server", server.url,
            "--stop-file", str(stop_file), *(["--fault", fault] if fault else []),
        ]  # fmt: skip
        self.lines: list[str] = []
        self.process = subprocess.Popen(
            command, cwd=REPO, env={**os.environ, **env}, text=True,
            stdout=subprocess.PIPE, stderr=subprocess.PIPE,
        )  # fmt: skip
        self.stderr = ""
        self._readers = [
            threading.Thread(target=self._read, daemon=True),
            threading.Thread(target=self._read_stderr, daemon=True),
        ]
        for reader in self._readers:
            reader.start()

    def _read(self) -> None:
        assert self.process.stdout is not None
        for line in self.process.stdout:
            self.lines.append(line.strip())

    def _read_stderr(self) -> None:
        assert self.process.stderr is not None
        self.stderr = self.process.stderr.read()

    def run_id(self) -> int:
        def announced() -> int | None:
            if self.process.poll() is not None:
                raise AssertionError(f"worker exited: {self.stderr[-3000:]}")
            ids = [int(line.split()[1]) for line in self.lines if line.startswith("run_id ")]
            return ids[0] if ids else None

        return wait_for(announced, timeout_s=120, what="the worker's run id")

    def wait(self) -> str:
        self.process.wait(timeout=120)
        for reader in self._readers:
            reader.join(10)
        assert self.process.returncode == 0, self.stderr[-3000:]
        return self.stderr

    def kill(self) -> None:
        if self.process.poll() is None:
            self.process.kill()
            self.process.wait()


def _profile(server: ServerProcess, run_id: int, pid: int) -> dict[str, Any]:
    return server.get(f"/api/v1/runs/{run_id}/profiles/{pid}")


def _request(server: ServerProcess, run_id: int, steps: int) -> int:
    url = f"{server.url}/api/v1/runs/{run_id}/profiles"
    response = httpx.post(url, json={"steps": steps}, timeout=10)
    assert response.status_code == 202, response.text
    return response.json()["id"]


def _settled(server: ServerProcess, run_id: int, pid: int) -> dict[str, Any]:
    def done() -> dict[str, Any] | None:
        profile = _profile(server, run_id, pid)
        return profile if profile["status"] in ("ready", "failed") else None

    return wait_for(done, timeout_s=180, interval_s=0.2, what=f"profile {pid} to settle")


def _with_stoker_shares(server: ServerProcess, run_id: int, pid: int) -> dict[str, Any] | None:
    profile = _profile(server, run_id, pid)
    shares = [worker["input_share_stoker"] for worker in profile["workers"]]
    return profile if None not in shares else None


def _capturing(server: ServerProcess, worker: Worker, steps: int) -> tuple[int, int]:
    """Once the worker trains, a capture of `steps` requested and started: (run id, pid)."""
    run_id = worker.run_id()
    wait_for(lambda: _steps_stored(server, run_id) >= 20, timeout_s=60, what="steps")
    pid = _request(server, run_id, steps=steps)
    wait_for(lambda: _profile(server, run_id, pid)["status"] == "capturing", timeout_s=60,
             what="the capture to start")  # fmt: skip
    return run_id, pid


def _steps_stored(server: ServerProcess, run_id: int) -> int:
    (count,) = server.rows("SELECT coalesce(sum(n), 0) FROM stepchunk WHERE run_id = ?", run_id)[0]
    return count


def _wait_for_steps_of_ranks(server: ServerProcess, run_id: int, ranks: tuple[int, ...]) -> None:
    """Every worker is connected and training (its steps are stored)."""
    for rank in ranks:
        wait_for(
            lambda rank=rank: len(server.steps(run_id, rank)) >= 20,
            timeout_s=60, what=f"rank {rank}'s steps",
        )  # fmt: skip


def _stop_all(stop: Path, workers: list[Worker]) -> None:
    stop.touch()
    for worker in workers:
        try:
            worker.process.wait(timeout=120)
        finally:
            worker.kill()


def _spooled_traces(spool: Path) -> list[Path]:
    return sorted(spool.glob("*/profiles/*/trace.xplane.pb"))


@pytest.mark.parametrize("delivery", ["next_agent", "stoker_upload"])
def test_trace_spooled_when_the_server_is_away_is_delivered_after_the_process_exits(
    server: ServerProcess, agent_spool_dir: Path, tmp_path: Path, delivery: str
) -> None:
    stop = tmp_path / "stop"
    worker = Worker(server, stop)
    try:
        run_id, pid = _capturing(server, worker, steps=50)
        server.kill()  # the capture ends, and its upload is tried, while the server is away
        traces = wait_for(lambda: _spooled_traces(agent_spool_dir), timeout_s=120,
                          what="the finished trace in the spool")  # fmt: skip
        stop.touch()
        log = worker.wait()  # the training process exits with its trace undelivered
    finally:
        worker.kill()
    assert [path for path in traces if path.exists()] == traces, log[-3000:]
    status_file = traces[0].parent / "status.json"
    assert '"uploading"' in status_file.read_text()
    server.start()
    assert _profile(server, run_id, pid)["status"] == "capturing"  # the premise: not delivered
    if delivery == "stoker_upload":
        upload_spool(agent_spool_dir, server.url)
        profile = _settled(server, run_id, pid)
    else:  # a later agent started with the same spool directory sends what was left
        later_stop = tmp_path / "stop-later"
        later = Worker(server, later_stop)
        try:
            later.run_id()
            profile = _settled(server, run_id, pid)
            later_stop.touch()
            later.wait()
        finally:
            later.kill()
    assert profile["status"] == "ready", profile
    assert profile["workers"] == [
        {**profile["workers"][0], "rank": 0, "status": "ready", "lost": False}
    ]
    assert profile["overhead"]["steps"] == 50 and profile["last_step"] > profile["first_step"]
    trace = httpx.get(f"{server.url}/api/v1/runs/{run_id}/profiles/{pid}/trace", timeout=30)
    assert trace.status_code == 200 and len(trace.content) == profile["trace_bytes"] > 0
    assert profile["analysis"]["available"] and profile["analysis"]["steps"]
    wait_for(lambda: not _spooled_traces(agent_spool_dir), what="the spooled trace deleted")
    assert not list(agent_spool_dir.glob("*/profiles/*"))


def test_two_workers_of_one_run_are_both_profiled_into_one_profile(
    server: ServerProcess, tmp_path: Path
) -> None:
    stop = tmp_path / "stop"
    env = {"STOKER_RUN_KEY": "two-workers-profiled"}
    workers = [Worker(server, stop, **env, STOKER_RANK=str(rank)) for rank in (0, 1)]
    try:
        run_ids = {worker.run_id() for worker in workers}
        assert len(run_ids) == 1  # one run, two connected agents
        run_id = run_ids.pop()
        _wait_for_steps_of_ranks(server, run_id, (0, 1))
        pid = _request(server, run_id, steps=20)
        assert [w["rank"] for w in _profile(server, run_id, pid)["workers"]] == [0, 1]
        profile = _settled(server, run_id, pid)
        if profile["status"] == "ready":  # Stoker's shares come once the steps are stored
            profile = wait_for(
                lambda: _with_stoker_shares(server, run_id, pid), what="Stoker's input shares"
            )
        traces = {
            rank: httpx.get(
                f"{server.url}/api/v1/runs/{run_id}/profiles/{pid}/trace",
                params={"rank": rank}, timeout=30,
            )
            for rank in (0, 1)
        }  # fmt: skip
        default = httpx.get(f"{server.url}/api/v1/runs/{run_id}/profiles/{pid}/trace", timeout=30)
    finally:
        _stop_all(stop, workers)
    assert profile["status"] == "ready", profile
    by_rank = {worker["rank"]: worker for worker in profile["workers"]}
    assert sorted(by_rank) == [0, 1]
    for rank, worker in by_rank.items():
        assert worker["status"] == "ready", worker
        assert worker["overhead"]["steps"] == 20
        assert traces[rank].status_code == 200
        assert len(traces[rank].content) == worker["trace_bytes"] > 0
        assert worker["input_share_profiler"] is not None, profile["analysis"]
        assert worker["input_share_stoker"] is not None
        # Each worker's own trace analysed alone: the steps it captured, not the others'.
        begin, end = worker["analysis"]["step_range"]
        assert worker["first_step"] <= begin <= end <= worker["last_step"], worker
    assert default.content == traces[0].content  # without a rank: the lowest one's
    assert profile["trace_bytes"] == sum(w["trace_bytes"] for w in by_rank.values())
    assert profile["analysis"]["available"] and profile["analysis"]["steps"]
    print(
        "\nmerged analysis:", len(profile["analysis"]["steps"]), "steps, input share",
        profile["input_share_profiler"], "; per worker:",
        {rank: (w["input_share_profiler"], w["input_share_stoker"]) for rank, w in by_rank.items()},
    )  # fmt: skip


def test_two_workers_one_failing_the_profile_is_ready_with_the_other_trace(
    server: ServerProcess, tmp_path: Path
) -> None:
    stop = tmp_path / "stop"
    env = {"STOKER_RUN_KEY": "two-workers-one-fails"}
    workers = [
        Worker(server, stop, **env, STOKER_RANK="0"),
        Worker(server, stop, **env, STOKER_RANK="1", fault=faults.PROFILE_START),
    ]
    try:
        run_id = {worker.run_id() for worker in workers}.pop()
        _wait_for_steps_of_ranks(server, run_id, (0, 1))
        pid = _request(server, run_id, steps=10)
        profile = _settled(server, run_id, pid)
    finally:
        _stop_all(stop, workers)
    assert profile["status"] == "ready", profile
    by_rank = {worker["rank"]: worker for worker in profile["workers"]}
    assert by_rank[0]["status"] == "ready" and by_rank[0]["trace_bytes"] > 0
    assert by_rank[1]["status"] == "failed"
    assert by_rank[1]["error"].startswith("profile failed: InjectedFault")
    assert profile["analysis"]["available"] and profile["error"] is None


def test_exit_waits_for_a_trace_the_server_is_slow_to_take(
    server: ServerProcess, agent_spool_dir: Path, tmp_path: Path
) -> None:
    """The fit ends mid-capture while the server is paused: the process's exit waits for the
    trace as it waits for the steps, so the profile is ready with no later agent."""
    stop = tmp_path / "stop"
    worker = Worker(server, stop)
    try:
        run_id, pid = _capturing(server, worker, steps=200)
        assert server.process is not None
        server.process.send_signal(signal.SIGSTOP)
        try:
            stop.touch()  # training ends during the capture: it stops with what it has
            wait_for(lambda: any("fit ended" in line for line in worker.lines), timeout_s=120,
                     what="the fit to end")  # fmt: skip
        finally:
            server.process.send_signal(signal.SIGCONT)
        log = worker.wait()
    finally:
        worker.kill()
    assert "not delivered yet" not in log, log[-3000:]
    profile = _settled(server, run_id, pid)
    assert profile["status"] == "ready", profile
    assert profile["trace_bytes"] > 0 and profile["overhead"]["steps"] < 200
    assert not list(agent_spool_dir.glob("*/profiles/*"))
