"""A per-run sliding window over the incoming stream: what a verdict is computed from.

Each run being watched has a `RunWindow` in memory, fed by ingest with every committed
batch. It keeps the last `window_s` seconds of steps, device and host samples together with
running sums, so a verdict costs the same however long the run and however many runs there
are.
"""

import math
import statistics
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass, field
from itertools import chain
from typing import Any, NamedTuple

import numpy as np

from stoker_server.ingest.summary import summarize, timed_steps

RECENT_DURATIONS = 256
STEP_CHUNKS_PER_WINDOW = 32
PENDING_STEP_ROWS = 50_000  # fold sooner than the next read when this many steps wait


class StepChunk(NamedTuple):
    """Steps of one slice of the agent's time, summed (see RunWindow._fold_steps)."""

    end: float  # the newest step's end
    n: float
    dur: float
    dur2: float  # sum of squared step times
    waited_n: float  # steps with a measured input wait
    waited_dur: float  # their step time
    wait: float  # their input wait (at most their step time each)
    samples: float  # samples of the steps with a known batch size
    sized_dur: float  # their step time


@dataclass(slots=True)
class _PendingSteps:
    """One batch of steps waiting to be folded, shared by the run's window and its worker's:
    its columns become arrays once, in whichever window folds first."""

    columns: tuple[Sequence[Any], ...]  # step, t, dur, wait, batch_size as they came
    arrays: tuple[np.ndarray, ...] | None = None

    @staticmethod
    def convert(pending: list["_PendingSteps"]) -> None:
        """Give every batch of `pending` its arrays, in one conversion of all that lack them."""
        todo = [p for p in pending if p.arrays is None]
        if not todo:
            return
        dtypes = (np.int64, np.float64, np.float64, np.float64, np.float64)
        if len(todo) == 1:
            todo[0].arrays = tuple(
                np.asarray(c, dtype=dt) for c, dt in zip(todo[0].columns, dtypes, strict=True)
            )
        else:
            cuts = np.cumsum([len(p.columns[0]) for p in todo])[:-1]
            split = [
                np.split(
                    np.asarray(list(chain.from_iterable(p.columns[i] for p in todo)), dt), cuts
                )
                for i, dt in enumerate(dtypes)
            ]
            for k, p in enumerate(todo):
                p.arrays = tuple(column[k] for column in split)
        for p in todo:
            p.columns = ()


class DeviceRow(NamedTuple):
    t: float
    gpu: int
    util: float | None
    mem_share: float | None  # memory used / total
    temp_c: float | None
    sm_util: float | None = None  # NVML GPM, percent (null without GPM)
    tensor_util: float | None = None
    rank: int = 0
    throttle: int | None = None  # NVML clock-event reasons bitmask


class HostRow(NamedTuple):
    t: float
    proc_cpu: float | None
    sys_cpu: float | None


@dataclass(frozen=True)
class WholeRun:
    """An ended run's figures over all its steps, read from its stored statistics as its
    summary reads them: the input wait its verdict is judged on, its step count and its
    median step time, the same numbers its summary (the run page, the list, compare) shows."""

    share: float | None
    waited_steps: int
    timed_steps: int  # every step but step 0 (tracing, compilation)
    steps: int  # the run's steps, as its summary counts them
    median_step_s: float | None

    @classmethod
    def of(cls, stats: dict[str, Any]) -> "WholeRun":
        waited_dur = float(stats.get("waited_dur_sum_s", 0.0))
        wait = float(stats.get("wait_sum_s", 0.0))
        timed = int(stats.get("timed_steps", 0))
        # Runs stored before `waited_steps` was counted: every timed step, when all waited.
        waited = int(stats.get("waited_steps", timed) if waited_dur else 0)
        summary = summarize(stats) if stats else None
        median_ms = summary.step_time_ms_median if summary is not None else None
        return cls(
            share=wait / waited_dur if waited_dur > 0 else None,
            waited_steps=waited,
            timed_steps=max(timed, waited),
            steps=summary.steps if summary is not None else 0,
            median_step_s=None if median_ms is None else median_ms / 1000,
        )


@dataclass(slots=True)
class Sums:
    """Running sums over the window's rows; values leave the sums as rows leave the window.
    Subtraction can leave a tiny negative float: read them through `RunWindow`, which clamps."""

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


def _clamped(total: float) -> float:
    return max(0.0, total)


@dataclass
class RunWindow:
    """The last `window_s` seconds of one run, by the agent's own clock.

    Steps, device samples and host samples each slide against their own newest timestamp,
    so a skewed agent clock does not matter. Arrival times (`*_at`) are the server's
    monotonic clock, used for staleness and stall detection.

    Past 300 lines because each figure the verdict and the rules read (shares, medians,
    per-worker timings, recent device rows) is folded in as rows arrive, beside the rows it
    is folded from: the ingest side pays a few microseconds per row, the tick none.
    """

    run_id: int
    window_s: float
    project: str = "default"
    name: str = ""
    running: bool = True
    environment: dict[str, Any] = field(default_factory=dict)
    steps: deque[StepChunk] = field(default_factory=deque)
    device: deque[DeviceRow] = field(default_factory=deque)
    host: deque[HostRow] = field(default_factory=deque)
    _sums: Sums = field(default_factory=Sums)
    # Step batches not yet folded into the chunks (see add_steps).
    _pending_steps: list[_PendingSteps] = field(default_factory=list)
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
    # An ended run's whole-run input wait: its verdict is judged on it instead of the window's.
    whole_run: WholeRun | None = None

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
        if len(step):
            self._add_pending(_PendingSteps((step, t, dur, wait, batch_size)), now, rank)

    def add_step_arrays(
        self, *, now: float, arrays: tuple[np.ndarray, ...], rank: int | None = None
    ) -> None:
        """`add_steps` of a batch already made arrays (StepColumns.arrays(): step, t, dur,
        wait and batch_size, NaN where unknown)."""
        if len(arrays[0]):
            self._add_pending(_PendingSteps((), arrays), now, rank)

    def _add_pending(self, batch: _PendingSteps, now: float, rank: int | None) -> None:
        # Counted first: the worker's window may fold the shared batch at once, which turns
        # its columns into arrays and lets go of the columns.
        rows = len(batch.arrays[0]) if batch.arrays is not None else len(batch.columns[0])
        if rank is not None:
            worker = self.workers.get(rank)
            if worker is None:
                worker = self.workers[rank] = RunWindow(self.run_id, self.window_s)
            worker._add_pending(batch, now, None)
        self.total_steps += rows
        self.last_step_at = now
        self.last_data_at = now
        self._pending_steps.append(batch)
        self._pending_rows += rows
        if self._pending_rows >= PENDING_STEP_ROWS:
            self._fold_steps()

    @property
    def sums(self) -> Sums:
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
        _PendingSteps.convert(pending)
        arrays = [p.arrays for p in pending if p.arrays is not None]
        if len(arrays) == 1:
            timed = timed_steps(*arrays[0])
        else:
            timed = timed_steps(*(np.concatenate(c) for c in zip(*arrays, strict=True)))
        d, end, w, bs = timed.dur, timed.end, timed.wait, timed.batch_size
        if not len(d):
            return
        waited, sized = timed.waited, timed.sized
        self.recent_durations.extend(d[-RECENT_DURATIONS:].tolist())
        grain = self.window_s / STEP_CHUNKS_PER_WINDOW
        slot = np.floor(end / grain)
        starts = np.concatenate(([0], np.flatnonzero(np.diff(slot)) + 1))
        ends = np.maximum.reduceat(end, starts)
        self.newest_step_t = max(self.newest_step_t, float(end.max()))
        self._trim_steps()  # the chunks the new steps push out of the window
        if not self.steps:
            # New chunks already out of the window (a backlog arriving at once) would leave
            # again as soon as added: they are not made. The window's oldest chunk is
            # trimmed before newer ones, so this holds only while the window is empty.
            inside = np.flatnonzero(ends >= self.newest_step_t - self.window_s)
            if not len(inside):
                return
            first = int(inside[0])
            if first:
                row = int(starts[first])
                d, w, bs, waited, sized = d[row:], w[row:], bs[row:], waited[row:], sized[row:]
                starts, ends = starts[first:] - row, ends[first:]
        zero = np.zeros_like(d)
        columns = [
            ends,
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
        s = self._sums
        for values in zip(*(c.tolist() for c in columns), strict=True):
            chunk = StepChunk._make(values)
            self.steps.append(chunk)
            s.n += chunk.n
            s.dur += chunk.dur
            s.dur2 += chunk.dur2
            s.waited_n += chunk.waited_n
            s.waited_dur += chunk.waited_dur
            s.wait += chunk.wait
            s.samples += chunk.samples
            s.sized_dur += chunk.sized_dur

    def _trim_steps(self) -> None:
        steps = self.steps
        if not steps:
            return
        horizon = self.newest_step_t - self.window_s
        s = self._sums
        while steps and steps[0].end < horizon:
            chunk = steps.popleft()
            s.n -= chunk.n
            s.dur -= chunk.dur
            s.dur2 -= chunk.dur2
            s.waited_n -= chunk.waited_n
            s.waited_dur -= chunk.waited_dur
            s.wait -= chunk.wait
            s.samples -= chunk.samples
            s.sized_dur -= chunk.sized_dur
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
        sm_util: Sequence[float | None] | None = None,
        tensor_util: Sequence[float | None] | None = None,
        throttle: Sequence[int | None] | None = None,
        rank: int | Sequence[int] = 0,
    ) -> None:
        if not t:
            return
        s = self._sums
        for i, ti in enumerate(t):
            used, total = mem_used[i], mem_total[i]
            share = used / total if used is not None and total else None
            u = util[i]
            sm = sm_util[i] if sm_util is not None else None
            tensor = tensor_util[i] if tensor_util is not None else None
            mask = throttle[i] if throttle is not None else None
            row_rank = rank if isinstance(rank, int) else rank[i]
            self.device.append(
                DeviceRow(ti, gpu[i], u, share, temp_c[i], sm, tensor, row_rank, mask)
            )
            if u is not None:
                s.util_n += 1
                s.util += u
        self.last_data_at = now
        self.last_device_at = now
        self.newest_device_t = max(self.newest_device_t, max(t))
        horizon = self.newest_device_t - self.window_s
        while self.device and self.device[0].t < horizon:
            u = self.device.popleft().util
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
            self.host.append(HostRow(ti, proc_cpu[i], sys_cpu[i]))
            c = sys_cpu[i]
            if c is not None:
                s.cpu_n += 1
                s.cpu += c
        self.last_data_at = now
        self.newest_host_t = max(self.newest_host_t, max(t))
        horizon = self.newest_host_t - self.window_s
        while self.host and self.host[0].t < horizon:
            c = self.host.popleft().sys_cpu
            if c is not None:
                s.cpu_n -= 1
                s.cpu -= c

    # -- reading ---------------------------------------------------------------------------

    @property
    def step_count(self) -> int:
        return round(_clamped(self.sums.n))

    @property
    def waited_count(self) -> int:
        return round(_clamped(self.sums.waited_n))

    def input_wait_share(self) -> float | None:
        waited_dur = _clamped(self.sums.waited_dur)
        if self.waited_count == 0 or waited_dur <= 0:
            return None
        return min(1.0, _clamped(self.sums.wait) / waited_dur)

    def mean_waited_s(self) -> tuple[float, float] | None:
        """Mean input wait and mean step time of the steps with a measured wait."""
        waited = self.waited_count
        if waited == 0:
            return None
        s = self.sums
        return _clamped(s.wait) / waited, _clamped(s.waited_dur) / waited

    def mean_step_s(self) -> float | None:
        n = _clamped(self.sums.n)
        return _clamped(self.sums.dur) / n if n >= 1 else None

    def step_cv(self) -> float | None:
        """Coefficient of variation of step time in the window (std / mean)."""
        n = _clamped(self.sums.n)
        if n < 2:
            return None
        mean = _clamped(self.sums.dur) / n
        var = max(0.0, _clamped(self.sums.dur2) / n - mean * mean)
        return math.sqrt(var) / mean if mean > 0 else None

    def samples_per_s(self) -> float | None:
        sized = _clamped(self.sums.sized_dur)
        return _clamped(self.sums.samples) / sized if sized > 0 else None

    def mean_util(self) -> float | None:
        n = _clamped(self.sums.util_n)
        return _clamped(self.sums.util) / n if n >= 1 else None

    def mean_sys_cpu(self) -> float | None:
        n = _clamped(self.sums.cpu_n)
        return _clamped(self.sums.cpu) / n if n >= 1 else None

    def recent_device(self, span_s: float) -> list[DeviceRow]:
        """Device samples of the last `span_s` seconds (by the agent's clock), newest first."""
        if not self.device:
            return []
        horizon = self.device[-1].t - span_s
        rows = []
        for row in reversed(self.device):
            if row.t < horizon:
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
