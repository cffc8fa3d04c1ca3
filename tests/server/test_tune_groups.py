"""`stoker tune`'s groups on a real server (backend/stoker_server/api/tune.py): the agent token
stores one by its key, viewers read it with each trial linked to its run; bad input is a 422
that stores nothing. Both databases."""

import uuid
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from tests.conftest import DATABASES
from tests.harness.support import ServerProcess
from tests.harness.tune_groups import edit, group_body
from tests.server.test_ingest_websocket import hello

AGENT, VIEW, ADMIN = "tune-agent-token", "tune-view-token", "tune-admin-token"
AS_AGENT = {"Authorization": f"Bearer {AGENT}"}
AS_VIEWER = {"Authorization": f"Bearer {VIEW}"}
AS_ADMIN = {"Authorization": f"Bearer {ADMIN}"}


@pytest.fixture(scope="module", params=DATABASES)
def tune_server(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[ServerProcess]:
    data_dir = tmp_path_factory.mktemp(f"tune-{request.param}")
    env = {"STOKER_AGENT_TOKEN": AGENT, "STOKER_VIEW_TOKEN": VIEW, "STOKER_ADMIN_TOKEN": ADMIN}
    if request.param == "postgres":
        env["STOKER_DATABASE_URL"] = request.getfixturevalue("postgres_server").create_database()
    process = ServerProcess(data_dir=data_dir, env=env).start()
    yield process
    process.stop()


def _deliver_run(server: ServerProcess, run_key: str) -> int:
    steps = {"step": [0, 1], "t": [1.7e9, 1.7e9 + 0.1], "dur": [0.1, 0.1], "wait": [0.05, 0.05]}
    batch = {"type": "batch", "seq": 1, "steps": steps}
    response = httpx.post(
        f"{server.url}/api/v1/ingest",
        json={"hello": hello(run_key=run_key, name="tune trial"), "batches": [batch],
              "end": {"type": "end"}},
        headers=AS_AGENT,
    )  # fmt: skip
    assert response.status_code == 200, response.text
    return int(response.json()["run_id"])


def _group(key: str, run_keys: list[str], **overrides: Any) -> dict[str, Any]:
    rows = [
        {"id": "unchanged", "label": "unchanged", "verdict": "unchanged", "steps_per_s": 9.8,
         "input_wait_share": 0.93, "batches": 200, "examples": 12800, "run_key": run_keys[0]},
        {"id": "parallel:2", "advice": "parallel", "label": "parallel map slow_decode",
         "verdict": "speed-up", "steps_per_s": 21.3, "speedup": 2.17, "repeat_speedup": 2.1,
         "function": "slow_decode", "run_key": run_keys[1], "edit": edit("train.py:42")},
    ]  # fmt: skip
    trials = [("unchanged", "unchanged", run_keys[0]),
              ("parallel:2", "parallel map slow_decode", run_keys[1])]  # fmt: skip
    group = group_body(key, ["python", "train.py"], trials, rows, project="tune-tests",
                       noise=0.05, best="parallel:2",
                       conclusion="Best: parallel map slow_decode")  # fmt: skip
    group.update(overrides)
    return group


def test_the_agent_stores_a_group_and_viewers_read_it_with_its_runs(
    tune_server: ServerProcess,
) -> None:
    key = uuid.uuid4().hex[:16]
    run_keys = [f"tune-{key}-0", f"tune-{key}-1"]
    run_id = _deliver_run(tune_server, run_keys[0])  # the second trial's run has not arrived
    stored = httpx.post(f"{tune_server.url}/api/v1/tune-groups",
                        json=_group(key, run_keys, status="running"), headers=AS_AGENT)  # fmt: skip
    assert stored.status_code == 200, stored.text
    group_id = stored.json()["id"]
    read = httpx.get(f"{tune_server.url}/api/v1/tune-groups/{group_id}", headers=AS_VIEWER)
    assert read.status_code == 200
    group = read.json()
    assert group["status"] == "running"
    assert [(t["id"], t["run_id"]) for t in group["trials"]] == [
        ("unchanged", run_id), ("parallel:2", None)
    ]  # fmt: skip
    assert group["trials"][0]["run_status"] == "finished"
    assert group["table"]["rows"][1]["edit"]["before"] == ".map(slow_decode)"

    # stoker tune posts the group again as it goes: the same key replaces it.
    second_run = _deliver_run(tune_server, run_keys[1])
    again = httpx.post(f"{tune_server.url}/api/v1/tune-groups", json=_group(key, run_keys),
                       headers=AS_AGENT)  # fmt: skip
    assert again.status_code == 200 and again.json()["id"] == group_id
    listed = httpx.get(f"{tune_server.url}/api/v1/tune-groups", params={"key": key},
                       headers=AS_VIEWER).json()  # fmt: skip
    assert listed["count"] == 1
    assert listed["data"][0]["status"] == "finished"
    assert [t["run_id"] for t in listed["data"][0]["trials"]] == [run_id, second_run]

    group_url = f"{tune_server.url}/api/v1/tune-groups/{group_id}"
    assert httpx.delete(group_url, headers=AS_VIEWER).status_code == 403  # a change: admin's
    deleted = httpx.delete(group_url, headers=AS_ADMIN)
    assert deleted.status_code == 204
    gone = httpx.get(f"{tune_server.url}/api/v1/tune-groups/{group_id}", headers=AS_VIEWER)
    assert gone.status_code == 404 and "not found" in gone.json()["detail"]
    run = httpx.get(f"{tune_server.url}/api/v1/runs/{run_id}", headers=AS_VIEWER)
    assert run.status_code == 200  # the trials' runs stay


def test_only_the_agent_token_stores_a_group_and_only_the_viewer_reads(
    tune_server: ServerProcess,
) -> None:
    key = uuid.uuid4().hex[:16]
    body = _group(key, [f"tune-{key}-0", f"tune-{key}-1"])
    as_viewer = httpx.post(f"{tune_server.url}/api/v1/tune-groups", json=body, headers=AS_VIEWER)
    assert as_viewer.status_code == 403 and "agent token" in as_viewer.json()["detail"]
    anonymous = httpx.post(f"{tune_server.url}/api/v1/tune-groups", json=body)
    assert anonymous.status_code == 401
    read = httpx.get(f"{tune_server.url}/api/v1/tune-groups", headers=AS_AGENT)
    assert read.status_code == 403 and "viewer token" in read.json()["detail"]
    listed = httpx.get(f"{tune_server.url}/api/v1/tune-groups", params={"key": key},
                       headers=AS_VIEWER)  # fmt: skip
    assert listed.json()["count"] == 0


@pytest.mark.parametrize(
    "change",
    [
        {"key": "short"},
        {"key": "has spaces in it"},
        {"steps": 0},
        {"status": "paused"},
        {"unknown": 1},
        {"trials": [{"id": "unchanged", "label": "x", "run_key": "k"}]},
        {"table": {"rows": [{"id": "a", "label": "a", "verdict": "v", "steps_per_s": "NaN"}]}},
        {"table": {"rows": [{"id": "a", "label": "a", "verdict": "v"}] * 101}},
        {"table": {"rows": [{"id": "a", "label": "a", "verdict": "v", "note": "x" * 2001}]}},
        {"command": ["python"] * 201},
    ],
)
def test_bad_groups_are_refused_with_a_message_and_store_nothing(
    tune_server: ServerProcess, change: dict[str, Any]
) -> None:
    key = uuid.uuid4().hex[:16]
    body = {**_group(key, [f"tune-{key}-0", f"tune-{key}-1"]), **change}
    response = httpx.post(f"{tune_server.url}/api/v1/tune-groups", json=body, headers=AS_AGENT)
    assert response.status_code == 422, response.text
    assert response.json()["detail"]
    listed = httpx.get(f"{tune_server.url}/api/v1/tune-groups", params={"key": key},
                       headers=AS_VIEWER)  # fmt: skip
    assert listed.json()["count"] == 0


def test_a_run_key_with_a_nul_is_stored_without_it(tune_server: ServerProcess) -> None:
    """PostgreSQL refuses NUL in a query's text: a trial's run key drops it (as every stored
    text does) instead of failing the request with a 500 (schemathesis found it)."""
    key = uuid.uuid4().hex[:16]
    body = _group(key, [f"tune-{key}-\x000", f"tune-{key}-1"])
    response = httpx.post(f"{tune_server.url}/api/v1/tune-groups", json=body, headers=AS_AGENT)
    assert response.status_code in (200, 201), response.text
    group = httpx.get(f"{tune_server.url}/api/v1/tune-groups/{response.json()['id']}",
                      headers=AS_VIEWER).json()  # fmt: skip
    assert [t["run_key"] for t in group["trials"]] == [f"tune-{key}-0", f"tune-{key}-1"]
