"""Stragglers: the worker of a multi-worker job that holds the others back."""

import math
import statistics
from collections.abc import Sequence
from dataclasses import dataclass

from stoker_server.core.models import Run, RunPublic
from stoker_server.diagnosis.window import RunWindow
from trainer_agent.figures import ms_text, share_text
from trainer_agent.telemetry.throttle import SLOWING_MASK, throttle_words

# Stragglers: a worker waits at least this share of its steps on input, and this many times
# as much as any other worker; or its step net of input wait is this many times the median's.
STRAGGLER_MIN_WAIT_SHARE = 0.10
STRAGGLER_WAIT_FACTOR = 3.0
STRAGGLER_NET_RATIO = 1.25


@dataclass(frozen=True)
class WorkerTiming:
    """One worker's steps over the window: mean step time and the share spent on input."""

    rank: int
    host: str
    step_s: float
    wait_share: float | None
    # Clock-event reasons that slow the GPU down, seen on this worker's GPUs in the window.
    throttle: int = 0


@dataclass(frozen=True)
class Straggler:
    rank: int
    host: str
    # "input": its pipeline is slow; "compute": its own step is; "throttled": its own step is
    # and its GPU's clocks were slowed (thermal, power cap, ...)
    kind: str
    wait_share: float | None
    others_wait_share: float | None
    text: str


def own_step_times(workers: Sequence[WorkerTiming]) -> dict[int, float]:
    """Each worker's own time per step: its step time less what it spent waiting for the
    others in the collective (all-reduce). The workers of a synchronous job all take the
    same step time; one that waits longer on input holds the others back by as much, so a
    worker's wait for the others is estimated as the most any worker waits on input beyond
    its own wait. The slowest worker's own time is then the job's step."""
    waits = {w.rank: w.step_s * (w.wait_share or 0.0) for w in workers}
    most = max(waits.values(), default=0.0)
    return {w.rank: max(waits[w.rank], w.step_s - (most - waits[w.rank])) for w in workers}


def straggler_ratio(workers: Sequence[WorkerTiming]) -> float | None:
    """The slowest worker's own step time over the median worker's (1 when all keep pace);
    None with fewer than two workers."""
    own = own_step_times(workers)
    if len(own) < 2:
        return None
    median = statistics.median(own.values())
    return max(own.values()) / median if median > 0 else None


def find_straggler(workers: Sequence[WorkerTiming]) -> Straggler | None:
    """The worker that holds the job back, when one clearly does.

    By input: one worker waits on input at least `STRAGGLER_MIN_WAIT_SHARE` of its steps and
    `STRAGGLER_WAIT_FACTOR` times as much as any other; the others then show long steps with
    little input wait (they wait for it in the collective). By compute: no such worker, but
    one's step net of its input wait is `STRAGGLER_NET_RATIO` times the median worker's.
    """
    if len(workers) < 2:
        return None
    by_wait = sorted(workers, key=lambda w: w.wait_share or 0.0, reverse=True)
    slowest, others = by_wait[0], by_wait[1:]
    share = slowest.wait_share or 0.0
    others_share = others[0].wait_share or 0.0
    name = f"worker {slowest.rank}" + (f" ({slowest.host})" if slowest.host else "")
    if share >= STRAGGLER_MIN_WAIT_SHARE and share >= STRAGGLER_WAIT_FACTOR * others_share:
        below = max(1, math.ceil(others_share * 100 + 1e-9))
        others_text = "the other waits" if len(others) == 1 else "the others wait"
        return Straggler(
            rank=slowest.rank, host=slowest.host, kind="input", wait_share=share,
            others_wait_share=others_share,
            text=f"{name} waits {share_text(share)} on input while {others_text} < {below} %: "
            "its pipeline starves the whole job",
        )  # fmt: skip
    net = {w.rank: w.step_s * (1.0 - (w.wait_share or 0.0)) for w in workers}
    median = statistics.median(net.values())
    rank = max(net, key=lambda r: net[r])
    if median <= 0 or net[rank] < STRAGGLER_NET_RATIO * median:
        return None
    worker = next(w for w in workers if w.rank == rank)
    name = f"worker {rank}" + (f" ({worker.host})" if worker.host else "")
    reasons = throttle_words(worker.throttle)
    if reasons:
        return Straggler(
            rank=rank, host=worker.host, kind="throttled", wait_share=worker.wait_share,
            others_wait_share=None,
            text=f"{name} is slow because of {' and '.join(reasons)}, not its input: "
            f"{ms_text(net[rank])} per step net of input wait, {net[rank] / median:.1f}x the "
            f"median worker's {ms_text(median)}",
        )  # fmt: skip
    return Straggler(
        rank=rank, host=worker.host, kind="compute", wait_share=worker.wait_share,
        others_wait_share=None,
        text=f"{name} takes {ms_text(net[rank])} per step net of input wait, "
        f"{net[rank] / median:.1f}x the median worker's {ms_text(median)}: the others wait for it",
    )  # fmt: skip


def worker_hosts(run: Run | RunPublic) -> dict[int, str]:
    """Rank → host of the run's workers, from its summary."""
    if isinstance(run, RunPublic):
        return {w.rank: w.host for w in run.summary.workers}
    return {int(w["rank"]): w.get("host", "") for w in (run.summary or {}).get("workers", [])}


def worker_timings(window: RunWindow, *, min_steps: int) -> list[WorkerTiming]:
    """The window's workers with enough steps each to be compared (none with one worker)."""
    if len(window.workers) < 2:
        return []
    needed = max(2, min_steps // len(window.workers))
    slowed: dict[int, int] = {}
    for row in window.device:
        if row.throttle:
            slowed[row.rank] = slowed.get(row.rank, 0) | (int(row.throttle) & SLOWING_MASK)
    timings = []
    for rank, worker in sorted(window.workers.items()):
        mean = worker.mean_step_s()
        if mean is None or worker.step_count < needed:
            return []
        share = worker.input_wait_share() if worker.waited_count >= needed else None
        timings.append(
            WorkerTiming(rank, window.hosts.get(rank, ""), mean, share, slowed.get(rank, 0))
        )
    return timings
