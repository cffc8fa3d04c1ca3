"""History queries against a real server on SQLite and PostgreSQL: runs list, edits, series,
compare, export, and values that must survive both databases exactly."""

import csv
import io
import uuid
from typing import Any

import httpx

from stoker_server.core.models import RunsPublic
from tests.harness.support import ServerProcess


def _hello(**overrides: Any) -> dict[str, Any]:
    return {"type": "hello", "protocol": 1, "run_key": uuid.uuid4().hex, **overrides}


def _steps(
    seq: int, first: int, n: int, dur: float = 0.01, wait_share: float = 0.25
) -> dict[str, Any]:
    steps = list(range(first, first + n))
    return {
        "type": "batch",
        "seq": seq,
        "steps": {
            "step": steps,
            "t": [1.7e9 + s * dur for s in steps],
            "dur": [dur] * n,
            "wait": [dur * wait_share] * n,
            "batch_size": [32] * n,
        },
    }


def upload(server: ServerProcess, hello: dict[str, Any], batches: list, end: bool = False) -> int:
    body: dict[str, Any] = {"hello": hello, "batches": batches}
    if end:
        body["end"] = {"type": "end"}
    response = httpx.post(f"{server.url}/api/v1/ingest", json=body, timeout=60)
    assert response.status_code == 200, response.text
    return response.json()["run_id"]


def test_runs_list_filters_by_project_tag_status_and_name(db_server: ServerProcess) -> None:
    project = uuid.uuid4().hex
    a = upload(db_server, _hello(name="resnet-bs256", project=project, tags=["baseline"]), [])
    b = upload(db_server, _hello(name="resnet-bs512", project=project, tags=["big", "x"]), [], True)
    upload(db_server, _hello(name="other", project=project + "-2", tags=["baseline"]), [])

    def ids(**params: Any) -> list[int]:
        return [r["id"] for r in db_server.get("/api/v1/runs", project=project, **params)["data"]]

    assert sorted(ids()) == [a, b]
    assert ids(tag="baseline") == [a]
    assert ids(tag="big") == [b]
    assert ids(tag="bas") == []  # whole tags only
    assert ids(status="finished") == [b]
    assert ids(q="BS512") == [b]
    assert ids(q="%") == []  # wildcards are literal
    listing = db_server.get("/api/v1/runs", project=project, limit=1, sort="name")
    assert listing["count"] == 2 and [r["id"] for r in listing["data"]] == [a]
    page2 = db_server.get("/api/v1/runs", project=project, limit=1, offset=1, sort="name")
    assert [r["id"] for r in page2["data"]] == [b]
    assert ids(sort="-name") == [b, a]


def test_runs_list_bad_parameters_are_422(db_server: ServerProcess) -> None:
    for params in ({"sort": "nope"}, {"status": "sleeping"}, {"limit": 0}, {"offset": -1}):
        response = httpx.get(f"{db_server.url}/api/v1/runs", params=params)
        assert response.status_code == 422, params
        assert response.json()["detail"]


def test_run_patch_changes_only_the_fields_sent(db_server: ServerProcess) -> None:
    run_id = upload(db_server, _hello(name="before", tags=["a"]), [])
    url = f"{db_server.url}/api/v1/runs/{run_id}"
    response = httpx.patch(url, json={"notes": "lr too high"})
    assert response.status_code == 200, response.text
    run = response.json()
    assert (run["name"], run["tags"], run["notes"]) == ("before", ["a"], "lr too high")
    run = httpx.patch(url, json={"name": "after", "tags": ["b", "c"]}).json()
    assert (run["name"], run["tags"], run["notes"]) == ("after", ["b", "c"], "lr too high")
    bad = httpx.patch(url, json={"name": "x" * 500, "notes": "never stored"})
    assert bad.status_code == 422
    assert db_server.get(f"/api/v1/runs/{run_id}")["notes"] == "lr too high"
    assert httpx.patch(f"{db_server.url}/api/v1/runs/999999", json={}).status_code == 404


def test_run_delete_removes_the_run_and_its_rows_only(db_server: ServerProcess) -> None:
    doomed = upload(db_server, _hello(), [_steps(1, 0, 500)], end=True)
    kept = upload(db_server, _hello(), [_steps(1, 0, 300)])
    running = httpx.delete(f"{db_server.url}/api/v1/runs/{kept}")  # its next batch would
    assert running.status_code == 409  # bring back a partial copy (docs/api.md)
    response = httpx.delete(f"{db_server.url}/api/v1/runs/{doomed}")
    assert response.status_code == 204
    assert httpx.get(f"{db_server.url}/api/v1/runs/{doomed}").status_code == 404
    assert httpx.get(f"{db_server.url}/api/v1/runs/{doomed}/steps").status_code == 404
    assert httpx.delete(f"{db_server.url}/api/v1/runs/{doomed}").status_code == 404
    assert db_server.get(f"/api/v1/runs/{kept}/steps")["total"] == 300


def test_long_run_is_downsampled_from_rollups_with_spike_and_means(
    db_server: ServerProcess,
) -> None:
    n = 30_000
    batches = []
    for seq, first in enumerate(range(0, n, 5000), start=1):
        batch = _steps(seq, first, 5000)
        batch["steps"]["dur"] = [0.02 if s % 2 else 0.01 for s in range(first, first + 5000)]
        if first <= 17_777 < first + 5000:
            batch["steps"]["dur"][17_777 - first] = 3.0
        batches.append(batch)
    run_id = upload(db_server, _hello(), batches)
    series = db_server.get(f"/api/v1/runs/{run_id}/steps", max_points=100)
    assert series["total"] == n and series["downsampled"]
    assert len(series["step"]) <= 100
    assert series["step"][-1] == n - 1 and series["step"] == sorted(series["step"])
    assert max(series["dur_max"]) == 3.0 and min(series["dur_min"]) == 0.01
    assert all(abs(d - 0.015) < 0.001 for d in series["dur"][:-1] if d < 0.02)
    assert sum(d > 0.02 for d in series["dur"]) == 1  # the bucket holding the spike
    assert all(abs(w - 0.0025) < 1e-9 for w in series["wait"])


def test_device_samples_are_series_per_gpu_downsampled(db_server: ServerProcess) -> None:
    n = 3000
    device = {
        "t": [1.7e9 + i // 2 for i in range(n)],
        "gpu": [i % 2 for i in range(n)],
        "util": [0.0 if i == 1001 else 90.0 + (i % 2) for i in range(n)],
        "mem_used": [1e9 + i for i in range(n)],
    }
    host = {"t": [1.7e9 + i for i in range(50)], "proc_cpu": [100.0] * 50, "rss": [2e9] * 50}
    run_id = upload(
        db_server, _hello(), [{"type": "batch", "seq": 1, "device": device, "host": host}]
    )
    full = db_server.get(f"/api/v1/runs/{run_id}/samples", fields="util,mem_used")
    assert [(s["rank"], s["gpu"], s["total"]) for s in full["series"]] == [
        (0, 0, 1500),
        (0, 1, 1500),
    ]
    assert full["series"][1]["util"][500] == 0.0  # the sample at i = 1001
    small = db_server.get(f"/api/v1/runs/{run_id}/samples", max_points=100, gpu=1)
    (gpu1,) = small["series"]
    assert gpu1["downsampled"] and len(gpu1["t"]) <= 100
    assert min(gpu1["util_min"]) == 0.0 and max(gpu1["util_max"]) == 91.0
    assert gpu1["t"] == sorted(gpu1["t"])
    hosts = db_server.get(f"/api/v1/runs/{run_id}/host")
    assert hosts["series"][0]["proc_cpu"] == [100.0] * 50
    # A zoomed time range: both ends exclusive.
    window = db_server.get(
        f"/api/v1/runs/{run_id}/samples", gpu=0, since_t=1.7e9 + 99, until_t=1.7e9 + 200
    )
    assert window["series"][0]["t"] == [1.7e9 + i for i in range(100, 200)]
    host_window = db_server.get(
        f"/api/v1/runs/{run_id}/host", since_t=1.7e9 + 9, until_t=1.7e9 + 20
    )
    assert host_window["series"][0]["t"] == [1.7e9 + i for i in range(10, 20)]
    bad = httpx.get(f"{db_server.url}/api/v1/runs/{run_id}/samples", params={"fields": "bogus"})
    assert bad.status_code == 422 and "bogus" in bad.json()["detail"]


def test_metrics_series_by_name(db_server: ServerProcess) -> None:
    steps = list(range(1, 201))
    metrics = {
        "step": steps + steps,
        "name": ["loss"] * 200 + ["accuracy"] * 200,
        "value": [1.0 / s for s in steps] + [s / 200 for s in steps],
    }
    run_id = upload(db_server, _hello(), [{"type": "batch", "seq": 1, "metrics": metrics}])
    out = db_server.get(f"/api/v1/runs/{run_id}/metrics", name="loss", max_points=50)
    assert out["names"] == ["accuracy", "loss"]
    (loss,) = out["series"]
    assert loss["name"] == "loss" and loss["downsampled"] and len(loss["step"]) <= 50
    assert loss["value_max"][0] == 1.0
    every = db_server.get(f"/api/v1/runs/{run_id}/metrics")
    assert [s["name"] for s in every["series"]] == ["accuracy", "loss"]
    assert every["series"][1]["value"][:2] == [1.0, 0.5]
    zoomed = db_server.get(
        f"/api/v1/runs/{run_id}/metrics", name="loss", after_step=9, before_step=20
    )
    assert zoomed["series"][0]["step"] == list(range(10, 20))


def test_compare_reports_summaries_and_differing_keys(db_server: ServerProcess) -> None:
    env = {"tf": "2.21", "gpu": {"name": "A100", "count": 1}}
    a = upload(
        db_server,
        _hello(config={"batch_size": 256, "lr": 0.1, "opt": {"name": "adam"}}, environment=env),
        [_steps(1, 0, 100, dur=0.01)],
        end=True,
    )
    b = upload(
        db_server,
        _hello(
            config={"batch_size": 512, "lr": 0.1, "opt": {"name": "sgd"}, "extra": True},
            environment={**env, "gpu": {"name": "H100", "count": 1}},
        ),
        [_steps(1, 0, 100, dur=0.02)],
    )
    out = db_server.get("/api/v1/compare", runs=f"{a},{b}")
    assert [r["id"] for r in out["runs"]] == [a, b]
    first, second = (r["summary"] for r in out["runs"])
    assert abs(first["step_time_ms_median"] - 10) < 0.2
    assert abs(second["step_time_ms_p95"] - 20) < 0.4
    assert abs(first["input_wait_share"] - 0.25) < 1e-9
    assert first["verdict"] == second["verdict"] == "highly_input_bound"
    assert abs(first["samples_per_s"] - 3200) < 1
    assert first["duration_s"] is not None
    assert out["differences"]["config"] == {
        "batch_size": [256, 512],
        "extra": [None, True],
        "opt.name": ["adam", "sgd"],
    }
    assert out["differences"]["environment"] == {"gpu.name": ["A100", "H100"]}
    assert out["missing"] == []
    bad = (f"{a},x", "", ",", f"{a},0", f"{a},-3", f"{a},{2**31}", ",".join(["1"] * 51) + ",2")
    for runs in bad:
        response = httpx.get(f"{db_server.url}/api/v1/compare", params={"runs": runs})
        assert response.status_code == 422, runs
        assert response.json()["detail"], runs


def test_compare_lists_unknown_and_deleted_runs_as_missing(db_server: ServerProcess) -> None:
    """A compare link naming a deleted run still compares the runs that remain, and says which
    are gone; with none left, the answer is empty, not an error."""
    a = upload(db_server, _hello(config={"lr": 0.1}), [_steps(1, 0, 10)], end=True)
    gone = upload(db_server, _hello(config={"lr": 0.5}), [_steps(1, 0, 10)], end=True)
    b = upload(db_server, _hello(config={"lr": 0.2}), [_steps(1, 0, 10)], end=True)
    assert httpx.delete(f"{db_server.url}/api/v1/runs/{gone}").status_code == 204
    unknown = 2**31 - 1

    out = db_server.get("/api/v1/compare", runs=f"{unknown},{b},{gone},{a},{b}")
    assert [r["id"] for r in out["runs"]] == [b, a]  # asked order, each once
    assert out["missing"] == [unknown, gone]
    assert out["differences"]["config"] == {"lr": [0.2, 0.1]}  # only the runs found

    out = db_server.get("/api/v1/compare", runs=f"{gone},{unknown}")
    assert out == {
        "runs": [],
        "missing": [gone, unknown],
        "epoch_metrics": [],
        "differences": {"config": {}, "environment": {}},
    }


def test_steps_csv_export_has_every_step(db_server: ServerProcess) -> None:
    run_id = upload(db_server, _hello(), [_steps(1, 0, 25_000)])
    response = httpx.get(f"{db_server.url}/api/v1/runs/{run_id}/steps.csv", timeout=30)
    assert response.status_code == 200
    assert response.headers["content-type"].startswith("text/csv")
    rows = list(csv.DictReader(io.StringIO(response.text)))
    assert len(rows) == 25_000
    assert rows[7] == {
        "rank": "0", "step": "7", "t": repr(1.7e9 + 7 * 0.01), "dur": "0.01",
        "wait": "0.0025", "batch_size": "32",
    }  # fmt: skip


def test_big_integers_json_and_float_precision_round_trip(db_server: ServerProcess) -> None:
    big_step = 2**53 + 1  # not representable as a double: must stay an integer column
    config = {
        "huge": 2**70,
        "nested": {"list": [1, 2.5, None, "ü"], "bad": float("nan")},
        "nul": "a\x00b",
    }
    t = 1_700_000_000.123456789
    batch = {
        "type": "batch",
        "seq": 2**62,
        "steps": {
            "step": [big_step, big_step + 1],
            "t": [t, t + 1e-6],
            "dur": [1e-9, 123.456789012345],
            "batch_size": [2**40, None],
        },
        "device": {"t": [t], "gpu": [0], "throttle": [2**62], "mem_used": [8.5e10]},
    }
    hello = _hello(name="precise\x00", tags=["ü-tag"], config=config)
    response = httpx.post(
        f"{db_server.url}/api/v1/ingest",
        content=__import__("json").dumps({"hello": hello, "batches": [batch]}),
        headers={"content-type": "application/json"},
    )
    assert response.status_code == 200, response.text
    run_id = response.json()["run_id"]
    run = db_server.get(f"/api/v1/runs/{run_id}")
    assert run["name"] == "precise"
    assert run["config"] == {
        "huge": 2**70,
        "nested": {"list": [1, 2.5, None, "ü"], "bad": None},
        "nul": "ab",
    }
    assert db_server.get("/api/v1/runs", tag="ü-tag")["data"][0]["id"] == run_id
    series = db_server.get(f"/api/v1/runs/{run_id}/steps")
    assert series["step"] == [big_step, big_step + 1]
    assert series["t"] == [t, t + 1e-6]
    assert series["dur"] == [1e-9, 123.456789012345]
    samples = db_server.get(f"/api/v1/runs/{run_id}/samples", fields="throttle,mem_used")
    assert samples["series"][0]["throttle"] == [2**62]
    assert samples["series"][0]["mem_used"] == [8.5e10]


def test_runs_list_odd_filter_text_is_answered_not_500(db_server: ServerProcess) -> None:
    odd = "ßÚ𧗡 \x11\x91\x13å^\U000b6781{C"
    for params in ({"tag": odd}, {"tag": "a\x00b"}, {"q": "\x00"}, {"project": "x\x00"}):
        response = httpx.get(f"{db_server.url}/api/v1/runs", params=params)
        assert response.status_code == 200, (params, response.text)
    run_id = upload(db_server, _hello(tags=[odd]), [])
    assert [r["id"] for r in db_server.get("/api/v1/runs", tag=odd)["data"]] == [run_id]
    response = httpx.patch(f"{db_server.url}/api/v1/runs/{run_id}", json={"tags": ["a\x00b"]})
    assert response.status_code == 200 and response.json()["tags"] == ["ab"]


def test_runs_list_entries_equal_run_details(db_server: ServerProcess) -> None:
    """The list is serialised without models (queries.list_runs_json): it is a RunsPublic, and
    each entry the same JSON as the run's detail."""
    project = uuid.uuid4().hex
    upload(db_server, _hello(project=project, name='q"ü', tags=["ß"], config={"a": [1]}), [])
    upload(db_server, _hello(project=project), [_steps(1, 0, 20)], end=True)
    # The verdict, computed on read, is spliced into the list's stored summaries: at and
    # either side of the thresholds (a share at a threshold is at that level).
    for share in (0.2, 0.05, 0.049):
        upload(db_server, _hello(project=project), [_steps(1, 0, 20, wait_share=share)])
    body = httpx.get(f"{db_server.url}/api/v1/runs", params={"project": project, "sort": "id"})
    assert RunsPublic.model_validate_json(body.content).count == 5
    listing = body.json()["data"]
    assert [run["summary"]["verdict"] for run in listing] == [
        None, "highly_input_bound", "highly_input_bound", "moderately_input_bound",
        "not_input_bound",
    ]  # fmt: skip
    for run in listing:
        assert run == db_server.get(f"/api/v1/runs/{run['id']}")
