"""bench/interleaved.py's reading of a fit's call begins: each arm's cost paired to the
baseline's block of the same group, through a drift larger than the costs."""

import numpy as np
import pytest

from bench.interleaved import ARMS, SKIP_CALLS, arm_costs


def synthetic_begins(
    costs_s: dict[str, float], block: int, groups: int
) -> tuple[np.ndarray, list[str]]:
    """Call begins of a fit whose step drifts from 1.0 to 1.5 ms, each arm adding its cost,
    the first calls of every block slowed 0.5 ms (the switch to another traced function)."""
    rng = np.random.default_rng(1)
    order = [arm for _ in range(groups) for arm in rng.permutation(ARMS).tolist()]
    calls = len(order) * block
    drift = np.linspace(1.0e-3, 1.5e-3, calls)
    steps = drift + np.array([costs_s[order[i // block]] for i in range(calls)])
    steps += rng.normal(0.0, 2e-6, calls)
    for start in range(0, calls, block):
        steps[start : start + SKIP_CALLS] += 0.5e-3
    return np.concatenate([[0.0], np.cumsum(steps)]), order


def test_each_arm_reads_its_own_cost_through_the_drift() -> None:
    costs = {"baseline": 0.0, "baseline-again": 0.0, "stoker": 20e-6, "stoker-unstamped": 8e-6}
    begins, order = synthetic_begins(costs, block=50, groups=200)
    base, read = arm_costs(begins, order, block=50)
    assert base == pytest.approx(1.25e-3, rel=0.05)
    assert read["stoker"].median_us == pytest.approx(20.0, abs=1.0)
    assert read["stoker-unstamped"].median_us == pytest.approx(8.0, abs=1.0)
    assert read["baseline-again"].median_us == pytest.approx(0.0, abs=1.0)
    assert read["stoker"].low_us <= read["stoker"].median_us <= read["stoker"].high_us
