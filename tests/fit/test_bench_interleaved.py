"""bench/interleaved.py's reading of a fit's call begins: each arm's cost paired to the
baseline's block of the same group, through a drift larger than the costs."""

import numpy as np
import pytest

from bench.interleaved import ACROSS_TRACES, ARMS, SKIP_CALLS, arm_costs, arms_of


def synthetic_begins(
    costs_s: dict[str, float], block: int, groups: int, arms: tuple[str, ...] = ARMS
) -> tuple[np.ndarray, list[str]]:
    """Call begins of a fit whose step drifts from 1.0 to 1.5 ms, each arm adding its cost,
    the first calls of every block slowed 0.5 ms (the switch to another traced function)."""
    rng = np.random.default_rng(1)
    order = [arm for _ in range(groups) for arm in rng.permutation(arms).tolist()]
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


def test_stokers_path_across_traces_cancels_each_traces_own_speed() -> None:
    """Each trace runs at a speed of its own (here -30..+40 µs, plain and stamped alike, their
    mean 0): the mean over traces of stamped less plain reads what Stoker adds (12 µs), where
    the first trace alone reads 12 + 40."""
    arms = arms_of(4)
    assert arms[:4] == ARMS and len(arms) == 10
    own = {"baseline": 0.0, "baseline-t1": -30e-6, "baseline-t2": 25e-6, "baseline-t3": 5e-6}
    own |= {"stoker": 40e-6, "stoker-t1": -20e-6, "stoker-t2": -10e-6, "stoker-t3": -10e-6}
    costs = {
        arm: own[arm] + 12e-6 if arm.startswith("stoker-t") else own.get(arm, 0.0) for arm in arms
    }
    costs["stoker"] += 12e-6
    costs["stoker-unstamped"] = 5e-6
    begins, order = synthetic_begins(costs, block=40, groups=150, arms=arms)
    _, read = arm_costs(begins, order, block=40, traces=4)
    assert read["stoker"].median_us == pytest.approx(52.0, abs=1.5)
    assert read["baseline-t1"].median_us == pytest.approx(-30.0, abs=1.5)
    assert read[ACROSS_TRACES].median_us == pytest.approx(12.0, abs=1.5)
