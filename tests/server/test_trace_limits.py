"""Profiler traces against a real server (issue 39): analysed in a child process within a time
and a memory limit, the quota checked before the analysis; a run's traces deleted with it, and
a running run not deletable."""

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.harness.detect_support import ScriptedAgent
from tests.harness.support import ServerProcess, wait_for

TRACE = bytes(range(256)) * 4  # 1 KiB that no converter can read: still, only a child fails


def _profiled(server: ServerProcess, name: str, data: bytes) -> tuple[ScriptedAgent, int, Any]:
    """A live run of 5 steps, profiled with `data` for its trace: (its agent, the profile id,
    the profile once its analysis settled)."""
    agent = ScriptedAgent(server, name=name)
    try:
        agent.steps(5, dur=0.02, wait=0.0)
        pid = _profile_with_trace(server, agent, data)
        return agent, pid, _settled(server, agent.run_id, pid)
    except BaseException:
        agent.close()
        raise


def _profile_with_trace(server: ServerProcess, agent: ScriptedAgent, data: bytes) -> int:
    """Ask the run's agent for a profile, then report and upload its trace as the agent does."""
    base = f"{server.url}/api/v1/runs/{agent.run_id}/profiles"
    created = httpx.post(base, json={"steps": 5})
    assert created.status_code == 202, created.text
    pid = created.json()["id"]
    report = {"status": "uploading", "bytes": len(data), "first_step": 0, "last_step": 4}
    assert httpx.post(f"{base}/{pid}/status", json=report).status_code == 200
    uploaded = httpx.post(
        f"{base}/{pid}/trace",
        params={"offset": 0, "total": len(data)},
        content=data,
        headers={"Content-Type": "application/octet-stream"},
    )
    assert uploaded.status_code == 200, uploaded.text
    return pid


def _settled(server: ServerProcess, run_id: int, pid: int) -> dict[str, Any]:
    def done() -> dict[str, Any] | None:
        profile = server.get(f"/api/v1/runs/{run_id}/profiles/{pid}")
        return profile if profile["status"] in ("ready", "failed") else None

    return wait_for(done, timeout_s=120, what=f"profile {pid} settled")


@pytest.fixture(scope="module")
def limited(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    env = {"STOKER_PROFILE_ANALYSIS_MAX_BYTES": "64MiB", "STOKER_PROFILE_QUOTA_BYTES": "1500"}
    server = ServerProcess(data_dir=tmp_path_factory.mktemp("traces"), env=env).start()
    yield server
    server.stop()


def test_a_trace_over_the_memory_limit_fails_its_child_not_the_server(
    limited: ServerProcess,
) -> None:
    """With 64 MiB of address space xprof's converter aborts (std::bad_alloc): in the server's
    own process that would have ended the server."""
    agent, pid, profile = _profiled(limited, "memory-limited", TRACE)
    try:
        assert profile["status"] == "failed"
        assert "STOKER_PROFILE_ANALYSIS_MAX_BYTES" in profile["error"], profile["error"]
        assert httpx.get(f"{limited.url}/healthz").status_code == 200
        trace = limited.data_dir / "profiles" / str(pid) / "trace.xplane.pb"
        assert trace.exists()  # kept: a failed analysis is no reason to lose the trace

        # A running run cannot be deleted: its next batch would bring a partial copy back.
        refused = httpx.delete(f"{limited.url}/api/v1/runs/{agent.run_id}")
        assert refused.status_code == 409 and "running" in refused.json()["detail"]
        agent.end()
        deleted = httpx.delete(f"{limited.url}/api/v1/runs/{agent.run_id}")
        assert deleted.status_code == 204
        assert not trace.parent.exists()  # the run's traces went with it
        gone = httpx.get(f"{limited.url}/api/v1/runs/{agent.run_id}/profiles/{pid}")
        assert gone.status_code == 404
    finally:
        agent.close()


def test_a_trace_over_the_quota_is_not_analysed(limited: ServerProcess) -> None:
    agent, pid, profile = _profiled(limited, "over-quota", TRACE * 2)  # 2 KiB; quota 1500 B
    try:
        assert profile["status"] == "failed" and profile["trace_evicted"] is True
        assert "over the server's profile quota" in profile["error"]
        assert "not analysed" in profile["error"]
        assert not (limited.data_dir / "profiles" / str(pid)).exists()
    finally:
        agent.close()


def test_an_analysis_over_its_time_is_stopped(tmp_path: Path) -> None:
    server = ServerProcess(
        data_dir=tmp_path, env={"STOKER_PROFILE_ANALYSIS_TIMEOUT_S": "0.01"}
    ).start()
    try:
        agent, _, profile = _profiled(server, "slow-analysis", TRACE)
        agent.close()
        assert profile["status"] == "failed"
        assert "took over 0.01 s" in profile["error"], profile["error"]
    finally:
        server.stop()
