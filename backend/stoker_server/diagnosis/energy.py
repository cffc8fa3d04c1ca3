"""A run's GPU energy split by what its steps were doing.

Each GPU reports its energy since the run's first reading (`energy_j`, cumulative: NVML's
counter, or power integrated where the driver has none). Between two consecutive readings of
a GPU (a window, usually the agent's sample interval) the energy drawn is attributed in
proportion to how that window's time was spent by the steps of the GPU's worker (rank):

- **starved**: a step was waiting for its input (from the step's start, for its measured
  wait: `[t, t + wait)`);
- **computing**: a step was running after its input arrived (`[t + wait, t + dur)`);
- **other**: no step ran (start-up, validation, epoch ends, checkpoints) or the step's wait
  is unknown (step 0 traces the train function).

Windows, not single samples: when steps are much shorter than a window, each window's share
is the sum of many steps' waits in it; when steps are longer, the overlap of each step's
wait and compute with the window counts. Within a window the power is taken as constant,
which is what a reading every second can know.
"""

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np


@dataclass
class EnergySplit:
    total_j: float = 0.0
    starved_j: float = 0.0
    computing_j: float = 0.0
    other_j: float = 0.0
    # (rank, gpu) → [total, starved, computing, other] joules
    per_gpu: dict[tuple[int, int], list[float]] = field(default_factory=dict)


class _Intervals:
    """Sorted, non-overlapping intervals; `covered(a, b)` is their total length in [a, b)."""

    def __init__(self, starts: np.ndarray, ends: np.ndarray) -> None:
        order = np.argsort(starts, kind="stable")
        self.starts = starts[order]
        self.ends = np.maximum(ends[order], self.starts)
        lengths = self.ends - self.starts
        self.before = np.concatenate(([0.0], np.cumsum(lengths)))  # covered before interval i

    def _upto(self, x: np.ndarray) -> np.ndarray:
        """Covered length before each x."""
        i = np.searchsorted(self.starts, x, side="right") - 1
        j = np.maximum(i, 0)
        partial = np.clip(x - self.starts[j], 0.0, self.ends[j] - self.starts[j])
        return np.where(i >= 0, self.before[j] + partial, 0.0)

    def covered(self, a: np.ndarray, b: np.ndarray) -> np.ndarray:
        if len(self.starts) == 0:
            return np.zeros_like(a)
        return self._upto(b) - self._upto(a)


def step_intervals(
    t: Sequence[float], dur: Sequence[float], wait: Sequence[float | None]
) -> tuple[_Intervals, _Intervals]:
    """(waiting, computing) intervals of one worker's steps; a step of unknown wait is in
    neither."""
    start = np.asarray(t, dtype=np.float64)
    duration = np.asarray(dur, dtype=np.float64)
    waited = np.asarray([np.nan if w is None else w for w in wait], dtype=np.float64)
    known = np.isfinite(waited)
    start, duration = start[known], duration[known]
    waited = np.minimum(waited[known], duration)
    return (
        _Intervals(start, start + waited),
        _Intervals(start + waited, start + duration),
    )


def split_energy(
    device: Sequence[tuple[int, int, float, float]],
    steps: Mapping[int, tuple[Sequence[float], Sequence[float], Sequence[float | None]]],
) -> EnergySplit:
    """Split energy by phase.

    Args:
        device: (rank, gpu, t, energy_j) rows with a known energy, any order.
        steps: rank → (t, dur, wait) columns of that worker's steps.
    """
    result = EnergySplit()
    by_gpu: dict[tuple[int, int], list[tuple[float, float]]] = {}
    for rank, gpu, at, joules in device:
        by_gpu.setdefault((rank, gpu), []).append((at, joules))
    intervals = {rank: step_intervals(*columns) for rank, columns in steps.items()}
    for (rank, gpu), rows in sorted(by_gpu.items()):
        rows.sort()
        t = np.asarray([r[0] for r in rows], dtype=np.float64)
        energy = np.asarray([r[1] for r in rows], dtype=np.float64)
        if len(t) < 2:
            result.per_gpu[(rank, gpu)] = [0.0, 0.0, 0.0, 0.0]
            continue
        a, b = t[:-1], t[1:]
        drawn = np.maximum(np.diff(energy), 0.0)
        length = b - a
        usable = length > 0
        a, b, drawn, length = a[usable], b[usable], drawn[usable], length[usable]
        if rank in intervals:
            waiting, computing = intervals[rank]
            starved_share = np.clip(waiting.covered(a, b) / length, 0.0, 1.0)
            computing_share = np.clip(computing.covered(a, b) / length, 0.0, 1.0 - starved_share)
        else:
            starved_share = computing_share = np.zeros_like(length)
        total = float(drawn.sum())
        starved = float((drawn * starved_share).sum())
        computing_j = float((drawn * computing_share).sum())
        other = max(0.0, total - starved - computing_j)
        result.per_gpu[(rank, gpu)] = [total, starved, computing_j, other]
        result.total_j += total
        result.starved_j += starved
        result.computing_j += computing_j
        result.other_j += other
    return result
