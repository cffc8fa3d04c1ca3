"""The detectors' scheduler: the one loop that joins what the diagnosis side keeps, evaluates
and does.

Ingest feeds the watched runs (diagnosis/watched.py) after each committed batch; nothing here
ever blocks it. The named lifespan task `stoker-detectors` ticks every `detector_tick_s`:
reload the alert rules if they changed and read what the rules compare against (baseline runs,
the disk), evaluate (diagnosis/evaluation.py: verdicts and alert transitions, no effects),
then apply the effects (diagnosis/effects.py: store, push, deliver, capture), and forget the
runs no longer watched.
"""

import asyncio
import logging
import time
from collections.abc import Callable, Iterable

from stoker_server.core.models import AlertMetric, AlertRule, Run, RunPublic, utc_now
from stoker_server.core.settings import Settings
from stoker_server.diagnosis.alerting import (
    SERVER_METRICS,
    AlertEngine,
    load_rules,
    seed_default_rules,
)
from stoker_server.diagnosis.alerts_and_events import baseline_step_s
from stoker_server.diagnosis.effects import DiagnosisEffects
from stoker_server.diagnosis.evaluation import diagnose_window, evaluate
from stoker_server.diagnosis.verdict import Diagnosis
from stoker_server.diagnosis.watched import WatchedRuns
from stoker_server.diagnosis.window import RunWindow
from stoker_server.ingest.disks import disk_space, free_share
from stoker_server.ingest.protocol import Batch
from stoker_server.ingest.retention import DiskUsage
from stoker_server.ingest.writer import Writer

log = logging.getLogger(__name__)

BASELINE_RUN_REFRESH_S = 30.0


class Detectors:
    """Args:
    settings: The diagnosis and alert settings.
    writer: Reads the rules and baseline runs, seeds the default rules.
    effects: What an evaluation's findings do.
    connected: The runs with an agent connected here (live.agents.ConnectedAgents.run_ids).
    disk: The disk figures the retention pass measures, for the server's disk rule.
    """

    def __init__(
        self,
        *,
        settings: Settings,
        writer: Writer,
        effects: DiagnosisEffects,
        connected: Callable[[], set[int]],
        disk: DiskUsage,
    ) -> None:
        self.settings = settings
        self.writer = writer
        self.effects = effects
        self.connected = connected
        self.disk = disk
        self.runs = WatchedRuns(settings.diagnosis_window_s)
        self.rules = AlertEngine()
        self._rules_stale = True
        self._server_rules = False  # an enabled rule watches the server (SERVER_METRICS)
        # Each baseline run's median step time, and when it was read (time.monotonic()).
        self._baseline_runs: dict[int, tuple[float, float | None]] = {}
        self.ticks = 0
        self.last_tick_s = 0.0

    # -- fed by ingest (event loop, never blocks) ------------------------------------------

    def attach(self, run: Run | RunPublic) -> None:
        """An agent connected for `run`."""
        self.runs.attach(run)

    def observe_run(self, run: Run | RunPublic) -> None:
        """The run changed (ended, resumed)."""
        self.runs.observe_run(run, connected=run.id in self.connected())

    def observe_batch(self, run: Run | RunPublic, batch: Batch, rank: int = 0) -> None:
        """A committed batch of worker `rank`."""
        self.runs.observe_batch(run, batch, rank)

    # -- the rules --------------------------------------------------------------------------

    def rules_changed(self) -> None:
        self._rules_stale = True

    def use_rules(self, rules: Iterable[AlertRule]) -> None:
        """Evaluate `rules` from now on, instead of loading the stored ones (benchmarks)."""
        self._set_rules(rules)
        self._rules_stale = False

    def _set_rules(self, rules: Iterable[AlertRule]) -> None:
        self.rules.set_rules(rules)
        self._server_rules = any(
            r.enabled and AlertMetric(r.metric) in SERVER_METRICS for r in self.rules.rules
        )
        wanted = self.rules.wanted_params()
        metric_names = {str(key[1]) for _, key in wanted if key[0] == "metric"}
        firsts = [float(key[1]) for _, key in wanted if key[0] == "first"]
        self.runs.want(metric_names, max(firsts, default=0.0))

    # -- read by the API --------------------------------------------------------------------

    def diagnose_now(self, run_id: int) -> Diagnosis | None:
        """The verdict over the run's window as it is now, with every batch observed so far.

        The verdict the tick keeps may predate the last batches; a reader must not get it.
        None when the run is not watched. Call it on the event loop: the window is fed there.
        """
        window = self.runs.windows.get(run_id)
        if window is None:
            return None
        return self._diagnose(window)

    def diagnose_stored(self, window: RunWindow) -> Diagnosis:
        """The verdict over `window`, rebuilt from stored steps (see history.window_from_db).

        Stall detection needs the live arrival times: those of the run's watched window, when
        this server watches it. Call it on the event loop, like `diagnose_now`.
        """
        watched = self.runs.windows.get(window.run_id)
        if watched is not None:
            window.last_step_at = watched.last_step_at
        return self._diagnose(window)

    def _diagnose(self, window: RunWindow) -> Diagnosis:
        connected = window.run_id in self.connected()
        return diagnose_window(
            window, now=time.monotonic(), connected=connected, settings=self.settings
        )

    # -- the tick ---------------------------------------------------------------------------

    async def start(self) -> None:
        """Create the default alert rules on a database's first start."""
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
        baselines = await self._baseline_step_times()
        connected = self.connected()
        evaluation = evaluate(
            self.runs,
            self.rules,
            now=time.monotonic(),
            wall_now=utc_now(),
            connected=connected,
            settings=self.settings,
            baseline_runs=baselines,
            disk_free_share=self._disk_free_share() if self._server_rules else None,
            server_rules=self._server_rules,
        )
        await self.effects.apply(evaluation)
        self.runs.evict(keep=lambda run_id: run_id in connected or self.rules.active_for(run_id))
        self.ticks += 1
        self.last_tick_s = time.monotonic() - started

    async def _baseline_step_times(self) -> dict[int, float | None]:
        """The median step time of each baseline run a rule names, read every 30 s."""
        now = time.monotonic()
        for _, key in self.rules.wanted_params():
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
        return {run_id: median for run_id, (_, median) in self._baseline_runs.items()}

    def _disk_free_share(self) -> float | None:
        """The free share of the fuller of the server's disks: the data directory's, and the
        database's own (where the last disk measure found it)."""
        shares = [
            free_share(*disk_space(self.settings.data_dir)),
            free_share(*self.disk.database_space()),
        ]
        known = [share for share in shares if share is not None]
        return min(known) if known else None
