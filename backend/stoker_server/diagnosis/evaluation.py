"""One detector tick's evaluation, with no effect: each watched run's window → its facts → its
verdict, and the alert rules → their transitions, each with the line its alert will say.

It reads the watched runs and moves their in-memory state on (a run's kept verdict, the alert
instances' states); it sends nothing and writes nothing. What follows from it, stored, pushed
and delivered, is diagnosis/effects.py's; the tick that joins them, diagnosis/detectors.py.
"""

from dataclasses import dataclass, field
from datetime import datetime, timedelta

from stoker_server.core.levels import shown_share
from stoker_server.core.models import AlertMetric, AlertState
from stoker_server.core.settings import Settings
from stoker_server.diagnosis.alerting import (
    END_METRICS,
    SERVER_RUN_ID,
    AlertEngine,
    ParamKey,
    RunFacts,
    Transition,
    ValueWindows,
    alert_message,
    resolution_text,
    value_text,
)
from stoker_server.diagnosis.stragglers import straggler_ratio, worker_timings
from stoker_server.diagnosis.verdict import Diagnosis, Verdict, diagnose
from stoker_server.diagnosis.watched import RunEnd, WatchedRuns
from stoker_server.diagnosis.window import DeviceRow, RunWindow

# A parametrized value the rules ask for: (metric, alerting.param_key).
Param = tuple[AlertMetric, ParamKey]


@dataclass(frozen=True)
class VerdictChange:
    """A run's verdict changed (`previous` None: its first)."""

    diagnosis: Diagnosis
    previous: Diagnosis | None


@dataclass(frozen=True)
class AlertChange:
    """An alert transition, with what its effects need to know of the run at this tick."""

    transition: Transition
    message: str  # the alert's line, as stored, pushed and delivered
    live: bool  # the run is running with an agent connected: a profile can be captured
    value: str = ""  # its value as the UI writes that quantity, with its window
    reason: str | None = None  # a resolved alert's why (alerting.Resolution)


@dataclass
class Evaluation:
    verdicts: list[VerdictChange] = field(default_factory=list)
    alerts: list[AlertChange] = field(default_factory=list)


def diagnose_window(
    window: RunWindow, *, now: float, connected: bool, settings: Settings
) -> Diagnosis:
    """The verdict over `window` at `now`; `connected`: an agent of the run is connected."""
    return diagnose(
        window,
        now=now,
        connected=connected,
        min_steps=settings.diagnosis_min_steps,
        stall_min_s=settings.stall_min_s,
        stall_step_factor=settings.stall_step_factor,
    )


def param_values(
    runs: WatchedRuns,
    window: RunWindow,
    *,
    stepping: bool,
    wanted: set[Param],
    baseline_runs: dict[int, float | None],
) -> dict[Param, float | None]:
    """The parametrized metrics' values the rules ask for (see alerting.param_key)."""
    values: dict[Param, float | None] = {}
    run_id = window.run_id
    current = window.median_step_s() if stepping else None
    for param in wanted:
        metric, (kind, arg) = param
        value: float | None = None
        if kind == "metric":
            track = runs.metrics.get(run_id, {}).get(str(arg))
            if track is not None and metric == AlertMetric.metric_nonfinite:
                value = 0.0 if track.last is not None else 1.0
            elif track is not None:
                value = track.rise()
        elif current is not None and current > 0:
            if kind == "run":
                base = baseline_runs.get(int(arg))
            else:
                first = runs.firsts.get(run_id)
                base = first.median_s(float(arg)) if first is not None else None
            if base is not None:
                value = max(0.0, 1.0 - base / current)
        values[param] = value
    return values


def run_facts(
    window: RunWindow,
    diagnosis: Diagnosis,
    *,
    now: float,
    settings: Settings,
    stepping: bool,
    ended: RunEnd | None,
    params: dict[Param, float | None],
) -> RunFacts:
    """What the alert rules judge of one run at `now` (`stepping`: see `is_stepping`)."""
    s = settings
    recent: list[DeviceRow] = []
    if window.last_device_at is not None and now - window.last_device_at <= max(
        2 * s.alert_value_window_s, 2 * s.detector_tick_s
    ):
        recent = window.recent_device(s.alert_value_window_s)
    utils = [r.util for r in recent if r.util is not None]
    shares = [r.mem_share for r in recent if r.mem_share is not None]
    temps = [r.temp_c for r in recent if r.temp_c is not None]
    sms = [r.sm_util for r in recent if r.sm_util is not None]
    tensors = [r.tensor_util for r in recent if r.tensor_util is not None]
    share = window.input_wait_share() if window.waited_count >= s.diagnosis_min_steps else None
    # As the diagnosis shows it (to a tenth of a percent): the alert says the same figure.
    share = None if share is None else shown_share(share)
    no_data = None if window.last_data_at is None else now - window.last_data_at
    values: dict[AlertMetric, float | None] = {
        AlertMetric.gpu_util: sum(utils) / len(utils) if utils else None,
        AlertMetric.input_wait_share: share,
        AlertMetric.step_time: window.mean_step_s() if stepping else None,
        AlertMetric.samples_per_s: window.samples_per_s() if stepping else None,
        AlertMetric.memory_share: max(shares) if shares else None,
        AlertMetric.temperature: max(temps) if temps else None,
        AlertMetric.sm_util: sum(sms) / len(sms) if sms else None,
        AlertMetric.tensor_util: sum(tensors) / len(tensors) if tensors else None,
        AlertMetric.no_data: no_data,
        AlertMetric.stalled: 1.0 if diagnosis.verdict == Verdict.stalled else 0.0,
        AlertMetric.straggler_ratio: straggler_ratio(
            worker_timings(window, min_steps=s.diagnosis_min_steps)
        ),
    }
    for metric in END_METRICS:
        # An event: 1 at the tick the end is seen, 0 after (the alert then resolves after
        # its keep_firing_for_s); no value while the run runs.
        hit = ended is not None and ended.metric == metric
        values[metric] = 1.0 if hit else (None if window.running else 0.0)
    return RunFacts(
        run_id=window.run_id,
        project=window.project,
        running=window.running,
        stepping=stepping,
        values=values,
        params=params,
        just_ended=ended is not None,
    )


def is_stepping(window: RunWindow, *, now: float, settings: Settings) -> bool:
    """Whether the run's steps still come: its last within the alert value window, or five
    of its median steps."""
    idle = window.seconds_without_steps(now)
    median = window.median_step_s() or 0.0
    return idle is not None and idle <= max(settings.alert_value_window_s, 5 * median)


def server_facts(disk_free_share: float | None) -> RunFacts:
    """The server's own values: the free share of the fuller of its disks."""
    return RunFacts(
        run_id=SERVER_RUN_ID,
        project="",
        running=True,
        stepping=True,
        values={AlertMetric.disk_free_share: disk_free_share},
    )


def _verdict_settled(
    previous: Diagnosis | None, window: RunWindow, idle_floor_s: float, now: float
) -> bool:
    """Nothing new arrived since the kept verdict, and the run cannot have stalled yet."""
    if previous is None or window.dirty or previous.verdict == Verdict.stalled:
        return False
    idle = window.seconds_without_steps(now)
    return idle is None or idle < idle_floor_s


def evaluate(
    runs: WatchedRuns,
    rules: AlertEngine,
    *,
    now: float,
    wall_now: datetime | None = None,
    connected: set[int],
    settings: Settings,
    baseline_runs: dict[int, float | None],
    disk_free_share: float | None = None,
    server_rules: bool = False,
) -> Evaluation:
    """One tick: each watched run's verdict (again only where something changed), then every
    enabled rule against every run's facts (and the server's, with `server_rules`).

    Args:
        wall_now: The wall-clock time of `now`, for when a resolved alert's condition cleared.
        connected: The runs with an agent connected here.
        baseline_runs: The median step time of each baseline run a rule names.
        disk_free_share: The free share of the server's fuller disk, for the server rules.
    """
    evaluation = Evaluation()
    facts: list[RunFacts] = []
    wanted = rules.wanted_params()
    for run_id, window in list(runs.windows.items()):
        previous = runs.verdicts.get(run_id)
        if _verdict_settled(previous, window, settings.stall_min_s, now):
            assert previous is not None
            diagnosis = previous
        else:
            window.dirty = False
            diagnosis = diagnose_window(
                window, now=now, connected=run_id in connected, settings=settings
            )
            runs.verdicts[run_id] = diagnosis
            first_and_empty = previous is None and diagnosis.verdict == Verdict.insufficient_data
            changed = previous is None or previous.verdict != diagnosis.verdict
            if changed and not first_and_empty:
                evaluation.verdicts.append(VerdictChange(diagnosis, previous))
        stepping = is_stepping(window, now=now, settings=settings)
        params = param_values(
            runs, window, stepping=stepping, wanted=wanted, baseline_runs=baseline_runs
        )
        ended = runs.take_end(run_id)
        facts.append(
            run_facts(
                window,
                diagnosis,
                now=now,
                settings=settings,
                stepping=stepping,
                ended=ended,
                params=params,
            )
        )
    if server_rules:
        facts.append(server_facts(disk_free_share))
    windows = ValueWindows(
        wait_s=settings.diagnosis_window_s, device_s=settings.alert_value_window_s
    )
    for transition in rules.evaluate(facts, now=now):
        change = _alert_change(
            transition, runs, connected, windows=windows, now=now, wall_now=wall_now
        )
        evaluation.alerts.append(change)
    return evaluation


def _alert_change(
    transition: Transition,
    runs: WatchedRuns,
    connected: set[int],
    *,
    windows: ValueWindows,
    now: float,
    wall_now: datetime | None,
) -> AlertChange:
    rule, run_id = transition.rule, transition.run_id
    window = runs.windows.get(run_id)
    if run_id == SERVER_RUN_ID:
        run_name = None
    else:
        run_name = window.name if window is not None else str(run_id)
    why = ""
    if transition.resolution is not None:
        cleared, at = transition.cleared_at, None
        if cleared is not None and wall_now is not None:
            at = wall_now - timedelta(seconds=now - cleared)
        fired = transition.previous != AlertState.pending
        why = resolution_text(rule, transition.resolution, at, fired=fired)
    message = alert_message(
        rule, transition.state, transition.value, run_name, windows=windows, why=why
    )
    note = ""
    if AlertMetric(rule.metric) == AlertMetric.run_failed:
        note = runs.end_notes.get(run_id, "")
    if note:
        message += f" ({note})"
    live = window is not None and window.running and run_id in connected
    return AlertChange(
        transition, message, live, value=value_text(rule, transition.value, windows),
        reason=None if transition.resolution is None else str(transition.resolution),
    )  # fmt: skip
