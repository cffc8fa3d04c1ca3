"""What the detectors keep of each run they watch: its sliding window, its latest verdict, the
metric tracks and first steps the alert rules read, and how it ended.

Fed by ingest on the event loop after a batch is committed (`observe_batch`, a few
microseconds per row) and when a run starts or ends; nothing here does I/O or ever blocks it.
"""

import bisect
import math
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from stoker_server.core.models import AlertMetric, Run, RunPublic, RunStatus
from stoker_server.diagnosis.alerting import DEFAULT_BASELINE_S
from stoker_server.diagnosis.stragglers import worker_hosts
from stoker_server.diagnosis.verdict import Diagnosis
from stoker_server.diagnosis.window import RunWindow
from stoker_server.ingest.protocol import Batch

# A run's first steps kept for the throughput baseline ("its own first minutes"), at most.
FIRST_STEPS_CAP = 20_000
_END_METRIC = {
    RunStatus.finished: AlertMetric.run_finished,
    RunStatus.failed: AlertMetric.run_failed,
    RunStatus.interrupted: AlertMetric.run_interrupted,
}


@dataclass
class MetricTrack:
    """One batch or epoch metric of a run, as the metric rules read it."""

    last: float | None = None  # None: its latest value was NaN or infinite
    best: float | None = None  # its lowest finite value so far

    def add(self, value: float | None) -> None:
        finite = value is not None and math.isfinite(value)
        self.last = value if finite else None
        if finite and (self.best is None or value < self.best):  # type: ignore[operator]
            self.best = value

    def rise(self) -> float | None:
        if self.last is None or self.best is None or self.best <= 0:
            return None
        return self.last / self.best


@dataclass
class FirstSteps:
    """The step times of a run's first `horizon_s` seconds (agent clock): its own baseline."""

    horizon_s: float
    t0: float | None = None
    newest_t: float = -math.inf
    t: list[float] = field(default_factory=list)
    dur: list[float] = field(default_factory=list)

    def add(self, t: list[float], dur: list[float]) -> None:
        if not t:
            return
        if self.t0 is None:
            self.t0 = t[0]
        self.newest_t = max(self.newest_t, t[-1])
        room = FIRST_STEPS_CAP - len(self.t)
        if room <= 0 or t[0] > self.t0 + self.horizon_s:
            return
        end = min(bisect.bisect_right(t, self.t0 + self.horizon_s), room)
        self.t.extend(t[:end])
        self.dur.extend(dur[:end])

    def median_s(self, seconds: float) -> float | None:
        """The median step time of the first `seconds`, once the run is past them."""
        if self.t0 is None or self.newest_t < self.t0 + seconds:
            return None
        end = bisect.bisect_right(self.t, self.t0 + seconds)
        return statistics.median(self.dur[:end]) if end else None


@dataclass(frozen=True)
class RunEnd:
    """How a run ended, as the run-end rules read it; `note` says why it counts as failed
    when the run did not say so itself."""

    metric: AlertMetric
    note: str = ""


class WatchedRuns:
    """The runs the detectors watch, by id. Used only from the event loop.

    Args:
        window_s: Each run's sliding window (Settings.diagnosis_window_s).
    """

    def __init__(self, window_s: float) -> None:
        self.window_s = window_s
        self.windows: dict[int, RunWindow] = {}
        self.verdicts: dict[int, Diagnosis] = {}  # the latest the tick kept
        self.metrics: dict[int, dict[str, MetricTrack]] = {}
        self.firsts: dict[int, FirstSteps] = {}
        # Ends not yet seen by a tick; then each run's note, kept while its alerts may say it.
        self.ends: dict[int, RunEnd] = {}
        self.end_notes: dict[int, str] = {}
        # What the rules read (`want`): these metrics' tracks, and this many first seconds.
        self._metric_names: set[str] = set()
        self._first_horizon_s = DEFAULT_BASELINE_S

    def want(self, metric_names: set[str], first_horizon_s: float) -> None:
        """Keep tracks of these metrics, and each run's first `first_horizon_s` of steps."""
        self._metric_names = metric_names
        self._first_horizon_s = max(DEFAULT_BASELINE_S, first_horizon_s)

    def window(self, run: Run | RunPublic) -> RunWindow:
        """The run's window (made on first sight), with the run's latest fields."""
        assert run.id is not None
        window = self.windows.get(run.id)
        if window is None:
            window = RunWindow(run_id=run.id, window_s=self.window_s)
            self.windows[run.id] = window
        window.project = run.project
        window.name = run.name
        window.environment = run.environment
        window.running = run.status == RunStatus.running
        window.hosts = worker_hosts(run)
        window.dirty = True
        return window

    def attach(self, run: Run | RunPublic) -> None:
        """An agent connected for `run`."""
        window = self.window(run)
        if window.last_data_at is None:
            window.last_data_at = time.monotonic()

    def observe_run(self, run: Run | RunPublic, *, connected: bool) -> None:
        """The run changed (ended, resumed); `connected`: an agent of it is connected here."""
        known = self.windows.get(run.id) if run.id is not None else None
        was_running = known is None or known.running
        window = self.window(run)
        ended = _END_METRIC.get(RunStatus(run.status))
        if ended is None or not was_running:
            return
        # The reaper interrupts a run only once no agent of it is connected and none was
        # heard for heartbeat_timeout_s: its process died without saying so (killed,
        # crashed, host lost). That is a failure; an agent that says `interrupted` (Ctrl-C)
        # says so while still connected.
        if ended == AlertMetric.run_interrupted and not connected:
            self.ends[window.run_id] = RunEnd(
                AlertMetric.run_failed, "its process died: no word from its agent"
            )
        else:
            self.ends[window.run_id] = RunEnd(ended)

    def observe_batch(self, run: Run | RunPublic, batch: Batch, rank: int = 0) -> None:
        """A committed batch of worker `rank`: slide the run's window forward."""
        window = self.window(run)
        now = time.monotonic()
        steps = batch.steps
        if steps is not None and len(steps):
            window.add_step_arrays(now=now, arrays=steps.arrays(), rank=rank)
        device = batch.device
        if device is not None and len(device):
            window.add_device(
                now=now,
                t=device.t,
                gpu=device.gpu,
                util=device.column("util"),
                mem_used=device.column("mem_used"),
                mem_total=device.column("mem_total"),
                temp_c=device.column("temp_c"),
                sm_util=device.column("sm_util"),
                tensor_util=device.column("tensor_util"),
                throttle=device.column("throttle"),
                rank=rank,
            )
        host = batch.host
        if host is not None and len(host):
            window.add_host(
                now=now, t=host.t, proc_cpu=host.column("proc_cpu"), sys_cpu=host.column("sys_cpu")
            )
        if window.last_data_at is None or window.last_data_at < now:
            window.last_data_at = now
        self._observe_for_rules(window.run_id, batch)

    def _observe_for_rules(self, run_id: int, batch: Batch) -> None:
        """Keep what the metric and throughput rules read: the watched metrics' latest and best
        values, and the run's first steps."""
        names = self._metric_names
        if names:
            for section in (batch.metrics, batch.epochs):
                if section is None or not len(section):
                    continue
                for name, value in zip(section.name, section.value, strict=True):
                    if name in names:
                        tracks = self.metrics.setdefault(run_id, {})
                        tracks.setdefault(name, MetricTrack()).add(value)
        steps = batch.steps
        if steps is not None and len(steps):
            first = self.firsts.get(run_id)
            if first is None:
                first = self.firsts[run_id] = FirstSteps(self._first_horizon_s)
            first.add(steps.t, steps.dur)

    def take_end(self, run_id: int) -> RunEnd | None:
        """The run's end, once: the tick that sees it. Its note is kept for its alerts."""
        ended = self.ends.pop(run_id, None)
        if ended is not None:
            self.end_notes[run_id] = ended.note
        return ended

    def evict(self, keep: Callable[[int], bool]) -> None:
        """Forget the runs that ended, whose end was seen, unless `keep(run_id)`."""
        for run_id, window in list(self.windows.items()):
            if window.running or run_id in self.ends or keep(run_id):
                continue
            del self.windows[run_id]
            self.verdicts.pop(run_id, None)
            self.metrics.pop(run_id, None)
            self.firsts.pop(run_id, None)
            self.end_notes.pop(run_id, None)
