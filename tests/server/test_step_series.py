"""Server-side downsampling: at most max_points buckets, spikes kept, catch-up after a step."""

import uuid

import httpx

from tests.harness.support import ServerProcess


def _upload_run(db_server: ServerProcess, n: int, spike_at: int) -> int:
    durations = [0.01] * n
    durations[spike_at] = 2.5
    batches = []
    for seq, start in enumerate(range(0, n, 5000), start=1):
        steps = list(range(start, min(n, start + 5000)))
        batches.append(
            {
                "type": "batch",
                "seq": seq,
                "steps": {
                    "step": steps,
                    "t": [1.7e9 + s * 0.01 for s in steps],
                    "dur": [durations[s] for s in steps],
                },
            }
        )
    hello = {"type": "hello", "protocol": 1, "run_key": uuid.uuid4().hex, "name": "long"}
    response = httpx.post(
        f"{db_server.url}/api/v1/ingest", json={"hello": hello, "batches": batches}, timeout=60
    )
    assert response.status_code == 200, response.text
    return response.json()["run_id"]


def test_steps_downsampled_to_max_points_keep_spike(db_server: ServerProcess) -> None:
    run_id = _upload_run(db_server, 20_000, spike_at=12_345)
    series = db_server.get(f"/api/v1/runs/{run_id}/steps", max_points=500)
    assert series["total"] == 20_000
    assert series["downsampled"] is True
    assert 250 < len(series["step"]) <= 500
    assert max(series["dur_max"]) == 2.5
    assert min(series["dur_min"]) == 0.01
    assert series["step"] == sorted(series["step"])


def test_steps_after_step_returns_only_newer_rows(db_server: ServerProcess) -> None:
    run_id = _upload_run(db_server, 1000, spike_at=0)
    series = db_server.get(f"/api/v1/runs/{run_id}/steps", after_step=989)
    assert series["step"] == list(range(990, 1000))
    assert series["downsampled"] is False


def test_steps_zoomed_range_is_bounded_on_both_sides(db_server: ServerProcess) -> None:
    run_id = _upload_run(db_server, 20_000, spike_at=15_000)
    exact = db_server.get(f"/api/v1/runs/{run_id}/steps", after_step=99, before_step=200)
    assert exact["step"] == list(range(100, 200))
    assert exact["total"] == 100
    zoomed = db_server.get(
        f"/api/v1/runs/{run_id}/steps", after_step=9_999, before_step=16_000, max_points=300
    )
    assert zoomed["downsampled"] is True
    assert zoomed["total"] == 6_000
    assert min(zoomed["step"]) >= 10_000 and max(zoomed["step"]) <= 15_999
    assert max(zoomed["dur_max"]) == 2.5  # the spike inside the range stays visible
    outside = db_server.get(f"/api/v1/runs/{run_id}/steps", after_step=15_000, before_step=16_000)
    assert max(outside["dur"]) == 0.01


def test_steps_of_unknown_run_is_404_json(db_server: ServerProcess) -> None:
    response = httpx.get(f"{db_server.url}/api/v1/runs/999/steps")
    assert response.status_code == 404
    assert response.json() == {"detail": "run 999 not found"}


def test_steps_bad_max_points_is_422(db_server: ServerProcess) -> None:
    run_id = _upload_run(db_server, 10, spike_at=0)
    response = httpx.get(f"{db_server.url}/api/v1/runs/{run_id}/steps", params={"max_points": 0})
    assert response.status_code == 422
