"""The `pipeline` batch section through the real wire (validation, storage, `?t=`) and
`GET /runs/{id}/pipeline` naming the bottleneck from stored stages and steps."""

import uuid
from typing import Any

import httpx
import pytest

from tests.harness.support import ServerProcess

T0 = 1.7e9


def _hello() -> dict[str, Any]:
    return {"type": "hello", "protocol": 1, "run_key": uuid.uuid4().hex,
            "project": uuid.uuid4().hex}  # fmt: skip


def _stages(map_ms: float, *, function: str = "decode") -> list[dict[str, Any]]:
    def stage(position, kind, ms, elements, **more):
        return {"position": position, "kind": kind, "name": kind, "ms_per_element": ms,
                "elements": elements, "parallelism": 1.0, "buffered": 0,
                "bytes_per_element": 4.0, **more}  # fmt: skip

    return [
        stage(0, "tensor_slices", 0.001, 3200),
        stage(1, "map", map_ms, 3200, function=function),
        stage(2, "batch", 0.05, 100),
        stage(3, "prefetch", 0.01, 100, buffer_size=2.0),
    ]


def _steps(n: int, dur: float, wait: float) -> dict[str, Any]:
    return {
        "step": list(range(n)),
        "t": [T0 + i * dur for i in range(n)],
        "dur": [dur] * n,
        "wait": [wait] * n,
    }


def _upload(server: ServerProcess, batches: list[dict[str, Any]]) -> httpx.Response:
    body = {"hello": _hello(), "batches": batches, "end": {"type": "end"}}
    return httpx.post(f"{server.url}/api/v1/ingest", json=body, timeout=60)


def _run(server: ServerProcess, batches: list[dict[str, Any]]) -> int:
    response = _upload(server, batches)
    assert response.status_code == 200, response.text
    return response.json()["run_id"]


def test_a_starved_run_names_its_slow_stage_and_t_reads_the_past(db_server) -> None:
    pipeline = {
        "t": [T0 + 1, T0 + 9],
        "source": ["autotune_model", "autotune_model"],
        "stages": [_stages(3.0, function="early"), _stages(3.0, function="late<b>")],
        "read_us": [800.0, 900.0],
    }
    # 0.1 s steps, 0.08 s of it waiting: fed, 50 steps/s; the map feeds 1000/3/32 = 10.
    run_id = _run(db_server, [{"type": "batch", "seq": 1, "steps": _steps(100, 0.1, 0.08),
                               "pipeline": pipeline}])  # fmt: skip
    out = db_server.get(f"/api/v1/runs/{run_id}/pipeline")
    assert out["source"] == "autotune_model" and out["t"] == T0 + 9
    assert [s["position"] for s in out["stages"]] == [0, 1, 2, 3]
    assert set(out["stages"][0]) >= {
        "position", "kind", "name", "function", "parallelism", "ms_per_element", "elements",
        "buffered", "buffer_size", "bytes_per_element",
    }  # fmt: skip
    bottleneck = out["bottleneck"]
    assert (bottleneck["position"], bottleneck["kind"], bottleneck["function"]) == (
        1, "map", "late<b>",
    )  # fmt: skip
    assert "num_parallel_calls" in bottleneck["fix"] and bottleneck["reason"]
    assert out["capacity_steps_per_s"][1] == pytest.approx(1000 / 3.0 / 32)
    assert out["demand_steps_per_s"] == pytest.approx(1 / 0.02)
    diagnosis = db_server.get(f"/api/v1/runs/{run_id}/diagnosis")
    evidence = {e["key"]: e for e in diagnosis["evidence"]}
    assert evidence["bottleneck_stage"]["value"] == "stage 1 (map 'late<b>')"
    assert diagnosis["advice"][0] == bottleneck["fix"]
    past = db_server.get(f"/api/v1/runs/{run_id}/pipeline", t=T0 + 5)
    assert past["t"] == T0 + 1 and past["stages"][1]["function"] == "early"


def test_a_fed_run_has_stages_and_no_bottleneck(db_server) -> None:
    pipeline = {"t": [T0 + 5], "source": ["autotune_model"], "stages": [_stages(3.0)]}
    run_id = _run(db_server, [{"type": "batch", "seq": 1, "steps": _steps(100, 0.1, 0.0),
                               "pipeline": pipeline}])  # fmt: skip
    out = db_server.get(f"/api/v1/runs/{run_id}/pipeline")
    assert len(out["stages"]) == 4 and out["bottleneck"] is None
    diagnosis = db_server.get(f"/api/v1/runs/{run_id}/diagnosis")
    assert "bottleneck_stage" not in {e["key"] for e in diagnosis["evidence"]}


def test_unavailable_model_and_no_reads_say_unavailable(db_server) -> None:
    pipeline = {"t": [T0 + 5], "source": ["unavailable"], "stages": [[]]}
    run_id = _run(db_server, [{"type": "batch", "seq": 1, "pipeline": pipeline}])
    out = db_server.get(f"/api/v1/runs/{run_id}/pipeline")
    assert (out["source"], out["stages"], out["bottleneck"]) == ("unavailable", [], None)
    bare = _run(db_server, [{"type": "batch", "seq": 1, "steps": _steps(5, 0.1, 0.05)}])
    out = db_server.get(f"/api/v1/runs/{bare}/pipeline")
    assert (out["source"], out["t"], out["stages"]) == ("unavailable", None, [])
    response = httpx.get(f"{db_server.url}/api/v1/runs/2000000000/pipeline")
    assert response.status_code == 404


@pytest.mark.parametrize(
    ("change", "said"),
    [
        (lambda p: p["source"].__setitem__(0, "guess"), "source"),
        (lambda p: p["stages"].append([]), "column 'stages' has 2 values"),
        (lambda p: p["stages"][0][0].update(kind=""), "kind"),
        (lambda p: p["stages"][0][0].update(extra=1), "extra"),
        (lambda p: p["stages"][0][1].update(ms_per_element=-1), "ms_per_element"),
        (lambda p: p["stages"][0][1].update(function="x" * 201), "function"),
        (lambda p: p["stages"].__setitem__(0, _stages(1.0) * 17), "stages"),
    ],
)
def test_invalid_pipeline_section_is_refused_and_nothing_is_stored(
    db_server: ServerProcess, change: Any, said: str
) -> None:
    pipeline = {"t": [T0], "source": ["autotune_model"], "stages": [_stages(1.0)]}
    change(pipeline)
    hello = _hello()
    body = {"hello": hello, "batches": [{"type": "batch", "seq": 1, "pipeline": pipeline,
                                         "steps": _steps(3, 0.1, 0.0)}]}  # fmt: skip
    response = httpx.post(f"{db_server.url}/api/v1/ingest", json=body, timeout=60)
    assert response.status_code == 422, response.text
    assert said in response.text
    assert db_server.get("/api/v1/runs", project=hello["project"])["count"] == 0


def test_steps_that_only_waited_give_no_demand_and_no_bottleneck(db_server) -> None:
    pipeline = {"t": [T0 + 5], "source": ["autotune_model"], "stages": [_stages(3.0)]}
    run_id = _run(db_server, [{"type": "batch", "seq": 1, "steps": _steps(10, 0.1, 0.1),
                               "pipeline": pipeline}])  # fmt: skip
    out = db_server.get(f"/api/v1/runs/{run_id}/pipeline")
    assert out["demand_steps_per_s"] is None and out["bottleneck"] is None
