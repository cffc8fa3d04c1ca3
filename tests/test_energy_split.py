"""Energy split by what the steps were doing (backend.diagnosis.energy), with scripted power."""

import numpy as np
import pytest

from backend.diagnosis.energy import split_energy


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
