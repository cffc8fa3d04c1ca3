"""The detectors: per-run windows fed by ingest, verdicts, stall detection and alert rules.

Ingest calls `observe_batch` (in-memory, a few microseconds per row) after a batch is
committed; nothing here ever blocks it. The named lifespan task `stoker-detectors` ticks
every `detector_tick_s`: it re-evaluates each watched run's verdict, evaluates every alert
rule against every watched run (metric values computed once per run), stores verdict
changes and alert transitions as events through the writer, pushes them to browsers, and
queues webhook deliveries for the `stoker-webhooks` task.
"""

import asyncio
import bisect
import logging
import math
import statistics
import time
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from stoker_server.core.levels import VERDICT_WORDS, share_text
from stoker_server.core.models import (
    AlertMetric,
    AlertPublic,
    AlertRule,
    AlertState,
    Run,
    RunEventPublic,
    RunPublic,
    RunStatus,
)
from stoker_server.core.settings import Settings
from stoker_server.diagnosis.alerting import (
    DEFAULT_BASELINE_S,
    END_METRICS,
    SERVER_METRICS,
    SERVER_RUN_ID,
    AlertEngine,
    ParamKey,
    RunFacts,
    Transition,
    alert_message,
    load_rules,
    seed_default_rules,
)
from stoker_server.diagnosis.alerts_and_events import (
    add_event,
    apply_transition,
    baseline_step_s,
    link_profile,
    record_delivery,
    run_brief,
)
from stoker_server.diagnosis.stragglers import straggler_ratio, worker_hosts, worker_timings
from stoker_server.diagnosis.verdict import Diagnosis, Verdict, diagnose
from stoker_server.diagnosis.webhooks import Delivery, WebhookSender, json_payload, slack_payload
from stoker_server.diagnosis.window import DeviceRow, RunWindow
from stoker_server.ingest.disks import disk_space, free_share
from stoker_server.ingest.protocol import Batch
from stoker_server.ingest.retention import DiskUsage
from stoker_server.ingest.writer import Writer
from stoker_server.live.hub import LiveHub
from stoker_server.live.messages import AlertMessage, EventMessage, VerdictMessage
from stoker_server.service.lifecycle import AgentConnections

log = logging.getLogger(__name__)

# A run's first steps kept for the throughput baseline ("its own first minutes"), at most.
FIRST_STEPS_CAP = 20_000
BASELINE_RUN_REFRESH_S = 30.0
# Asks a live run's agents for a profile of `steps` steps for alert `alert_id`; returns the
# profile's id (backend/stoker_server/api/profiles.py start_capture), or raises with why it could
# not.
CaptureProfile = Callable[[int, int, int], Awaitable[int]]
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


def verdict_event_message(diagnosis: Diagnosis, previous: Diagnosis | None) -> str:
    """A verdict change as its event says it, in the words and the rounding every surface uses
    (levels.VERDICT_WORDS, levels.share_text): "verdict not input-bound → moderately
    input-bound (input wait 5.0 % of step time)"; a run's first verdict has no "from"."""
    words = VERDICT_WORDS[diagnosis.verdict]
    if previous is not None:
        words = f"{VERDICT_WORDS[previous.verdict]} → {words}"
    share = diagnosis.input_wait_share
    detail = f" (input wait {share_text(share)} of step time)" if share is not None else ""
    return f"verdict {words}{detail}"


class Detectors:
    def __init__(
        self, *, settings: Settings, writer: Writer, hub: LiveHub, connections: AgentConnections
    ) -> None:
        self.settings = settings
        self.connections = connections
        self.writer = writer
        self.hub = hub
        self.windows: dict[int, RunWindow] = {}
        self.verdicts: dict[int, Diagnosis] = {}
        self.engine = AlertEngine()
        # The disk figures the retention pass measures (set by the app): where the database's
        # rows are written, for the disk rule.
        self.disk: DiskUsage | None = None
        self._rules_stale = True
        self.webhooks = WebhookSender(
            record=self._record_delivery,
            timeout_s=settings.webhook_timeout_s,
            attempts=settings.webhook_attempts,
            backoff_s=settings.webhook_backoff_s,
            queue_size=settings.webhook_queue_size,
            deadline_s=settings.webhook_deadline_s,
            max_response_bytes=settings.webhook_max_response_bytes,
            allowed_hosts=settings.webhook_allowed_hosts,
        )
        self.ticks = 0
        self.last_tick_s = 0.0
        # How runs ended (seen by the next tick), their watched metrics, their first
        # steps, baseline runs' step times, and how a firing alert captures a profile.
        self._ends: dict[int, tuple[AlertMetric, str]] = {}
        self._end_notes: dict[int, str] = {}  # why a run counts as failed, when not said
        self._metrics: dict[int, dict[str, MetricTrack]] = {}
        self._firsts: dict[int, FirstSteps] = {}
        self._baseline_runs: dict[int, tuple[float, float | None]] = {}
        self._metric_names: set[str] = set()
        self._first_horizon_s = DEFAULT_BASELINE_S
        self.capture_profile: CaptureProfile | None = None
        self._server_rules = False  # an enabled rule watches the server (SERVER_METRICS)

    # -- fed by ingest (event loop, never blocks) ------------------------------------------

    def _window(self, run: Run | RunPublic) -> RunWindow:
        assert run.id is not None
        window = self.windows.get(run.id)
        if window is None:
            window = RunWindow(run_id=run.id, window_s=self.settings.diagnosis_window_s)
            self.windows[run.id] = window
        window.project = run.project
        window.name = run.name
        window.environment = run.environment
        window.running = run.status == RunStatus.running
        window.hosts = worker_hosts(run)
        window.dirty = True
        return window

    def attach(self, run: Run | RunPublic) -> None:
        """An agent connected for `run` (open connections are counted in `connections`)."""
        window = self._window(run)
        if window.last_data_at is None:
            window.last_data_at = time.monotonic()

    def observe_run(self, run: Run | RunPublic) -> None:
        """The run changed (ended, resumed)."""
        known = self.windows.get(run.id) if run.id is not None else None
        was_running = known is None or known.running
        window = self._window(run)
        ended = _END_METRIC.get(RunStatus(run.status))
        if ended is None or not was_running:
            return
        note = ""
        # The reaper interrupts a run only once no agent of it is connected and none was
        # heard for heartbeat_timeout_s: its process died without saying so (killed,
        # crashed, host lost). That is a failure; an agent that says `interrupted` (Ctrl-C)
        # says so while still connected.
        if ended == AlertMetric.run_interrupted and run.id not in self.connections.run_ids():
            ended = AlertMetric.run_failed
            note = "its process died: no word from its agent"
        self._ends[window.run_id] = (ended, note)

    def observe_batch(self, run: Run | RunPublic, batch: Batch, rank: int = 0) -> None:
        """A committed batch of worker `rank`: slide the run's window forward."""
        window = self._window(run)
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
                        tracks = self._metrics.setdefault(run_id, {})
                        tracks.setdefault(name, MetricTrack()).add(value)
        steps = batch.steps
        if steps is not None and len(steps):
            first = self._firsts.get(run_id)
            if first is None:
                first = self._firsts[run_id] = FirstSteps(self._first_horizon_s)
            first.add(steps.t, steps.dur)

    def rules_changed(self) -> None:
        self._rules_stale = True

    def use_rules(self, rules: Iterable[AlertRule]) -> None:
        """Evaluate `rules` from now on, instead of loading the stored ones (benchmarks)."""
        self._set_rules(rules)
        self._rules_stale = False

    def _set_rules(self, rules: Iterable[AlertRule]) -> None:
        self.engine.set_rules(rules)
        self._server_rules = any(
            r.enabled and AlertMetric(r.metric) in SERVER_METRICS for r in self.engine.rules
        )
        wanted = self.engine.wanted_params()
        self._metric_names = {str(key[1]) for _, key in wanted if key[0] == "metric"}
        firsts = [float(key[1]) for _, key in wanted if key[0] == "first"]
        self._first_horizon_s = max([DEFAULT_BASELINE_S, *firsts])

    def diagnose_now(self, run_id: int) -> Diagnosis | None:
        """The verdict over the run's window as it is now, with every batch observed so far.

        The verdict the tick keeps (`verdicts`) may predate the last batches; a reader must
        not get it. None when the run is not watched. Call it on the event loop: the window
        is fed there.
        """
        window = self.windows.get(run_id)
        if window is None:
            return None
        return self._diagnose(window, time.monotonic(), run_id in self.connections.run_ids())

    def diagnose_stored(self, window: RunWindow) -> Diagnosis:
        """The verdict over `window`, rebuilt from stored steps (see history.window_from_db).

        Stall detection needs the live arrival times: those of the run's watched window, when
        this server watches it. Call it on the event loop, like `diagnose_now`.
        """
        watched = self.windows.get(window.run_id)
        if watched is not None:
            window.last_step_at = watched.last_step_at
        connected = window.run_id in self.connections.run_ids()
        return self._diagnose(window, time.monotonic(), connected)

    # -- the tick ---------------------------------------------------------------------------

    async def start(self) -> None:
        await self.writer.run(seed_default_rules)

    async def run_forever(self) -> None:
        tick = self.settings.detector_tick_s
        next_at = time.monotonic()
        while True:
            try:
                await self.tick()
            except Exception:
                log.exception("detector tick failed")
            next_at += tick
            delay = next_at - time.monotonic()
            if delay < 0:  # fell behind: skip, do not burst
                next_at = time.monotonic()
                delay = 0
            await asyncio.sleep(delay)

    async def tick(self) -> None:
        started = time.monotonic()
        if self._rules_stale:
            self._rules_stale = False
            self._set_rules(await self.writer.run(load_rules))
        await self._refresh_baseline_runs()
        now = time.monotonic()
        connected = self.connections.run_ids()
        facts: list[RunFacts] = []
        changes: list[tuple[Diagnosis, Diagnosis | None]] = []
        stall_floor = self.settings.stall_min_s
        for run_id, window in list(self.windows.items()):
            previous = self.verdicts.get(run_id)
            idle = window.seconds_without_steps(now)
            unchanged = (
                previous is not None
                and not window.dirty
                and previous.verdict != Verdict.stalled
                and (idle is None or idle < stall_floor)
            )
            if unchanged:  # nothing new arrived and it cannot have stalled yet
                assert previous is not None
                facts.append(self._facts(window, previous, now))
                continue
            window.dirty = False
            diagnosis = self._diagnose(window, now, run_id in connected)
            self.verdicts[run_id] = diagnosis
            first_and_empty = previous is None and diagnosis.verdict == Verdict.insufficient_data
            if (previous is None or previous.verdict != diagnosis.verdict) and not first_and_empty:
                changes.append((diagnosis, previous))
            facts.append(self._facts(window, diagnosis, now))
        if self._server_rules:
            facts.append(self._server_facts())
        transitions = self.engine.evaluate(facts, now=now)
        for diagnosis, previous in changes:
            await self._publish_verdict(diagnosis, previous)
        for transition in transitions:
            await self._publish_transition(transition)
        self._evict(connected)
        self.ticks += 1
        self.last_tick_s = time.monotonic() - started

    async def _refresh_baseline_runs(self) -> None:
        """The median step time of each baseline run a rule names, read every 30 s."""
        now = time.monotonic()
        for _, key in self.engine.wanted_params():
            if key[0] != "run":
                continue
            run_id = int(key[1])
            cached = self._baseline_runs.get(run_id)
            if cached is not None and now - cached[0] < BASELINE_RUN_REFRESH_S:
                continue
            try:
                median = await self.writer.run(baseline_step_s, run_id=run_id)
            except Exception:
                log.exception("reading baseline run %s failed", run_id)
                median = None
            self._baseline_runs[run_id] = (now, median)

    def _params(
        self, window: RunWindow, stepping: bool
    ) -> dict[tuple[AlertMetric, ParamKey], float | None]:
        """The parametrized metrics' values the rules ask for (see alerting.param_key)."""
        values: dict[tuple[AlertMetric, ParamKey], float | None] = {}
        run_id = window.run_id
        current = window.median_step_s() if stepping else None
        for wanted in self.engine.wanted_params():
            metric, (kind, arg) = wanted
            value: float | None = None
            if kind == "metric":
                track = self._metrics.get(run_id, {}).get(str(arg))
                if track is not None and metric == AlertMetric.metric_nonfinite:
                    value = 0.0 if track.last is not None else 1.0
                elif track is not None:
                    value = track.rise()
            elif current is not None and current > 0:
                if kind == "run":
                    base = self._baseline_runs.get(int(arg), (0.0, None))[1]
                else:
                    first = self._firsts.get(run_id)
                    base = first.median_s(float(arg)) if first is not None else None
                if base is not None:
                    value = max(0.0, 1.0 - base / current)
            values[wanted] = value
        return values

    def _diagnose(self, window: RunWindow, now: float, connected: bool) -> Diagnosis:
        s = self.settings
        return diagnose(
            window,
            now=now,
            connected=connected,
            min_steps=s.diagnosis_min_steps,
            stall_min_s=s.stall_min_s,
            stall_step_factor=s.stall_step_factor,
        )

    def _facts(self, window: RunWindow, diagnosis: Diagnosis, now: float) -> RunFacts:
        s = self.settings
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
        idle = window.seconds_without_steps(now)
        median = window.median_step_s() or 0.0
        stepping = idle is not None and idle <= max(s.alert_value_window_s, 5 * median)
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
        ended = self._ends.pop(window.run_id, None)
        if ended is not None:
            self._end_notes[window.run_id] = ended[1]
        for metric in END_METRICS:
            # An event: 1 at the tick the end is seen, 0 after (the alert then resolves after
            # its keep_firing_for_s); no value while the run runs.
            hit = ended is not None and ended[0] == metric
            values[metric] = 1.0 if hit else (None if window.running else 0.0)
        return RunFacts(
            run_id=window.run_id,
            project=window.project,
            running=window.running,
            stepping=stepping,
            values=values,
            params=self._params(window, stepping),
            just_ended=ended is not None,
        )

    def _server_facts(self) -> RunFacts:
        """The server's own values: the free share of the fuller of its disks, the data
        directory's and the database's own (where the last disk measure found it)."""
        shares = [free_share(*disk_space(self.settings.data_dir))]
        if self.disk is not None:
            shares.append(free_share(*self.disk.database_space()))
        known = [share for share in shares if share is not None]
        free = min(known) if known else None
        return RunFacts(
            run_id=SERVER_RUN_ID,
            project="",
            running=True,
            stepping=True,
            values={AlertMetric.disk_free_share: free},
        )

    def _evict(self, connected: set[int]) -> None:
        for run_id, window in list(self.windows.items()):
            if window.running or run_id in connected or self.engine.active_for(run_id):
                continue
            if run_id in self._ends:  # its end not evaluated yet
                continue
            del self.windows[run_id]
            self.verdicts.pop(run_id, None)
            self._metrics.pop(run_id, None)
            self._firsts.pop(run_id, None)
            self._end_notes.pop(run_id, None)

    # -- publishing -------------------------------------------------------------------------

    async def _publish_verdict(self, diagnosis: Diagnosis, previous: Diagnosis | None) -> None:
        payload = diagnosis.model_dump(mode="json")
        self.hub.broadcast(VerdictMessage(run_id=diagnosis.run_id, diagnosis=diagnosis))
        message = verdict_event_message(diagnosis, previous)
        try:
            event = await self.writer.run(
                add_event, run_id=diagnosis.run_id, kind="verdict", message=message, data=payload
            )
        except Exception:
            log.exception("storing the verdict of run %s failed", diagnosis.run_id)
            return
        self.hub.broadcast(EventMessage(run_id=diagnosis.run_id, event=event))

    async def _publish_transition(self, transition: Transition) -> None:
        rule, instance = transition.rule, transition.instance
        run_id = None if transition.run_id == SERVER_RUN_ID else transition.run_id
        window = self.windows.get(transition.run_id)
        run_name = window.name if window else str(run_id) if run_id is not None else None
        message = alert_message(rule, transition.state, transition.value, run_name)
        note = transition.message
        if not note and AlertMetric(rule.metric) == AlertMetric.run_failed:
            note = self._end_notes.get(transition.run_id, "")
        if note:
            message += f" ({note})"
        stored = await self.writer.run(
            apply_transition,
            alert_id=instance.alert_id,
            rule_id=rule.id,
            run_id=run_id,
            rule_name=rule.name,
            state=transition.state,
            value=transition.value,
            message=message,
        )
        if stored is None:
            return
        alert, event = stored
        instance.alert_id = alert.id
        if event is not None and transition.state == AlertState.firing and rule.profile_steps:
            alert, event = await self._capture_profile(rule, transition.run_id, alert, event)
        alert_json = alert.model_dump(mode="json")
        self.hub.broadcast(AlertMessage(alert=alert))
        if event is not None:  # a server alert has no run, and no run event
            self.hub.broadcast(EventMessage(run_id=transition.run_id, event=event))
        # A run's end is an event: its alert resolving later is not news worth a message.
        notify = transition.state == AlertState.firing or (
            transition.state == AlertState.resolved
            and transition.previous == AlertState.firing
            and AlertMetric(rule.metric) not in END_METRICS
        )
        if not notify:
            return
        webhooks = [c for c in rule.channels if c.get("type") == "webhook" and c.get("url")]
        if not webhooks:
            return
        run: dict[str, Any] = {}  # a server alert concerns no run
        if run_id is not None:
            brief = await self.writer.run(run_brief, run_id=run_id)
            run = brief or {}
        for channel in webhooks:
            fmt = channel.get("format", "json")
            build = slack_payload if fmt == "slack" else json_payload
            self.webhooks.submit(
                Delivery(
                    alert_id=alert.id,
                    url=str(channel["url"]),
                    format=fmt,
                    event=str(transition.state),
                    payload=build(alert_json, event=str(transition.state), run=run),
                )
            )

    async def _capture_profile(
        self, rule: AlertRule, run_id: int, alert: AlertPublic, event: RunEventPublic
    ) -> tuple[AlertPublic, RunEventPublic]:
        """The rule's action: capture `profile_steps` steps of profile, once per firing and only
        while the run is live, through the same path as a user's request. The alert and its
        firing event then link the profile (or say why there is none)."""
        window = self.windows.get(run_id)
        profile_id: int | None = None
        error = ""
        if self.capture_profile is None:
            error = "profile not captured: this server cannot send commands to agents"
        elif window is None or not window.running or run_id not in self.connections.run_ids():
            error = "profile not captured: the run is no longer live"
        else:
            try:
                profile_id = await self.capture_profile(
                    run_id, int(rule.profile_steps or 0), alert.id
                )
            except Exception as exc:  # a capture already running (409), no agent, ...
                error = f"profile not captured: {getattr(exc, 'detail', None) or exc}"
        try:
            linked = await self.writer.run(
                link_profile, alert_id=alert.id, event_id=event.id, profile_id=profile_id,
                error=error,
            )  # fmt: skip
        except Exception:
            log.exception("linking the profile of alert %s failed", alert.id)
            return alert, event
        return linked if linked is not None else (alert, event)

    async def _record_delivery(self, delivery: Delivery, outcome: dict[str, Any]) -> None:
        alert = await self.writer.run(record_delivery, alert_id=delivery.alert_id, outcome=outcome)
        if alert is not None:
            self.hub.broadcast(AlertMessage(alert=alert))
