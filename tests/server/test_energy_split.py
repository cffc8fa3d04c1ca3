"""Energy split by what the steps were doing (stoker_server.diagnosis.energy), with scripted power;
and GET /runs/{id}/energy keeping an ended run's split until more of the run is stored."""

import time
import uuid
from pathlib import Path

import httpx
import numpy as np
import pytest

from stoker_server.diagnosis.energy import split_energy
from tests.harness.support import ServerProcess


def _device(watts, t_end: float, every: float = 1.0, rank: int = 0, gpu: int = 0):
    """Cumulative energy rows every `every` s of a GPU drawing `watts(t)` (integrated finely)."""
    rows, joules, t = [(rank, gpu, 0.0, 0.0)], 0.0, 0.0
    fine = 0.001
    while t < t_end - 1e-9:
        for k in range(round(every / fine)):
            joules += watts(t + (k + 0.5) * fine) * fine
        t += every
        rows.append((rank, gpu, t, joules))
    return rows


def test_short_steps_are_attributed_by_windows() -> None:
    # 100 ms steps waiting 60 ms at 100 W for 10 s, readings every second.
    starts = list(np.arange(0.0, 10.0, 0.1))
    split = split_energy(
        _device(lambda t: 100.0, 10.0),
        {0: (starts, [0.1] * len(starts), [0.06] * len(starts))},
    )
    assert split.total_j == pytest.approx(1000.0, rel=1e-6)
    assert split.starved_j == pytest.approx(600.0, rel=1e-3)
    assert split.computing_j == pytest.approx(400.0, rel=1e-3)
    assert split.other_j == pytest.approx(0.0, abs=1e-6)


def test_phases_of_different_power_within_5_percent() -> None:
    # 6 s starved (80 % wait) at 90 W, then 6 s fed (no wait) at 300 W; 50 ms steps.
    def watts(t: float) -> float:
        return 90.0 if t < 6.0 else 300.0

    starts = list(np.arange(0.0, 12.0, 0.05))
    waits = [0.04 if s < 6.0 - 1e-9 else 0.0 for s in starts]
    steps = {0: (starts, [0.05] * len(starts), waits)}
    split = split_energy(_device(watts, 12.0, every=0.5), steps)
    truth_starved = 90.0 * 6.0 * 0.8
    truth_computing = 90.0 * 6.0 * 0.2 + 300.0 * 6.0
    assert split.total_j == pytest.approx(90 * 6 + 300 * 6, rel=0.01)
    assert split.starved_j == pytest.approx(truth_starved, rel=0.05)
    assert split.computing_j == pytest.approx(truth_computing, rel=0.05)


def test_long_steps_overlap_windows_and_unknown_wait_is_other() -> None:
    # 3 s steps (1 s wait each) at 100 W, readings every second; step 3's wait unknown.
    split = split_energy(
        _device(lambda t: 100.0, 10.0), {0: ([0.0, 3.0, 6.0], [3.0, 3.0, 3.0], [1.0, 1.0, None])}
    )
    assert split.starved_j == pytest.approx(200.0)
    assert split.computing_j == pytest.approx(400.0)
    assert split.other_j == pytest.approx(400.0)  # step 3 (unknown) and 9..10 s (no step)


def test_each_worker_gpu_uses_its_own_steps() -> None:
    starved = list(np.arange(0.0, 4.0, 0.1))
    device = _device(lambda t: 200.0, 4.0, rank=0) + _device(lambda t: 200.0, 4.0, rank=1)
    split = split_energy(
        device,
        {
            0: (starved, [0.1] * 40, [0.05] * 40),  # half starved
            1: (starved, [0.1] * 40, [0.0] * 40),  # fed
        },
    )
    assert split.per_gpu[(0, 0)][1] == pytest.approx(400.0, rel=1e-3)
    assert split.per_gpu[(1, 0)][1] == pytest.approx(0.0, abs=1e-6)
    assert split.total_j == pytest.approx(1600.0, rel=1e-3)


def test_no_energy_rows_is_empty() -> None:
    split = split_energy([], {0: ([0.0], [1.0], [0.5])})
    assert (split.total_j, split.per_gpu) == (0.0, {})


# --- GET /runs/{id}/energy through a real server ----------------------------------------------


def _post(server: ServerProcess, run_key: str, seq: int, t0: float, rows: int) -> int:
    """Steps of 0.1 s (60 ms waiting) and energy rows every second at 100 W, then the end."""
    n = rows * 10
    batch = {
        "type": "batch", "seq": seq,
        "steps": {"step": list(range((seq - 1) * n, seq * n)),
                  "t": [t0 + i * 0.1 for i in range(n)], "dur": [0.1] * n,
                  "wait": [0.06] * n},
        "device": {"t": [t0 + i for i in range(rows + 1)], "gpu": [0] * (rows + 1),
                   "energy_j": [100.0 * ((seq - 1) * rows + i) for i in range(rows + 1)]},
    }  # fmt: skip
    hello = {"type": "hello", "protocol": 1, "run_key": run_key, "name": "split-cache"}
    body = {"hello": hello, "batches": [batch], "end": {"type": "end", "status": "finished"}}
    response = httpx.post(f"{server.url}/api/v1/ingest", json=body, timeout=30)
    assert response.status_code == 200, response.text
    return response.json()["run_id"]


def test_an_ended_runs_split_is_read_again_once_more_of_it_is_stored(tmp_path: Path) -> None:
    server = ServerProcess(data_dir=tmp_path / "server").start()
    try:
        run_key, t0 = uuid.uuid4().hex, time.time() - 100
        run_id = _post(server, run_key, 1, t0, rows=10)
        first = server.get(f"/api/v1/runs/{run_id}/energy")
        assert first["total_j"] == pytest.approx(1000.0)
        assert first["starved_j"] == pytest.approx(600.0, rel=1e-3)
        assert server.get(f"/api/v1/runs/{run_id}/energy") == first  # kept, the same answer
        # What its agent had spooled arrives after the run ended: the split is read anew.
        assert _post(server, run_key, 2, t0 + 10, rows=10) == run_id
        second = server.get(f"/api/v1/runs/{run_id}/energy")
        assert second["total_j"] == pytest.approx(2000.0)
        assert second["starved_j"] == pytest.approx(1200.0, rel=1e-3)
    finally:
        server.stop()
