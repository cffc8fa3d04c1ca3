"""Retention on both databases, through a real server: old ended runs lose their
raw steps (their charts read the rollups and look the same at the default zoom) and most
samples; summaries and epoch metrics stay; pinned and running runs keep everything; the size
limit keeps the newest runs; /metrics shows disk use."""

import uuid
from pathlib import Path
from typing import Any

import httpx
import pytest
from sqlalchemy import create_engine, text

from stoker_server.ingest.retention import KEEP_SAMPLES, ROW_BYTES
from tests.conftest import DATABASES
from tests.harness.support import ServerProcess, wait_for

pytestmark = pytest.mark.parametrize("database", DATABASES, indirect=True)

STEPS = 40_000  # long enough that the default zoom (2,000 points) reads the rollups
SAMPLES = 3_000  # per GPU, one a second


def _hello(**overrides: Any) -> dict[str, Any]:
    return {"type": "hello", "protocol": 1, "run_key": uuid.uuid4().hex, **overrides}


def _batches(steps: int, samples: int, gpus: int = 2) -> list[dict[str, Any]]:
    batches = []
    per = 2_000
    for i, first in enumerate(range(0, max(steps, samples), per)):
        batch: dict[str, Any] = {"type": "batch", "seq": i + 1}
        s = list(range(first, min(first + per, steps)))
        if s:
            batch["steps"] = {
                "step": s,
                "t": [1.7e9 + k * 0.02 for k in s],
                "dur": [0.02 + (k % 17) * 1e-3 + (0.5 if k % 5003 == 0 else 0) for k in s],
                "wait": [(k % 11) * 1e-3 for k in s],
            }
        t = list(range(first, min(first + per, samples)))
        if t:
            batch["device"] = {
                "t": [1.7e9 + k for k in t for _ in range(gpus)],
                "gpu": [g for _ in t for g in range(gpus)],
                "util": [float((k * 7 + g) % 100) for k in t for g in range(gpus)],
                "mem_used": [1e9 + k for k in t for _ in range(gpus)],
            }
            batch["host"] = {"t": [1.7e9 + k for k in t], "proc_cpu": [50.0 + k % 9 for k in t]}
        batches.append(batch)
    batches[-1]["epochs"] = {
        "epoch": [0, 1],
        "step": [steps // 2, steps],
        "t": [1.7e9 + 1, 1.7e9 + 2],
        "name": ["loss", "loss"],
        "value": [0.9, 0.5],
    }
    return batches


def _upload(
    server: ServerProcess, batches: list, *, end: bool, run_key: str = "", **hello: Any
) -> int:
    run_id = None
    run_key = run_key or uuid.uuid4().hex
    for first in range(0, max(len(batches), 1), 5):
        body: dict[str, Any] = {
            "hello": _hello(run_key=run_key, **hello),
            "batches": batches[first : first + 5],
        }
        if end and first + 5 >= len(batches):
            body["end"] = {"type": "end"}
        response = httpx.post(f"{server.url}/api/v1/ingest", json=body, timeout=120)
        assert response.status_code == 200, response.text
        run_id = response.json()["run_id"]
    assert run_id is not None
    return run_id


def _count(url: str, sql: str, **params: Any) -> int:
    engine = create_engine(url)
    try:
        with engine.connect() as connection:
            return int(connection.execute(text(sql), params).scalar() or 0)
    finally:
        engine.dispose()


def _server(data_dir: Path, database: str, **settings: str) -> ServerProcess:
    env = {"STOKER_DATABASE_URL": database, "STOKER_RETENTION_INTERVAL_S": "0.2", **settings}
    return ServerProcess(data_dir=data_dir, env=env).start()


def _steps_view(series: dict[str, Any]) -> dict[str, Any]:
    return {k: series[k] for k in ("step", "t", "dur", "wait", "dur_min", "dur_max", "total")}


def test_old_runs_are_compacted_pinned_and_running_runs_are_not(
    database: str, tmp_path: Path
) -> None:
    server = _server(tmp_path / "server", database)  # default retention: a year
    try:
        old = _upload(server, _batches(STEPS, SAMPLES), end=True, name="old")
        key = uuid.uuid4().hex
        pinned = _upload(server, _batches(3_000, 100), end=False, run_key=key, name="pinned")
        response = httpx.patch(f"{server.url}/api/v1/runs/{pinned}", json={"pinned": True})
        assert response.status_code == 200 and response.json()["pinned"] is True
        _upload(server, [], end=True, run_key=key, name="pinned")  # ends once pinned
        running = _upload(server, _batches(3_000, 100), end=False, name="running")
        before = server.get(f"/api/v1/runs/{old}")
        steps_before = server.get(f"/api/v1/runs/{old}/steps")
        # 3,000 s in 100 points: buckets the device rollups serve.
        samples_before = server.get(f"/api/v1/runs/{old}/samples", max_points=100)
        assert steps_before["compacted"] is False and steps_before["downsampled"] is True
        assert before["compacted_at"] is None and before["pinned"] is False
    finally:
        server.stop()
    db_url = database
    rows_before = {
        run: _count(db_url, "SELECT coalesce(sum(n), 0) FROM stepchunk WHERE run_id = :r", r=run)
        for run in (old, pinned, running)
    }
    epochs_before = _count(db_url, "SELECT count(*) FROM epochmetric WHERE run_id = :r", r=old)
    assert rows_before[old] == STEPS and epochs_before == 2

    # A year is now a second; the running run's agent may stay away (no reaper meanwhile).
    server = _server(
        tmp_path / "server",
        database,
        STOKER_RETENTION_TIME_S="1",
        STOKER_HEARTBEAT_TIMEOUT_S="3600",
    )
    try:
        after = wait_for(
            lambda: (r := server.get(f"/api/v1/runs/{old}"))["compacted_at"] and r,
            timeout_s=120,
            what="the old run compacted",
        )
        assert after["summary"] == before["summary"]
        steps_after = server.get(f"/api/v1/runs/{old}/steps")
        assert steps_after["compacted"] is True and steps_after["finest_steps"] == 16
        # The default zoom read the rollups before: the same chart now.
        assert _steps_view(steps_after) == _steps_view(steps_before)
        zoomed = server.get(f"/api/v1/runs/{old}/steps", after_step=1000, before_step=1200)
        assert zoomed["compacted"] is True and 0 < len(zoomed["step"]) <= 200 // 16 + 1
        assert all(1000 < s < 1200 for s in zoomed["step"])

        samples = server.get(f"/api/v1/runs/{old}/samples")
        assert samples["compacted"] is True and len(samples["series"]) == 2
        # The rollups stay: the same buckets, true min and max, from a third of the samples.
        samples_after = server.get(f"/api/v1/runs/{old}/samples", max_points=100)
        assert samples_after["compacted"] is True
        assert samples_after["series"] == samples_before["series"]
        assert [max(s["util_max"]) for s in samples_after["series"]] == [99.0, 99.0]
        assert server.get(f"/api/v1/runs/{old}/host")["compacted"] is True
        listed = {r["id"]: r for r in server.get("/api/v1/runs", limit=10)["data"]}
        assert listed[old]["compacted_at"] is not None and listed[pinned]["pinned"] is True
        metrics = httpx.get(f"{server.url}/metrics").text
        assert "stoker_disk_database_bytes" in metrics
        assert "stoker_retention_compacted_runs 1.0" in metrics
        assert server.get(f"/api/v1/runs/{pinned}")["compacted_at"] is None
        assert server.get(f"/api/v1/runs/{running}")["compacted_at"] is None
    finally:
        server.stop()
    assert _count(db_url, "SELECT coalesce(sum(n), 0) FROM stepchunk WHERE run_id = :r", r=old) == 0
    assert _count(db_url, "SELECT count(*) FROM steprollup WHERE run_id = :r", r=old) > 0
    assert _count(db_url, "SELECT count(*) FROM devicerollup WHERE run_id = :r", r=old) > 0
    assert _count(db_url, "SELECT count(*) FROM epochmetric WHERE run_id = :r", r=old) == 2
    for gpu in (0, 1):
        kept = _count(
            db_url, "SELECT count(*) FROM devicesample WHERE run_id = :r AND gpu = :g", r=old, g=gpu
        )
        assert 0 < kept <= KEEP_SAMPLES + 1 < SAMPLES
    kept = _count(db_url, "SELECT count(*) FROM hostsample WHERE run_id = :r", r=old)
    assert 0 < kept <= KEEP_SAMPLES + 1
    for run in (pinned, running):
        assert (
            _count(db_url, "SELECT coalesce(sum(n), 0) FROM stepchunk WHERE run_id = :r", r=run)
            == rows_before[run]
        )


def test_size_limit_keeps_the_newest_runs_raw(database: str, tmp_path: Path) -> None:
    steps = 1_000
    one_run = steps * ROW_BYTES["stepchunk"]
    server = _server(
        tmp_path / "server",
        database,
        STOKER_RETENTION_TIME_S="0",
        STOKER_RETENTION_SIZE_BYTES=str(int(one_run * 1.5)),
    )
    try:
        first = _upload(server, _batches(steps, 0), end=True, name="first")
        second = _upload(server, _batches(steps, 0), end=True, name="second")
        wait_for(
            lambda: server.get(f"/api/v1/runs/{first}")["compacted_at"],
            timeout_s=120,
            what="the older run compacted",
        )
        third = _upload(server, _batches(steps, 0), end=True, name="third")
        wait_for(
            lambda: server.get(f"/api/v1/runs/{second}")["compacted_at"],
            timeout_s=120,
            what="the second run compacted once a newer one took its room",
        )
        assert server.get(f"/api/v1/runs/{third}")["compacted_at"] is None
        series = server.get(f"/api/v1/runs/{third}/steps")
        assert series["compacted"] is False and series["total"] == steps
        metrics = httpx.get(f"{server.url}/metrics").text
        assert f"stoker_retention_raw_bytes {float(one_run)}" in metrics
    finally:
        server.stop()
