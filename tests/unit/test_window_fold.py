"""The window's fold of pending step batches, against a per-step reference in plain Python."""

import math
import random
from typing import Any

import pytest

from stoker_server.diagnosis.window import STEP_CHUNKS_PER_WINDOW, RunWindow

FIELDS = ("n", "dur", "dur2", "waited_n", "waited_dur", "wait", "samples", "sized_dur")


def _batch(rng: random.Random, first: int, t0: float, n: int, dt: float) -> dict[str, Any]:
    return {
        "step": list(range(first, first + n)),
        "t": [t0 + i * dt for i in range(n)],
        "dur": [dt * (0.5 + rng.random() / 2) for _ in range(n)],
        "wait": [None if rng.random() < 0.3 else dt * rng.random() for _ in range(n)],
        "batch_size": [None if rng.random() < 0.3 else 64 for _ in range(n)],
    }


def _reference(folds: list[list[dict[str, Any]]], window_s: float) -> list[tuple[float, ...]]:
    """The window's chunks, step by step: each fold's steps (step 0 left out) cut where the
    agent-time slot changes, appended, then the oldest chunks out of the window dropped."""
    grain = window_s / STEP_CHUNKS_PER_WINDOW
    chunks: list[list[float]] = []
    newest = -math.inf
    for fold in folds:
        slot = None
        for b in fold:
            columns = (b[k] for k in ("step", "t", "dur", "wait", "batch_size"))
            for s, t, d, w, bs in zip(*columns, strict=True):
                if s == 0:
                    continue
                end = t + d
                if math.floor(end / grain) != slot:
                    slot = math.floor(end / grain)
                    chunks.append([end, *([0.0] * len(FIELDS))])
                c = chunks[-1]
                c[0] = max(c[0], end)
                waited = w is not None
                sized = bs is not None
                for i, v in enumerate(
                    (1, d, d * d, waited, d if waited else 0, min(w, d) if waited else 0,
                     bs if sized else 0, d if sized else 0),
                ):  # fmt: skip
                    c[i + 1] += v
                newest = max(newest, end)
        while chunks and chunks[0][0] < newest - window_s:
            chunks.pop(0)
    return [tuple(c) for c in chunks]


def _check(window: RunWindow, expected: list[tuple[float, ...]]) -> None:
    sums = window.sums  # folds what waits
    assert len(window.steps) == len(expected)
    for chunk, want in zip(window.steps, expected, strict=True):
        assert tuple(chunk) == pytest.approx(want, rel=1e-12)
    for i, name in enumerate(FIELDS):
        exact = math.fsum(c[i + 1] for c in expected)
        assert getattr(sums, name) == pytest.approx(exact, rel=1e-12, abs=1e-12), name


@pytest.mark.parametrize("dt", [1e-3, 0.05, 2.0])  # chunks of many steps .. a backlog of chunks
def test_fold_of_many_batches_and_workers_equals_the_per_step_reference(dt: float) -> None:
    rng = random.Random(7)
    window = RunWindow(run_id=1, window_s=30.0)
    folds: dict[int | None, list[list[dict[str, Any]]]] = {None: [], 0: [], 1: []}
    first, t0 = 0, 1.7e9
    for fold in range(4):
        for ranked in folds.values():
            ranked.append([])
        for _ in range(rng.randint(1, 6)):
            n = rng.choice([1, 40, 700])
            rank = rng.choice([0, 1])
            b = _batch(rng, first, t0, n, dt)
            first, t0 = first + n, t0 + n * dt
            window.add_steps(now=float(fold), rank=rank, **b)
            folds[None][-1].append(b)
            folds[rank][-1].append(b)
        assert (
            window.sums.n > 0
        )  # a detector's read folds the run's window; the workers' stay pending
    _check(window, _reference(folds[None], 30.0))
    for rank in (0, 1):  # a worker's batches, converted in the run's folds, fold at once
        whole = [b for fold in folds[rank] for b in fold]
        _check(window.workers[rank], _reference([whole], 30.0))


def test_sized_steps_that_left_the_window_leave_no_throughput() -> None:
    window = RunWindow(run_id=1, window_s=10.0)
    sized: dict[str, Any] = {"step": list(range(1, 2001)), "t": [i * 0.1 for i in range(2000)],
             "dur": [0.1] * 2000, "wait": [0.01] * 2000, "batch_size": [32] * 2000}  # fmt: skip
    window.add_steps(now=0.0, **sized)
    assert window.samples_per_s() == pytest.approx(320.0)
    later: dict[str, Any] = {
        **sized,
        "step": list(range(2001, 4001)),
        "t": [200 + i * 0.1 for i in range(2000)],
        "batch_size": [None] * 2000,
    }
    window.add_steps(now=1.0, **later)
    assert window.sums.samples == 0.0 and window.sums.sized_dur == 0.0
    assert window.samples_per_s() is None
    grain_steps = 10 / STEP_CHUNKS_PER_WINDOW / 0.1  # the window's edge is a chunk wide
    assert window.step_count == pytest.approx(10 / 0.1, abs=grain_steps + 1)
