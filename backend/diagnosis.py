"""Is the GPU being fed? A per-run sliding window over the incoming stream, and the verdict.

Each run being watched has a `RunWindow` in memory, fed by ingest with every committed
batch. It keeps the last `window_s` seconds of steps, device and host samples together with
running sums, so a verdict costs the same however long the run and however many runs there
are. `diagnose` turns a window into a verdict with its evidence and advice.

Input-bound levels follow the TensorFlow profiler: highly input-bound when 20 % or more of
step time is spent waiting for input, moderately from 5 %.
"""

import math
import statistics
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from itertools import chain
from typing import Any

import numpy as np
from pydantic import BaseModel

from backend.models import Run, RunPublic
from backend.summary import timed_steps

HIGHLY_INPUT_BOUND = 0.20
MODERATELY_INPUT_BOUND = 0.05
# Fallback (no measured wait): what utilization and host CPU levels mean.
LOW_UTIL_PCT = 70.0
VERY_LOW_UTIL_PCT = 50.0
CPU_SATURATED_PCT = 85.0
CPU_IDLE_PCT = 50.0
HIGH_STEP_CV = 0.5
# Stragglers: a worker waits at least this share of its steps on input, and this many times
# as much as any other worker; or its step net of input wait is this many times the median's.
STRAGGLER_MIN_WAIT_SHARE = 0.10
STRAGGLER_WAIT_FACTOR = 3.0
STRAGGLER_NET_RATIO = 1.25
RECENT_DURATIONS = 256
STEP_CHUNKS_PER_WINDOW = 32
PENDING_STEP_ROWS = 50_000  # fold sooner than the next read when this many steps wait


class Verdict(StrEnum):
    highly_input_bound = "highly_input_bound"
    moderately_input_bound = "moderately_input_bound"
    not_input_bound = "not_input_bound"
    stalled = "stalled"
    insufficient_data = "insufficient_data"


class Evidence(BaseModel):
    key: str
    value: float | int | bool | str | None
    text: str


class Diagnosis(BaseModel):
    run_id: int
    verdict: Verdict
    input_wait_share: float | None
    source: str  # "measured" | "fallback"
    window_s: float
    steps_in_window: int
    evidence: list[Evidence]
    advice: list[str]


def _pct(share: float) -> str:
    return f"{share * 100:.0f} %"


def _ms(seconds: float) -> str:
    return f"{seconds * 1000:.1f} ms"


@dataclass(slots=True)
class _Sums:
    """Running sums over the window's rows; values leave the sums as rows leave the window."""

    n: float = 0.0
    dur: float = 0.0
    dur2: float = 0.0
    waited_n: float = 0.0
    waited_dur: float = 0.0
    wait: float = 0.0
    samples: float = 0.0
    sized_dur: float = 0.0
    util_n: float = 0.0
    util: float = 0.0
    cpu_n: float = 0.0
    cpu: float = 0.0

    def get(self, key: str) -> float:
        return max(0.0, getattr(self, key))


@dataclass
class RunWindow:
    """The last `window_s` seconds of one run, by the agent's own clock.

    Steps, device samples and host samples each slide against their own newest timestamp,
    so a skewed agent clock does not matter. Arrival times (`*_at`) are the server's
    monotonic clock, used for staleness and stall detection.
    """

    run_id: int
    window_s: float
    project: str = "default"
    name: str = ""
    running: bool = True
    environment: dict[str, Any] = field(default_factory=dict)
    # Chunks of steps: (newest end, n, dur, dur², waited n, waited dur, wait, samples, sized dur).
    steps: deque[tuple[float, ...]] = field(default_factory=deque)
    device: deque[tuple[float, int, float | None, float | None, float | None]] = field(
        default_factory=deque
    )
    host: deque[tuple[float, float | None, float | None]] = field(default_factory=deque)
    _sums: _Sums = field(default_factory=_Sums)
    # Step batches not yet folded into the chunks (see add_steps).
    _pending_steps: list[tuple[Sequence[Any], ...]] = field(default_factory=list)
    _pending_rows: int = 0
    recent_durations: deque[float] = field(default_factory=lambda: deque(maxlen=RECENT_DURATIONS))
    total_steps: int = 0
    last_step_at: float | None = None
    last_data_at: float | None = None
    last_device_at: float | None = None
    newest_device_t: float = -math.inf
    newest_step_t: float = -math.inf
    dirty: bool = True  # fed since the last verdict
    newest_host_t: float = -math.inf
    # Each worker's own steps (a window per rank, steps only) and its host, for stragglers.
    workers: dict[int, "RunWindow"] = field(default_factory=dict)
    hosts: dict[int, str] = field(default_factory=dict)

    # -- feeding ---------------------------------------------------------------------------

    def add_steps(
        self,
        *,
        now: float,
        step: Sequence[int],
        t: Sequence[float],
        dur: Sequence[float],
        wait: Sequence[float | None],
        batch_size: Sequence[int | None],
        rank: int | None = None,
    ) -> None:
        """Slide the window over a batch of steps (of worker `rank`, whose own window slides
        too, when given).

        The batch is kept as it came and folded into the window when the window is read
        (a detector tick) or when many rows wait: one pass over many batches instead of one
        per batch, which at hundreds of batches a second mattered on the event loop.
        """
        if not len(step):
            return
        if rank is not None:
            worker = self.workers.get(rank)
            if worker is None:
                worker = self.workers[rank] = RunWindow(self.run_id, self.window_s)
            worker.add_steps(now=now, step=step, t=t, dur=dur, wait=wait, batch_size=batch_size)
        self.total_steps += len(step)
        self.last_step_at = now
        self.last_data_at = now
        self._pending_steps.append((step, t, dur, wait, batch_size))
        self._pending_rows += len(step)
        if self._pending_rows >= PENDING_STEP_ROWS:
            self._fold_steps()

    @property
    def sums(self) -> _Sums:
        """Running sums over the window's steps and samples (pending steps folded in)."""
        self._fold_steps()
        return self._sums

    def _fold_steps(self) -> None:
        """Add the pending batches to the window's chunks of steps.

        The window keeps steps in chunks of at most `window_s / STEP_CHUNKS_PER_WINDOW` of the
        agent's time, each with its sums, so the window's edge is that coarse.
        """
        if not self._pending_steps:
            return
        pending, self._pending_steps, self._pending_rows = self._pending_steps, [], 0

        def column(i: int) -> list[Any]:
            return list(chain.from_iterable(p[i] for p in pending))

        timed = timed_steps(*(column(i) for i in range(5)))
        d, end, w, bs = timed.dur, timed.end, timed.wait, timed.batch_size
        if not len(d):
            return
        waited, sized = timed.waited, timed.sized
        zero = np.zeros_like(d)
        grain = self.window_s / STEP_CHUNKS_PER_WINDOW
        slot = np.floor(end / grain)
        starts = np.concatenate(([0], np.flatnonzero(np.diff(slot)) + 1))
        columns = [
            np.maximum.reduceat(end, starts),
            *(
                np.add.reduceat(values, starts)
                for values in (
                    np.ones_like(d),
                    d,
                    d * d,
                    waited.astype(np.float64),
                    np.where(waited, d, zero),
                    np.where(waited, np.minimum(w, d), zero),
                    np.where(sized, bs, zero),
                    np.where(sized, d, zero),
                )
            ),
        ]
        self.newest_step_t = max(self.newest_step_t, float(end.max()))
        s = self._sums
        for chunk in zip(*(c.tolist() for c in columns), strict=True):
            self.steps.append(chunk)
            s.n += chunk[1]
            s.dur += chunk[2]
            s.dur2 += chunk[3]
            s.waited_n += chunk[4]
            s.waited_dur += chunk[5]
            s.wait += chunk[6]
            s.samples += chunk[7]
            s.sized_dur += chunk[8]
        self.recent_durations.extend(d[-RECENT_DURATIONS:].tolist())
        self._trim_steps()

    def _trim_steps(self) -> None:
        steps = self.steps
        if not steps:
            return
        horizon = self.newest_step_t - self.window_s
        s = self._sums
        while steps and steps[0][0] < horizon:
            _, n, dur, dur2, waited_n, waited_dur, wait, samples, sized_dur = steps.popleft()
            s.n -= n
            s.dur -= dur
            s.dur2 -= dur2
            s.waited_n -= waited_n
            s.waited_dur -= waited_dur
            s.wait -= wait
            s.samples -= samples
            s.sized_dur -= sized_dur
        if not steps:  # no float drift survives an emptied window
            s.n = s.dur = s.dur2 = s.waited_n = s.waited_dur = s.wait = 0.0
            s.samples = s.sized_dur = 0.0

    def add_device(
        self,
        *,
        now: float,
        t: Sequence[float],
        gpu: Sequence[int],
        util: Sequence[float | None],
        mem_used: Sequence[float | None],
        mem_total: Sequence[float | None],
        temp_c: Sequence[float | None],
    ) -> None:
        if not t:
            return
        s = self._sums
        for i, ti in enumerate(t):
            used, total = mem_used[i], mem_total[i]
            share = used / total if used is not None and total else None
            u = util[i]
            self.device.append((ti, gpu[i], u, share, temp_c[i]))
            if u is not None:
                s.util_n += 1
                s.util += u
        self.last_data_at = now
        self.last_device_at = now
        self.newest_device_t = max(self.newest_device_t, max(t))
        horizon = self.newest_device_t - self.window_s
        while self.device and self.device[0][0] < horizon:
            u = self.device.popleft()[2]
            if u is not None:
                s.util_n -= 1
                s.util -= u

    def add_host(
        self,
        *,
        now: float,
        t: Sequence[float],
        proc_cpu: Sequence[float | None],
        sys_cpu: Sequence[float | None],
    ) -> None:
        if not t:
            return
        s = self._sums
        for i, ti in enumerate(t):
            self.host.append((ti, proc_cpu[i], sys_cpu[i]))
            c = sys_cpu[i]
            if c is not None:
                s.cpu_n += 1
                s.cpu += c
        self.last_data_at = now
        self.newest_host_t = max(self.newest_host_t, max(t))
        horizon = self.newest_host_t - self.window_s
        while self.host and self.host[0][0] < horizon:
            c = self.host.popleft()[2]
            if c is not None:
                s.cpu_n -= 1
                s.cpu -= c

    # -- reading ---------------------------------------------------------------------------

    @property
    def step_count(self) -> int:
        return round(self.sums.get("n"))

    @property
    def waited_count(self) -> int:
        return round(self.sums.get("waited_n"))

    def input_wait_share(self) -> float | None:
        waited_dur = self.sums.get("waited_dur")
        if self.waited_count == 0 or waited_dur <= 0:
            return None
        return min(1.0, self.sums.get("wait") / waited_dur)

    def mean_step_s(self) -> float | None:
        n = self.sums.get("n")
        return self.sums.get("dur") / n if n >= 1 else None

    def step_cv(self) -> float | None:
        """Coefficient of variation of step time in the window (std / mean)."""
        n = self.sums.get("n")
        if n < 2:
            return None
        mean = self.sums.get("dur") / n
        var = max(0.0, self.sums.get("dur2") / n - mean * mean)
        return math.sqrt(var) / mean if mean > 0 else None

    def samples_per_s(self) -> float | None:
        sized = self.sums.get("sized_dur")
        return self.sums.get("samples") / sized if sized > 0 else None

    def mean_util(self) -> float | None:
        n = self.sums.get("util_n")
        return self.sums.get("util") / n if n >= 1 else None

    def mean_sys_cpu(self) -> float | None:
        n = self.sums.get("cpu_n")
        return self.sums.get("cpu") / n if n >= 1 else None

    def recent_device(self, span_s: float) -> list[tuple[float, int, Any, Any, Any]]:
        """Device samples of the last `span_s` seconds (by the agent's clock), newest first."""
        if not self.device:
            return []
        horizon = self.device[-1][0] - span_s
        rows = []
        for row in reversed(self.device):
            if row[0] < horizon:
                break
            rows.append(row)
        return rows

    def median_step_s(self) -> float | None:
        self._fold_steps()
        return statistics.median(self.recent_durations) if self.recent_durations else None

    def stall_threshold_s(self, *, min_s: float, factor: float) -> float:
        median = self.median_step_s()
        return max(min_s, factor * median) if median is not None else min_s

    def seconds_without_steps(self, now: float) -> float | None:
        return None if self.last_step_at is None else max(0.0, now - self.last_step_at)


@dataclass(frozen=True)
class WorkerTiming:
    """One worker's steps over the window: mean step time and the share spent on input."""

    rank: int
    host: str
    step_s: float
    wait_share: float | None


@dataclass(frozen=True)
class Straggler:
    rank: int
    host: str
    kind: str  # "input": its pipeline is slow; "compute": its own step is
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
            text=f"{name} waits {_pct(share)} on input while {others_text} < {below} %: "
            "its pipeline starves the whole job",
        )  # fmt: skip
    net = {w.rank: w.step_s * (1.0 - (w.wait_share or 0.0)) for w in workers}
    median = statistics.median(net.values())
    rank = max(net, key=lambda r: net[r])
    if median <= 0 or net[rank] < STRAGGLER_NET_RATIO * median:
        return None
    worker = next(w for w in workers if w.rank == rank)
    name = f"worker {rank}" + (f" ({worker.host})" if worker.host else "")
    return Straggler(
        rank=rank, host=worker.host, kind="compute", wait_share=worker.wait_share,
        others_wait_share=None,
        text=f"{name} takes {_ms(net[rank])} per step net of input wait, "
        f"{net[rank] / median:.1f}x the median worker's {_ms(median)}: the others wait for it",
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
    timings = []
    for rank, worker in sorted(window.workers.items()):
        mean = worker.mean_step_s()
        if mean is None or worker.step_count < needed:
            return []
        share = worker.input_wait_share() if worker.waited_count >= needed else None
        timings.append(WorkerTiming(rank, window.hosts.get(rank, ""), mean, share))
    return timings


def _pipeline(environment: dict[str, Any]) -> dict[str, Any]:
    """What the agent reported about the input pipeline (wrap inspects the dataset)."""
    for key in ("input_pipeline", "pipeline", "dataset"):
        value = environment.get(key)
        if isinstance(value, dict):
            return value
    return {}


def _steps_per_execution(environment: dict[str, Any]) -> int:
    value = environment.get("steps_per_execution")
    return value if isinstance(value, int) and not isinstance(value, bool) else 1


def diagnose(
    window: RunWindow,
    *,
    now: float,
    connected: bool,
    min_steps: int,
    stall_min_s: float,
    stall_step_factor: float,
    highly: float = HIGHLY_INPUT_BOUND,
    moderately: float = MODERATELY_INPUT_BOUND,
) -> Diagnosis:
    """The verdict for one run's window, with the numbers behind it and what to try.

    `connected`: an agent of this run is connected (a stall needs a live process)."""
    evidence: list[Evidence] = []
    advice: list[str] = []
    share = window.input_wait_share()
    util = window.mean_util()
    cpu = window.mean_sys_cpu()
    mean_step = window.mean_step_s()
    pipeline = _pipeline(window.environment)
    w = window.window_s
    n = window.step_count
    source = "measured" if window.waited_count else "fallback"

    def result(verdict: Verdict, wait_share: float | None = None) -> Diagnosis:
        return Diagnosis(
            run_id=window.run_id,
            verdict=verdict,
            input_wait_share=wait_share,
            source=source,
            window_s=w,
            steps_in_window=n,
            evidence=evidence,
            advice=advice,
        )

    def add(key: str, value: Any, text: str) -> None:
        evidence.append(Evidence(key=key, value=value, text=text))

    # Stalled: steps stopped while the agent is still connected.
    idle = window.seconds_without_steps(now)
    limit = window.stall_threshold_s(min_s=stall_min_s, factor=stall_step_factor)
    if window.running and idle is not None and idle >= limit and connected:
        median = window.median_step_s()
        add("seconds_without_steps", round(idle, 1), f"no step for {idle:.0f} s")
        add(
            "stall_threshold_s",
            round(limit, 1),
            f"stall threshold {limit:.0f} s = max({stall_min_s:g} s, "
            f"{stall_step_factor:g} x median step time {_ms(median or 0)})",
        )
        add("agent_connected", True, "the training process is still connected")
        recent_util = [r[2] for r in window.recent_device(10.0) if r[2] is not None]
        if recent_util:
            u = sum(recent_util) / len(recent_util)
            add("gpu_util_pct", round(u, 1), f"GPU utilization {u:.0f} % in the last samples")
            if u >= LOW_UTIL_PCT:
                advice.append(
                    f"The GPU is busy ({u:.0f} %) but no step completes: typical of a hung "
                    "collective (all-reduce) in a distributed job. Check that every worker "
                    "is alive and not out of memory; one stuck replica stalls them all."
                )
            else:
                advice.append(
                    "The GPU is idle and no step completes: the input pipeline may be "
                    "blocked (a reader waiting on storage or a queue), or the training loop "
                    "is stuck in Python. A stack dump (py-spy dump --pid) shows where."
                )
        else:
            advice.append(
                "Steps stopped while the process is alive. A hung collective (all-reduce) "
                "shows high GPU utilization and no steps; an idle GPU points at a blocked "
                "input pipeline or Python code. A stack dump (py-spy dump --pid) shows where."
            )
        return result(Verdict.stalled, share)

    if mean_step is not None:
        add("mean_step_ms", round(mean_step * 1000, 2), f"mean step time {_ms(mean_step)}")
    if util is not None:
        add("gpu_util_pct", round(util, 1), f"GPU utilization averages {util:.0f} %")
    if cpu is not None:
        add("host_cpu_pct", round(cpu, 1), f"host CPU busy {cpu:.0f} %")
    if "prefetch" in pipeline:
        has = bool(pipeline["prefetch"])
        add("prefetch", has, "the pipeline prefetches" if has else "the pipeline does not prefetch")
    if pipeline.get("serial_map") and not pipeline.get("parallel_map"):
        add("parallel_map", False, "map runs serially (no num_parallel_calls)")
    straggler = find_straggler(worker_timings(window, min_steps=min_steps))
    if straggler is not None:
        add("straggler", straggler.rank, straggler.text)
        advice.append(
            f"Worker {straggler.rank} holds every worker back: "
            + (
                "speed up its input pipeline (its data source, its host's CPU, its "
                "num_parallel_calls and prefetch) or give it a faster share of the data."
                if straggler.kind == "input"
                else "check its device and host (a slower or throttled GPU, a busy host)."
            )
        )

    if source == "measured" and window.waited_count >= min_steps and share is not None:
        waited = window.waited_count
        per_step_wait = window.sums.get("wait") / waited
        per_step = window.sums.get("waited_dur") / waited
        add(
            "input_wait_share",
            round(share, 4),
            f"input wait is {_pct(share)} of step time over the last {w:g} s "
            f"({waited} steps: {_ms(per_step_wait)} waiting of {_ms(per_step)} per step)",
        )
        executed = _steps_per_execution(window.environment)
        if executed > 1:
            add(
                "input_wait_estimated",
                True,
                f"with steps_per_execution = {executed}, TensorFlow fetches the next batch "
                "while a step computes, so the wait is estimated: the time the steps sat "
                "idle for their batch, not the time each fetch was blocked",
            )
        # Compared as shown (to a millionth): a share of exactly 20 % is 20 %, whatever
        # order the floating-point sums happened in.
        if round(share, 6) >= highly:
            verdict = Verdict.highly_input_bound
        elif round(share, 6) >= moderately:
            verdict = Verdict.moderately_input_bound
        else:
            verdict = Verdict.not_input_bound
        if verdict != Verdict.not_input_bound:
            _input_advice(advice, cpu=cpu, pipeline=pipeline)
        else:
            _device_advice(advice, util=util, mean_step=mean_step)
        return result(verdict, share)
    if source == "measured":
        # Wait is measured but the window does not hold enough steps yet: say only that.
        add(
            "measured_steps",
            window.waited_count,
            f"{window.waited_count} of the {min_steps} measured steps a verdict needs so far",
        )
        advice.append("Keep training: the verdict appears once enough steps are measured.")
        return result(Verdict.insufficient_data, share)

    # Fallback: input wait not measured. Infer from device utilization, step-time variance
    # and host CPU, and say so.
    add(
        "source",
        "fallback",
        "input wait is not measured (wrap the dataset: model.fit(cb.wrap(ds)), or iterate "
        "with mon.iterate(ds)); this verdict is inferred",
    )
    cv = window.step_cv()
    if cv is not None:
        add("step_time_cv", round(cv, 3), f"step time varies by {cv * 100:.0f} % (std/mean)")
    if n < min_steps or util is None:
        if n >= min_steps and util is None:
            add("gpu_util_pct", None, "no GPU utilization reported (no NVIDIA driver/NVML?)")
        advice.append(
            "Wrap the input pipeline so Stoker measures input wait directly: "
            "model.fit(cb.wrap(train_ds), callbacks=[cb])."
        )
        return result(Verdict.insufficient_data)
    erratic = cv is not None and cv >= HIGH_STEP_CV
    saturated = cpu is not None and cpu >= CPU_SATURATED_PCT
    if util < VERY_LOW_UTIL_PCT and (erratic or saturated):
        verdict = Verdict.highly_input_bound
    elif util < LOW_UTIL_PCT and (erratic or saturated or util < VERY_LOW_UTIL_PCT):
        verdict = Verdict.moderately_input_bound
    else:
        verdict = Verdict.not_input_bound
    if verdict != Verdict.not_input_bound:
        _input_advice(advice, cpu=cpu, pipeline=pipeline)
    else:
        _device_advice(advice, util=util, mean_step=mean_step)
    advice.append(
        "Wrap the dataset (model.fit(cb.wrap(train_ds), ...)) so input wait is measured "
        "instead of inferred."
    )
    return result(verdict)


def _input_advice(advice: list[str], *, cpu: float | None, pipeline: dict[str, Any]) -> None:
    if pipeline.get("prefetch") is False:
        advice.append(
            "The pipeline does not prefetch: end it with .prefetch(tf.data.AUTOTUNE) so the "
            "next batch is prepared while the device computes."
        )
    if pipeline.get("serial_map") and not pipeline.get("parallel_map"):
        advice.append(
            "map runs one element at a time: pass num_parallel_calls=tf.data.AUTOTUNE "
            "(and deterministic=False if order does not matter)."
        )
    if cpu is not None and cpu >= CPU_SATURATED_PCT:
        advice.append(
            f"The host CPU is saturated ({cpu:.0f} %): preprocessing is CPU-bound. "
            "Parallelize map with num_parallel_calls=tf.data.AUTOTUNE, .cache() after "
            "expensive decoding, preprocess offline (resize and normalize once), and move "
            "augmentation onto the device (Keras preprocessing layers inside the model)."
        )
    elif cpu is not None and cpu < CPU_IDLE_PCT:
        advice.append(
            f"The host CPU is mostly idle ({cpu:.0f} %) while the step waits: the pipeline is "
            "I/O-bound or serial. Add .prefetch(tf.data.AUTOTUNE), read files in parallel "
            "with interleave(..., num_parallel_calls=tf.data.AUTOTUNE), and give map "
            "num_parallel_calls=tf.data.AUTOTUNE."
        )
    else:
        advice.append(
            "Feed the device faster: map(..., num_parallel_calls=tf.data.AUTOTUNE), "
            ".cache() after expensive loading when the data fits, and end the pipeline "
            "with .prefetch(tf.data.AUTOTUNE); use interleave to read many files in "
            "parallel and preprocess offline what does not change between epochs."
        )


def _device_advice(advice: list[str], *, util: float | None, mean_step: float | None) -> None:
    if util is not None and util < LOW_UTIL_PCT:
        advice.append(
            f"GPU utilization is low ({util:.0f} %) without input wait: steps are too small "
            "or host-side overhead dominates. Try a larger batch, "
            "model.compile(..., jit_compile=True), and steps_per_execution to run several "
            "steps per call."
        )
    elif util is None and mean_step is not None and mean_step < 0.005:
        advice.append(
            f"Steps are short ({_ms(mean_step)}): per-step host overhead may dominate. "
            "steps_per_execution in compile() and a larger batch help."
        )
    if not advice:
        advice.append("The input pipeline keeps up: nothing to change on the input side.")
