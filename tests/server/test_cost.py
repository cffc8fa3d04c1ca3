"""What starvation costs: input_wait_s and lost_gpu_s in run summaries, the runs
list and compare; GET /starvation totals; the GPU-hour price setting. Scripted agents send
steps with known waits over the real wire to a real server, on SQLite and PostgreSQL."""

import uuid
from collections.abc import Iterator
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import httpx
import pytest

from stoker_server.ingest.summary import gpu_count
from tests.conftest import DATABASES
from tests.harness.detect_support import ScriptedAgent
from tests.harness.support import ServerProcess

PRICE = {"STOKER_GPU_HOUR_PRICE": "2.5", "STOKER_CURRENCY": "€"}
# The thresholds the UI reads: the diagnosis's own (TensorFlow profiler convention).
INPUT_BOUND = {"highly_input_bound": 0.2, "moderately_input_bound": 0.05}
FOUR_GPUS = {"gpus": [{"index": i, "name": "A100"} for i in range(4)]}


@pytest.fixture(scope="module", params=DATABASES)
def cost_server(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[ServerProcess]:
    data_dir = tmp_path_factory.mktemp(f"cost-{request.param}")
    if request.param == "sqlite":
        url = f"sqlite:///{data_dir / 'stoker.db'}"
    else:
        url = request.getfixturevalue("postgres_server").create_database()
    process = ServerProcess(data_dir=data_dir, env={"STOKER_DATABASE_URL": url, **PRICE}).start()
    yield process
    process.stop()


def _send(agent: ScriptedAgent, waits: list[float | None], dur: float = 0.5) -> None:
    """Steps continuing the agent's count, one per wait (None: wait not measured)."""
    n = len(waits)
    steps: dict[str, Any] = {
        "step": list(range(agent.step, agent.step + n)),
        "t": [agent.t + i * dur for i in range(n)],
        "dur": [dur] * n,
        "wait": waits,
    }
    agent.send(steps=steps)
    agent.step += n
    agent.t += n * dur


def _run(server: ServerProcess, run_id: int) -> dict[str, Any]:
    return server.get(f"/api/v1/runs/{run_id}")


def _project() -> str:
    return f"cost-{uuid.uuid4().hex[:8]}"


def test_summary_sums_the_measured_waits_of_every_batch(cost_server: ServerProcess) -> None:
    agent = ScriptedAgent(cost_server, project=_project())
    # Step 0 (tracing and compilation) is not counted; nor is a step whose wait is unknown.
    _send(agent, [8.0, 0.5, 0.25, 0.0, None, 1.0])
    first = _run(cost_server, agent.run_id)["summary"]
    assert first["input_wait_s"] == 1.75
    assert first["lost_gpu_s"] == 1.75  # no GPU information: one GPU
    _send(agent, [0.125, 2.0])
    agent.end()
    agent.close()
    summary = _run(cost_server, agent.run_id)["summary"]
    assert summary["input_wait_s"] == 1.75 + 0.125 + 2.0
    assert summary["lost_gpu_s"] == summary["input_wait_s"]
    assert summary["workers"][0]["input_wait_s"] == summary["input_wait_s"]
    assert summary["workers"][0]["gpus"] == 1


def test_lost_gpu_time_counts_the_gpus_each_worker_trains_on(cost_server: ServerProcess) -> None:
    key, project = uuid.uuid4().hex, _project()
    four = ScriptedAgent(cost_server, project=project, run_key=key, rank=0, environment=FOUR_GPUS)
    two = ScriptedAgent(
        cost_server, project=project, run_key=key, rank=1, host="h2",
        environment={"gpus": [{"index": 0}, {"index": 1}, {"index": 2}], "replicas": 2},
    )  # fmt: skip
    _send(four, [0.0, 1.5, 0.5])
    _send(two, [0.0, 0.25, 0.25])
    summary = _run(cost_server, four.run_id)["summary"]
    assert summary["input_wait_s"] == 2.0 + 0.5
    assert summary["lost_gpu_s"] == 2.0 * 4 + 0.5 * 2
    assert [(w["rank"], w["gpus"]) for w in summary["workers"]] == [(0, 4), (1, 2)]
    for agent in (four, two):
        agent.end()
        agent.close()


@pytest.mark.parametrize(
    ("environment", "gpus"),
    [
        ({}, 1),
        ({"gpus": []}, 1),
        (FOUR_GPUS, 4),
        ({"gpus": [], "tf_gpus": ["/physical_device:GPU:0", "/physical_device:GPU:1"]}, 2),
        ({**FOUR_GPUS, "replicas": 1}, 1),  # the default strategy trains on one of four
        ({**FOUR_GPUS, "replicas": 8}, 4),  # a multi-worker strategy counts all workers
        ({"replicas": 4}, 1),  # replicas alone is no GPU information
    ],
)
def test_gpu_count_rule(environment: dict[str, Any], gpus: int) -> None:
    assert gpu_count(environment) == gpus


def test_runs_list_sorts_by_cost_and_compare_shows_it(cost_server: ServerProcess) -> None:
    project = _project()
    costs = {}
    for name, waits, environment in (
        ("cheap", [0.0, 0.5], {}),
        ("dear", [0.0, 1.0], FOUR_GPUS),
        ("middle", [0.0, 2.0], {}),
    ):
        agent = ScriptedAgent(cost_server, name=name, project=project, environment=environment)
        _send(agent, waits)
        agent.end()
        agent.close()
        costs[name] = agent.run_id
    listed = cost_server.get("/api/v1/runs", project=project, sort="-lost_gpu_s")["data"]
    assert [r["name"] for r in listed] == ["dear", "middle", "cheap"]
    assert [r["summary"]["lost_gpu_s"] for r in listed] == [4.0, 2.0, 0.5]
    by_wait = cost_server.get("/api/v1/runs", project=project, sort="input_wait_s")["data"]
    assert [r["name"] for r in by_wait] == ["cheap", "dear", "middle"]
    ids = ",".join(str(costs[n]) for n in ("cheap", "dear"))
    compared = cost_server.get("/api/v1/compare", runs=ids)["runs"]
    assert [(r["summary"]["input_wait_s"], r["summary"]["lost_gpu_s"]) for r in compared] == [
        (0.5, 0.5),
        (1.0, 4.0),
    ]


def test_starvation_totals_per_project_and_run(cost_server: ServerProcess) -> None:
    first, second = _project(), _project()
    plan = [(first, "a", [0.0, 1800.0], FOUR_GPUS), (first, "b", [0.0, 900.0, 900.0], {}),
            (second, "c", [0.0, 360.0], {})]  # fmt: skip
    for project, name, waits, environment in plan:
        agent = ScriptedAgent(cost_server, name=name, project=project, environment=environment)
        _send(agent, waits)
        agent.end()
        agent.close()
    body = cost_server.get("/api/v1/starvation", project=first)
    assert body["projects"] == [
        {"project": first, "lost_gpu_hours": 2.5, "input_wait_hours": 1.0, "runs": 2}
    ]
    assert [(r["name"], r["lost_gpu_hours"], r["input_wait_hours"]) for r in body["runs"]] == [
        ("a", 2.0, 0.5),
        ("b", 0.5, 0.5),
    ]
    assert (body["lost_gpu_hours"], body["input_wait_hours"]) == (2.5, 1.0)
    # Without a project filter both appear, costliest first; limit keeps the costliest runs.
    everything = cost_server.get("/api/v1/starvation", limit=1)
    projects = [p["project"] for p in everything["projects"]]
    assert projects.index(first) < projects.index(second)
    assert len(everything["runs"]) == 1
    assert everything["runs"][0]["lost_gpu_hours"] >= 2.0


def test_starvation_since_counts_runs_active_since(cost_server: ServerProcess) -> None:
    project = _project()
    old = ScriptedAgent(cost_server, name="old", project=project)
    _send(old, [0.0, 36.0])
    old.end()
    old.close()
    # An ended run's last_seen_at no longer moves: runs seen after it are "since" it.
    since = datetime.fromisoformat(_run(cost_server, old.run_id)["last_seen_at"])
    since += timedelta(milliseconds=1)
    new = ScriptedAgent(cost_server, name="new", project=project)
    _send(new, [0.0, 72.0])
    new.end()
    new.close()
    later = cost_server.get("/api/v1/starvation", project=project, since=since.isoformat())
    assert [r["name"] for r in later["runs"]] == ["new"]
    assert later["projects"][0]["runs"] == 1
    assert later["input_wait_hours"] == 0.02
    default = cost_server.get("/api/v1/starvation", project=project)  # the last 7 days
    assert [r["name"] for r in default["runs"]] == ["new", "old"]
    future = cost_server.get(
        "/api/v1/starvation", project=project, since=(since + timedelta(days=1)).isoformat()
    )
    assert future["projects"] == [] and future["runs"] == [] and future["lost_gpu_hours"] == 0


def test_starvation_refuses_bad_queries(cost_server: ServerProcess) -> None:
    for params in ({"since": "yesterday"}, {"limit": "0"}, {"limit": "1001"}):
        response = httpx.get(f"{cost_server.url}/api/v1/starvation", params=params, timeout=10)
        assert response.status_code == 422, params
        assert response.json()["detail"]
    # The per-run starved stretches are another route, still there.
    agent = ScriptedAgent(cost_server, project=_project())
    _send(agent, [0.0, 0.25])
    assert cost_server.get(f"/api/v1/runs/{agent.run_id}/starvation")["run_id"] == agent.run_id
    agent.close()


def test_ui_settings_carry_the_price_and_the_thresholds(cost_server: ServerProcess) -> None:
    assert cost_server.get("/api/v1/settings/ui") == {
        "gpu_hour_price": 2.5, "energy_price_kwh": None, "currency": "€",
        "input_bound": INPUT_BOUND,
    }  # fmt: skip


def test_cost_reads_need_the_viewer_token_and_price_defaults(tmp_path: Path) -> None:
    server = ServerProcess(
        data_dir=tmp_path / "server", env={"STOKER_VIEW_TOKEN": "look-secret"}
    ).start()
    try:
        for path in ("/api/v1/starvation", "/api/v1/settings/ui"):
            assert httpx.get(f"{server.url}{path}", timeout=10).status_code == 401
        headers = {"Authorization": "Bearer look-secret"}
        settings = httpx.get(f"{server.url}/api/v1/settings/ui", headers=headers, timeout=10)
        assert settings.json() == {
            "gpu_hour_price": None, "energy_price_kwh": None, "currency": "$",
            "input_bound": INPUT_BOUND,
        }  # fmt: skip
        totals = httpx.get(f"{server.url}/api/v1/starvation", headers=headers, timeout=10)
        assert totals.status_code == 200 and totals.json()["runs"] == []
    finally:
        server.stop()
