"""One run per job on a real server: scripted workers (real WebSocket, real database) that
share a run key attach to one run in any order, rejoin it, count the job's steps once, end it
with the last of them, and a worker whose input starves the job is named and alerted on."""

import uuid
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from tests.harness.detect_support import FAST_DETECTORS, ScriptedAgent
from tests.harness.support import ServerProcess, wait_for


@pytest.fixture(
    scope="module", params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)]
)
def job_server(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[ServerProcess]:
    """One server per database for the module; each test keeps to its own run key."""
    data_dir = tmp_path_factory.mktemp(f"jobs-{request.param}")
    if request.param == "sqlite":
        url = f"sqlite:///{data_dir / 'stoker.db'}"
    else:
        url = request.getfixturevalue("postgres_server").create_database()
    env = {**FAST_DETECTORS, "STOKER_DATABASE_URL": url}
    process = ServerProcess(data_dir=data_dir, env=env).start()
    yield process
    process.stop()


def _workers(server: ServerProcess, key: str, ranks: list[int]) -> list[ScriptedAgent]:
    """Workers of one job, joining in the order of `ranks`, rank r on host h<r>."""
    return [ScriptedAgent(server, name="job", run_key=key, rank=r, host=f"host-{r}") for r in ranks]


def _run(server: ServerProcess, run_id: int) -> dict[str, Any]:
    return server.get(f"/api/v1/runs/{run_id}")


def test_workers_joining_in_any_order_share_one_run_listing_each_worker(
    job_server: ServerProcess,
) -> None:
    key = uuid.uuid4().hex
    late_first = _workers(job_server, key, [1, 2, 0])
    try:
        assert len({agent.run_id for agent in late_first}) == 1
        run = _run(job_server, late_first[0].run_id)
        workers = run["summary"]["workers"]
        assert [(w["rank"], w["host"], w["status"]) for w in workers] == [
            (0, "host-0", "running"), (1, "host-1", "running"), (2, "host-2", "running"),
        ]  # fmt: skip
        found = job_server.get("/api/v1/runs", q="job")["data"]
        assert [r["id"] for r in found].count(run["id"]) == 1
    finally:
        for agent in late_first:
            agent.close()


def test_job_step_count_is_one_workers_and_each_ranks_steps_are_kept(
    job_server: ServerProcess,
) -> None:
    agents = _workers(job_server, uuid.uuid4().hex, [0, 1])
    try:
        agents[0].steps(30, dur=0.02, wait=0.001)
        agents[1].steps(28, dur=0.03, wait=0.002)  # one worker a little behind
        run = _run(job_server, agents[0].run_id)
        assert run["summary"]["steps"] == 30  # the job's, not the sum (58)
        by_rank = {w["rank"]: w for w in run["summary"]["workers"]}
        assert (by_rank[0]["steps"], by_rank[1]["steps"]) == (30, 28)
        assert by_rank[0]["step_time_ms_median"] == pytest.approx(20, rel=0.02)
        assert by_rank[1]["step_time_ms_median"] == pytest.approx(30, rel=0.02)
        # Shares are sent as every surface shows them: to a tenth of a percent.
        assert by_rank[1]["input_wait_share"] == round(0.002 / 0.03, 3)
        for rank, count in ((0, 30), (1, 28)):
            series = job_server.get(f"/api/v1/runs/{agents[0].run_id}/steps", rank=rank)
            assert series["step"] == list(range(count))
    finally:
        for agent in agents:
            agent.close()


def test_run_ends_with_its_last_worker(job_server: ServerProcess) -> None:
    agents = _workers(job_server, uuid.uuid4().hex, [0, 1])
    agents[0].steps(5, dur=0.02, wait=0.0)
    agents[1].steps(5, dur=0.02, wait=0.0)
    agents[1].end("finished")
    run = _run(job_server, agents[0].run_id)
    assert run["status"] == "running" and run["ended_at"] is None
    assert [w["status"] for w in run["summary"]["workers"]] == ["running", "finished"]
    agents[0].end("finished")
    run = _run(job_server, agents[0].run_id)
    assert run["status"] == "finished" and run["ended_at"] is not None
    for agent in agents:
        agent.close()


@pytest.mark.parametrize(
    ("endings", "status"),
    [
        (["failed", "finished", "interrupted"], "failed"),
        (["finished", "interrupted", "finished"], "interrupted"),
    ],
)
def test_ended_job_failed_if_any_worker_failed_else_interrupted_if_any_was(
    job_server: ServerProcess, endings: list[str], status: str
) -> None:
    agents = _workers(job_server, uuid.uuid4().hex, [0, 1, 2])
    for agent, ending in zip(agents, endings, strict=True):
        agent.end(ending)
        agent.close()
    run = _run(job_server, agents[0].run_id)
    assert run["status"] == status
    assert [w["status"] for w in run["summary"]["workers"]] == endings


def test_restarted_worker_rejoins_its_run_and_resumes_its_stream(
    job_server: ServerProcess,
) -> None:
    key = uuid.uuid4().hex
    first, second = _workers(job_server, key, [0, 1])
    second.steps(10, dur=0.02, wait=0.0)
    second.close()  # killed: no end
    restarted = ScriptedAgent(job_server, name="job", run_key=key, rank=1, host="host-1")
    try:
        assert restarted.run_id == first.run_id
        assert restarted.last_seq == second.seq  # its stream resumes where it stopped
        restarted.step = 10
        restarted.steps(10, dur=0.02, wait=0.0)
        first.steps(20, dur=0.02, wait=0.0)
        run = _run(job_server, first.run_id)
        assert run["summary"]["steps"] == 20
        assert [w["steps"] for w in run["summary"]["workers"]] == [20, 20]
        series = job_server.get(f"/api/v1/runs/{first.run_id}/steps", rank=1)
        assert series["step"] == list(range(20))
    finally:
        first.close()
        restarted.close()


def test_starved_worker_is_named_in_the_diagnosis_and_fires_a_straggler_ratio_rule(
    job_server: ServerProcess,
) -> None:
    agents = _workers(job_server, uuid.uuid4().hex, [0, 1, 2])
    run_id = agents[0].run_id
    rule = httpx.post(
        f"{job_server.url}/api/v1/alert-rules",
        json={
            "name": "a straggler", "metric": "straggler_ratio", "comparison": ">",
            "threshold": 1.2, "scope": "run", "run_id": run_id,
        },
    )  # fmt: skip
    assert rule.status_code in (200, 201), rule.text
    try:
        # Synchronous steps of 50 ms: worker 2 waits 41 % of them on input, the others 1 %
        # and 2 % (they wait for it in the all-reduce instead).
        for _ in range(3):
            for agent, wait in zip(agents, (0.0005, 0.001, 0.0205), strict=True):
                agent.steps(20, dur=0.05, wait=wait)
        diagnosis = job_server.get(f"/api/v1/runs/{run_id}/diagnosis")
        evidence = {e["key"]: e for e in diagnosis["evidence"]}
        assert evidence["straggler"]["value"] == 2
        assert evidence["straggler"]["text"] == (
            "worker 2 (host-2) waits 41.0 % on input while the others wait < 3 %: "
            "its pipeline starves the whole job"
        )
        assert any("Worker 2 holds every worker back" in a for a in diagnosis["advice"])
        firing = wait_for(
            lambda: job_server.get("/api/v1/alerts", run_id=run_id, state="firing")["data"],
            what="the straggler_ratio alert firing",
        )[0]
        # Own step times: 50 ms for worker 2, 50 - (20.5 - 0.5) and 50 - (20.5 - 1) ms for
        # the others; the median worker's is 30.5 ms.
        assert firing["value"] == pytest.approx(50 / 30.5, rel=1e-6)
    finally:
        for agent in agents:
            agent.close()


def test_workers_keeping_pace_name_no_straggler(job_server: ServerProcess) -> None:
    agents = _workers(job_server, uuid.uuid4().hex, [0, 1])
    try:
        for _ in range(2):
            for agent, wait in zip(agents, (0.002, 0.003), strict=True):
                agent.steps(20, dur=0.05, wait=wait)
        diagnosis = job_server.get(f"/api/v1/runs/{agents[0].run_id}/diagnosis")
        assert "straggler" not in {e["key"] for e in diagnosis["evidence"]}
    finally:
        for agent in agents:
            agent.close()
