// `#/runs/<id>` — one run. This module puts the page together and drives its
// data: the run itself (through the runs store), live messages, the 5 s poll
// while the run is live and the final refresh when it ends. Each part of the
// page is its own module under `./run/`:
//   header.ts           name, status, actions, summary figures
//   verdictBanner.ts    diagnosis with evidence and advice
//   stepCharts.ts       step time, throughput, logged metrics (by step)
//   workerCharts.ts     per-rank table and charts of multi-worker runs
//   epochPanel.ts       epoch metrics
//   timeCharts.ts       GPU and host telemetry (by wall-clock time)
//   alertsPanel.ts      alert history and events
//   environmentPanel.ts, configPanel.ts, editForm.ts

import { loadUiSettings } from "../state/cost";
import { isNotFound } from "../api/client";
import { h, replaceChildren, setText } from "../app/dom";
import { RUNS_HREF, tuneHref } from "../app/router";
import { tuneGroupKey } from "../state/tune";
import { isRun, runEnded } from "../state/runs";
import type { Run } from "../api/types";
import { errorMessage, every, type AppContext, type View } from "./common";
import { cannotLoad } from "./loading";
import { AlertsPanel } from "./run/alertsPanel";
import { ConfigPanel } from "./run/configPanel";
import { openRunEditForm } from "./run/editForm";
import { EnvironmentPanel } from "./run/environmentPanel";
import { EpochPanel } from "./run/epochPanel";
import { PipelinePanel } from "./run/pipelinePanel";
import { ProfilePanel } from "./run/profilePanel";
import { renderFedLine, renderRunFigures, renderRunHeader } from "./run/header";
import type { RunEnergy } from "../state/energy";
import { StepCharts } from "./run/stepCharts";
import { TimeCharts } from "./run/timeCharts";
import { VerdictBanner } from "./run/verdictBanner";
import { WorkerCharts } from "./workerCharts";

const POLL_MS = 5000;
/** While steps stream in, the starved shading follows within this long. */
const STARVATION_REFRESH_MS = 1000;

export class RunPageView implements View {
  readonly el: HTMLElement;
  private readonly ctx: AppContext;
  private readonly runId: number;
  private readonly abort = new AbortController();
  private readonly signal = this.abort.signal;
  private readonly cleanups: (() => void)[] = [];
  private readonly headerBox: HTMLElement;
  private readonly editBox: HTMLElement;
  private readonly actionError: HTMLElement;
  private readonly figuresBox: HTMLElement;
  /** How much sooner the run would have finished had its input kept up. */
  private readonly fedLine: HTMLElement;
  /** Why the server's settings (GPU-hour price, input-bound thresholds) could not be read. */
  private readonly settingsError: HTMLElement;
  /** "Trial of tune group #N": a run `stoker tune` streamed links its group's page. */
  private readonly tuneLink: HTMLElement;
  private tuneLookup: string | null = null;
  private settingsLoaded = false;
  private settingsFailure: string | null = null;
  private readonly banner: VerdictBanner;
  private readonly stepCharts: StepCharts;
  private readonly workerCharts: WorkerCharts;
  private readonly epochs: EpochPanel;
  private readonly timeCharts: TimeCharts;
  private readonly alerts: AlertsPanel;
  private readonly profiler: ProfilePanel;
  private readonly pipeline: PipelinePanel;
  private readonly environment = new EnvironmentPanel();
  private readonly config = new ConfigPanel();
  private run: Run | null = null;
  /** The run's energy split (`/runs/{id}/energy`), read at most every 5 s while it runs. */
  private energy: RunEnergy | null = null;
  private energyReadAt = 0;
  private energyTask: Promise<void> | null = null;
  private destroyed = false;
  private polling = false;
  private starvationTimer: number | null = null;
  /** The poll in flight, so the final refresh after the run ends runs after it. */
  private pollTask: Promise<void> | null = null;
  private secondaryStarted = false;
  private secondaryTimer: ReturnType<typeof setTimeout> | null = null;

  constructor(ctx: AppContext, runId: number) {
    this.ctx = ctx;
    this.runId = runId;
    const { signal } = this;
    this.headerBox = h("header", { class: "run-header" }, h("p", { class: "muted", text: "Loading run…" }));
    this.editBox = h("div", { attrs: { hidden: true } });
    this.actionError = h("p", { class: "error", attrs: { role: "alert", hidden: true, "data-testid": "run-action-error" } });
    this.figuresBox = h("dl", { class: "figures", attrs: { "aria-label": "Run summary" } });
    this.fedLine = h("p", { class: "fed-estimate", attrs: { "data-testid": "fed-estimate", hidden: true } });
    this.settingsError = h("p", { class: "error", attrs: { role: "status", hidden: true, "data-testid": "settings-error" } });
    this.tuneLink = h("p", { class: "tune-link muted", attrs: { hidden: true, "data-testid": "run-tune-link" } });
    void this.loadSettings();
    this.banner = new VerdictBanner(ctx, runId, signal, () => this.run);
    this.stepCharts = new StepCharts({
      api: ctx.api,
      runId,
      signal,
      onSeries: () => {
        if (!this.secondaryStarted) requestAnimationFrame(() => this.loadSecondary());
      },
      onZoom: () => {
        if (this.secondaryTimer !== null) clearTimeout(this.secondaryTimer);
      },
    });
    this.workerCharts = new WorkerCharts(ctx.api, signal);
    this.epochs = new EpochPanel(ctx.api, runId, signal);
    this.timeCharts = new TimeCharts(ctx.api, runId, signal);
    this.alerts = new AlertsPanel(ctx, runId, signal);
    this.profiler = new ProfilePanel(ctx.api, runId, signal, ctx.access);
    this.pipeline = new PipelinePanel(ctx.api, runId, signal);

    this.el = h(
      "section",
      { class: "page run-page", attrs: { "data-run-id": runId } },
      h(
        "nav",
        { class: "breadcrumb", attrs: { "aria-label": "Breadcrumb" } },
        h("a", { text: "Runs", attrs: { href: RUNS_HREF } }),
        h("span", { class: "sep", text: "/", attrs: { "aria-hidden": "true" } }),
        h("span", { text: `#${runId}`, attrs: { "aria-current": "page" } }),
      ),
      this.headerBox,
      this.tuneLink,
      this.actionError,
      this.editBox,
      this.banner.el,
      this.figuresBox,
      this.fedLine,
      this.settingsError,
      this.stepCharts.el,
      this.workerCharts.el,
      this.epochs.el,
      this.pipeline.el,
      this.profiler.el,
      this.timeCharts.el,
      h("div", { class: "details" }, this.alerts.el, this.environment.el),
      this.config.el,
    );

    this.banner.render();
    const known = ctx.runs.get(runId);
    if (known) this.showRun(known);
  }

  /** Called once the page is in the document (the charts need their width). */
  mounted(): void {
    const { ctx, runId } = this;
    this.stepCharts.mount(`stoker-steps-${runId}`);
    this.timeCharts.mount(`stoker-time-${runId}`);
    if (this.run) this.showRun(this.run);

    // Catch-up: subscribe first, buffer live steps while fetching, then merge.
    this.cleanups.push(
      ctx.live.on("steps", ({ runId: id, data, rank }) => {
        // The charts show rank 0 (as `GET /steps` does by default); other workers' steps would interleave.
        if (id === runId && (rank === undefined || rank === 0)) {
          this.stepCharts.onLive(data);
          this.refreshStarvationSoon();
        }
      }),
    );
    this.cleanups.push(() => {
      if (this.starvationTimer !== null) window.clearTimeout(this.starvationTimer);
    });
    ctx.live.subscribe(runId);
    this.cleanups.push(() => ctx.live.unsubscribe(runId));
    // A (re)opened socket may have missed steps; so may a slow client told so by a notice.
    this.cleanups.push(ctx.live.on("open", () => this.stepCharts.catchUp()));
    this.cleanups.push(ctx.live.on("notice", () => this.stepCharts.catchUp()));
    this.stepCharts.catchUp();

    this.cleanups.push(
      ctx.live.on("verdict", ({ runId: id, diagnosis }) => {
        // An ended run's verdict is its whole run's (the final read): a last window's verdict
        // pushed as it ended would put a second figure beside the summary's.
        if (id === runId && this.run?.status !== "finished" && this.run?.status !== "failed" && this.run?.status !== "interrupted") {
          this.banner.applyLive(diagnosis);
        }
      }),
    );
    this.cleanups.push(ctx.alerts.subscribe(() => this.alerts.render()));
    this.cleanups.push(ctx.live.on("event", (event) => this.alerts.addLive(event)));
    this.cleanups.push(
      ctx.live.on("profile", ({ runId: id, profile }) => {
        if (id === runId) this.profiler.applyLive(profile);
      }),
    );
    this.cleanups.push(
      ctx.live.on("deleted", ({ runId: id }) => {
        if (id === runId) this.showNotFound("This run was deleted.");
      }),
    );
    this.cleanups.push(
      ctx.runs.subscribe((changed) => {
        const run = ctx.runs.get(runId);
        if (run && (changed === null || changed.id === runId)) this.showRun(run);
      }),
    );
    this.cleanups.push(every(5000, () => this.run && this.showRun(this.run)));
    // A token with other rights was entered: offer its actions.
    this.cleanups.push(ctx.access.subscribe(() => this.run && this.showRun(this.run)));
    this.cleanups.push(every(POLL_MS, () => void this.poll()));
    void this.loadRun();
    // The step chart first: everything else waits for its answer (or 1.5 s), so
    // that a long run's page shows its main chart without queueing behind slower reads.
    this.secondaryTimer = setTimeout(() => this.loadSecondary(), 1500);
    this.alerts.render();
    void this.profiler.load();
    void this.pipeline.load();
  }

  destroy(): void {
    if (this.destroyed) return;
    this.destroyed = true;
    this.abort.abort();
    for (const c of this.cleanups.splice(0)) c();
    if (this.secondaryTimer !== null) clearTimeout(this.secondaryTimer);
    this.stepCharts.destroy();
    this.epochs.destroy();
    this.workerCharts.destroy();
    this.timeCharts.destroy();
    this.pipeline.destroy();
  }

  // ---- loading ----

  private loadSecondary(): void {
    if (this.secondaryStarted || this.destroyed) return;
    this.secondaryStarted = true;
    if (this.secondaryTimer !== null) clearTimeout(this.secondaryTimer);
    void this.banner.load();
    void this.stepCharts.metrics.load(true);
    void this.timeCharts.samples.load(true);
    void this.alerts.loadEvents();
    // The slowest read (it scans the run's steps): last.
    setTimeout(() => void this.loadStarvation(), 300);
  }

  private async loadRun(): Promise<void> {
    try {
      const run = await this.ctx.api.getRun(this.runId, this.signal);
      if (this.destroyed) return;
      if (isRun(run)) {
        // Through the store, so the runs list and this page agree.
        if (!this.ctx.runs.upsert(run)) this.showRun(this.ctx.runs.get(this.runId) ?? run);
      }
    } catch (err) {
      if (this.destroyed) return;
      if (isNotFound(err)) this.showNotFound();
      else if (!this.run) {
        replaceChildren(this.headerBox, h("p", { class: "error", text: cannotLoad("the run", err, false) }));
      }
    }
  }

  /** The server's UI settings (read once for all views): they price the lost device time. */
  private async loadSettings(): Promise<void> {
    try {
      await loadUiSettings(this.ctx.api);
      if (this.destroyed) return;
      this.settingsLoaded = true;
      this.settingsFailure = null;
      if (this.run) renderRunFigures(this.figuresBox, this.run, this.ctx.now(), this.energy); // priced lost device time
    } catch (err) {
      if (this.destroyed) return; // left the page
      this.settingsFailure = errorMessage(err);
    }
    this.showSettingsFailure();
  }

  /** The settings' read failure; while the run is live the next poll reads them again. */
  private showSettingsFailure(): void {
    this.settingsError.hidden = this.settingsFailure === null;
    if (this.settingsFailure === null) return;
    setText(this.settingsError, cannotLoad("the server's settings", this.settingsFailure, this.run?.status === "running"));
  }

  /** Live steps arrived: re-read the server's starved stretches within a second (not per message). */
  private refreshStarvationSoon(): void {
    if (this.starvationTimer !== null || this.destroyed) return;
    this.starvationTimer = window.setTimeout(() => {
      this.starvationTimer = null;
      void this.loadStarvation();
    }, STARVATION_REFRESH_MS);
  }

  /** The server's starved stretches (re-read with every poll while the run is live). */
  private async loadStarvation(): Promise<void> {
    try {
      const resp = await this.ctx.api.getStarvation(this.runId, {}, this.signal);
      if (this.destroyed) return;
      this.timeCharts.setStarved(this.stepCharts.setStarvation(resp));
    } catch {
      /* keep the stretches of the last answer */
    }
  }

  /**
   * While the run is live: the run itself (its status, should the socket miss
   * the end), new samples, metrics and (without live verdicts) the diagnosis.
   */
  private poll(): Promise<void> {
    if (this.polling || this.destroyed || !this.secondaryStarted || this.run?.status !== "running") return Promise.resolve();
    const task = this.pollOnce();
    this.pollTask = task;
    return task;
  }

  private async pollOnce(): Promise<void> {
    this.polling = true;
    try {
      const samples = this.timeCharts.samples;
      const metrics = this.stepCharts.metrics;
      const tasks: Promise<void>[] = [this.loadRun(), samples.load(samples.state !== "ok"), metrics.load(metrics.state !== "ok")];
      if (this.banner.sinceLive() > 3 * POLL_MS) tasks.push(this.banner.load());
      if (!this.settingsLoaded) tasks.push(this.loadSettings());
      tasks.push(this.loadStarvation());
      await Promise.all(tasks);
    } finally {
      this.polling = false;
      this.pollTask = null;
    }
  }

  /**
   * The run stopped running (live `run` message or poll): polling stops with
   * it, so fetch everything one last time — steps after the last one held,
   * samples, metrics, starvation, events and the final diagnosis — and the page
   * shows the complete run without a reload.
   */
  private async finalRefresh(): Promise<void> {
    if (this.destroyed) return;
    // Steps: an `after_step` catch-up (live steps are buffered meanwhile).
    this.stepCharts.catchUp();
    // Before the secondary loads started, they are still to come and fetch it all.
    if (!this.secondaryStarted) return;
    // After a poll in flight, so incremental fetches start from what it added.
    if (this.pollTask) await this.pollTask.catch(() => undefined);
    if (this.destroyed) return;
    this.polling = true;
    try {
      const samples = this.timeCharts.samples;
      const metrics = this.stepCharts.metrics;
      await Promise.all([
        samples.load(samples.state !== "ok"),
        metrics.load(metrics.state !== "ok"),
        this.alerts.loadEvents(),
        this.banner.load(),
        this.loadStarvation(),
      ]);
    } finally {
      this.polling = false;
    }
  }

  // ---- showing the run ----

  /** Reads the energy split when the run has energy, at most every 5 s (and once it ended). */
  private loadEnergy(run: Run, ended: boolean): void {
    if (typeof run.summary?.energy_j !== "number" || this.energyTask) return;
    const now = Date.now();
    if (!ended && this.energy && (run.status !== "running" || now - this.energyReadAt < 5000)) return;
    this.energyReadAt = now;
    this.energyTask = this.ctx.api
      .getEnergy(this.runId, this.signal)
      .then((energy) => {
        if (this.destroyed) return;
        this.energy = energy;
        if (this.run) renderRunFigures(this.figuresBox, this.run, this.ctx.now(), energy);
      })
      .catch(() => {})
      .finally(() => {
        this.energyTask = null;
      });
  }

  private showRun(run: Run): void {
    const ended = runEnded(this.run?.status, run.status);
    this.run = run;
    this.epochs.update(run);
    this.profiler.setLive(run.status === "running");
    this.pipeline.setLive(run.status === "running");
    this.workerCharts.update(run);
    document.title = `${run.name || `run ${run.id}`} · Stoker`;
    renderRunHeader(this.headerBox, run, {
      canEdit: this.ctx.access.canAdmin,
      edit: () => this.openEdit(),
      exportCsv: () => void this.exportCsv(),
      remove: () => void this.deleteRun(),
      togglePin: () => void this.togglePin(),
    });
    renderRunFigures(this.figuresBox, run, this.ctx.now(), this.energy);
    renderFedLine(this.fedLine, run, this.ctx.now());
    this.showTuneGroup(run);
    this.loadEnergy(run, ended);
    this.showSettingsFailure();
    this.config.update(run);
    this.environment.update(run);
    this.timeCharts.update(run);
    if (!this.banner.known) this.banner.render();
    this.stepCharts.update(run);
    if (ended) void this.finalRefresh();
  }

  /** A trial of `stoker tune` links its group (looked up once, by the key in its config). */
  private showTuneGroup(run: Run): void {
    const key = tuneGroupKey(run);
    if (key === null || key === this.tuneLookup) return;
    this.tuneLookup = key;
    this.ctx.api
      .listTuneGroups({ key, limit: 1 }, this.signal)
      .then((page) => {
        const group = page.data[0];
        if (this.destroyed || !group) return;
        const trial = (run.config as { tune?: { change?: unknown } }).tune?.change;
        replaceChildren(
          this.tuneLink,
          "A trial of ",
          h("a", { text: `tune group #${group.id}`, attrs: { href: tuneHref(group.id) } }),
          typeof trial === "string" ? ` (${trial})` : "",
          ": stoker tune measured it against the script's unchanged run.",
        );
        this.tuneLink.hidden = false;
      })
      .catch(() => {});
  }

  private showNotFound(why?: string): void {
    this.stepCharts.stop();
    replaceChildren(
      this.el,
      h(
        "div",
        { class: "empty-state", attrs: { "data-testid": "run-not-found" } },
        h("h1", { text: "Run not found" }),
        h("p", { text: why ?? `There is no run #${this.runId} on this server.` }),
        h("p", null, h("a", { text: "Back to all runs", attrs: { href: RUNS_HREF } })),
      ),
    );
  }

  // ---- edit, export, delete ----

  private openEdit(): void {
    if (!this.run) return;
    openRunEditForm(this.editBox, this.ctx, this.run, (updated) => {
      if (isRun(updated) && !this.ctx.runs.upsert(updated)) this.showRun({ ...updated });
    });
  }

  private showActionError(message: string): void {
    this.actionError.textContent = message;
    this.actionError.hidden = false;
  }

  private async exportCsv(): Promise<void> {
    try {
      const blob = await this.ctx.api.getBlob(`/runs/${this.runId}/steps.csv`, this.signal);
      const url = URL.createObjectURL(blob);
      const a = h("a", { attrs: { href: url, download: `run-${this.runId}-steps.csv` } });
      document.body.append(a);
      a.click();
      a.remove();
      setTimeout(() => URL.revokeObjectURL(url), 10_000);
    } catch (e) {
      this.showActionError(`Export failed: ${errorMessage(e)}`);
    }
  }

  private async togglePin(): Promise<void> {
    if (!this.run) return;
    try {
      const updated = await this.ctx.api.updateRun(this.runId, { pinned: !this.run.pinned });
      if (isRun(updated) && !this.ctx.runs.upsert(updated)) this.showRun({ ...updated });
    } catch (e) {
      this.showActionError(`${this.run.pinned ? "Unpin" : "Pin"} failed: ${errorMessage(e)}`);
    }
  }

  private async deleteRun(): Promise<void> {
    const name = this.run?.name ?? `run #${this.runId}`;
    if (!window.confirm(`Delete "${name}" with all its steps, samples and metrics? This cannot be undone.`)) return;
    try {
      await this.ctx.api.deleteRun(this.runId);
      this.ctx.runs.remove(this.runId);
      location.hash = RUNS_HREF;
    } catch (e) {
      this.showActionError(`Delete failed: ${errorMessage(e)}`);
    }
  }
}
