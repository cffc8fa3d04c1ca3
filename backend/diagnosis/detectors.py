"""The detectors: per-run windows fed by ingest, verdicts, stall detection and alert rules.

Ingest calls `observe_batch` (in-memory, a few microseconds per row) after a batch is
committed; nothing here ever blocks it. The named lifespan task `stoker-detectors` ticks
every `detector_tick_s`: it re-evaluates each watched run's verdict, evaluates every alert
rule against every watched run (metric values computed once per run), stores verdict
changes and alert transitions as events through the writer, pushes them to browsers, and
queues webhook deliveries for the `stoker-webhooks` task.
"""

import asyncio
import logging
import time
from collections.abc import Iterable
from typing import Any

from backend.core.lifecycle import AgentConnections
from backend.core.models import AlertMetric, AlertRule, AlertState, Run, RunPublic, RunStatus
from backend.core.settings import Settings
from backend.diagnosis.alerting import (
    AlertEngine,
    RunFacts,
    Transition,
    alert_message,
    load_rules,
    seed_default_rules,
)
from backend.diagnosis.levels import VERDICT_WORDS, share_text
from backend.diagnosis.store import add_event, apply_transition, record_delivery, run_brief
from backend.diagnosis.stragglers import straggler_ratio, worker_hosts, worker_timings
from backend.diagnosis.verdict import Diagnosis, Verdict, diagnose
from backend.diagnosis.webhooks import Delivery, WebhookSender, json_payload, slack_payload
from backend.diagnosis.window import DeviceRow, RunWindow
from backend.ingest.protocol import Batch
from backend.ingest.writer import Writer
from backend.live.hub import LiveHub
from backend.live.messages import AlertMessage, EventMessage, VerdictMessage

log = logging.getLogger(__name__)


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
        self._rules_stale = True
        self.webhooks = WebhookSender(
            record=self._record_delivery,
            timeout_s=settings.webhook_timeout_s,
            attempts=settings.webhook_attempts,
            backoff_s=settings.webhook_backoff_s,
            queue_size=settings.webhook_queue_size,
        )
        self.ticks = 0
        self.last_tick_s = 0.0

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
        self._window(run)

    def observe_batch(self, run: Run | RunPublic, batch: Batch, rank: int = 0) -> None:
        """A committed batch of worker `rank`: slide the run's window forward."""
        window = self._window(run)
        now = time.monotonic()
        steps = batch.steps
        if steps is not None and len(steps):
            window.add_steps(
                now=now,
                step=steps.step,
                t=steps.t,
                dur=steps.dur,
                wait=steps.column("wait"),
                batch_size=steps.column("batch_size"),
                rank=rank,
            )
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

    def rules_changed(self) -> None:
        self._rules_stale = True

    def use_rules(self, rules: Iterable[AlertRule]) -> None:
        """Evaluate `rules` from now on, instead of loading the stored ones (benchmarks)."""
        self.engine.set_rules(rules)
        self._rules_stale = False

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
            self.engine.set_rules(await self.writer.run(load_rules))
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
                facts.append(self._facts(window, previous, now))
                continue
            window.dirty = False
            diagnosis = self._diagnose(window, now, run_id in connected)
            self.verdicts[run_id] = diagnosis
            first_and_empty = previous is None and diagnosis.verdict == Verdict.insufficient_data
            if (previous is None or previous.verdict != diagnosis.verdict) and not first_and_empty:
                changes.append((diagnosis, previous))
            facts.append(self._facts(window, diagnosis, now))
        transitions = self.engine.evaluate(facts, now=now)
        for diagnosis, previous in changes:
            await self._publish_verdict(diagnosis, previous)
        for transition in transitions:
            await self._publish_transition(transition)
        self._evict(connected)
        self.ticks += 1
        self.last_tick_s = time.monotonic() - started

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
        return RunFacts(
            run_id=window.run_id,
            project=window.project,
            running=window.running,
            stepping=stepping,
            values=values,
        )

    def _evict(self, connected: set[int]) -> None:
        for run_id, window in list(self.windows.items()):
            if window.running or run_id in connected or self.engine.active_for(run_id):
                continue
            del self.windows[run_id]
            self.verdicts.pop(run_id, None)

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
        window = self.windows.get(transition.run_id)
        run_name = window.name if window else str(transition.run_id)
        message = alert_message(rule, transition.state, transition.value, run_name)
        if transition.message:
            message += f" ({transition.message})"
        stored = await self.writer.run(
            apply_transition,
            alert_id=instance.alert_id,
            rule_id=rule.id,
            run_id=transition.run_id,
            rule_name=rule.name,
            state=transition.state,
            value=transition.value,
            message=message,
        )
        if stored is None:
            return
        alert, event = stored
        instance.alert_id = alert.id
        alert_json = alert.model_dump(mode="json")
        self.hub.broadcast(AlertMessage(alert=alert))
        self.hub.broadcast(EventMessage(run_id=transition.run_id, event=event))
        notify = transition.state == AlertState.firing or (
            transition.state == AlertState.resolved and transition.previous == AlertState.firing
        )
        if not notify:
            return
        webhooks = [c for c in rule.channels if c.get("type") == "webhook" and c.get("url")]
        if not webhooks:
            return
        run = await self.writer.run(run_brief, run_id=transition.run_id) or {}
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

    async def _record_delivery(self, delivery: Delivery, outcome: dict[str, Any]) -> None:
        alert = await self.writer.run(record_delivery, alert_id=delivery.alert_id, outcome=outcome)
        if alert is not None:
            self.hub.broadcast(AlertMessage(alert=alert))
