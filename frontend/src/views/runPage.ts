// `#/runs/<id>` — one run: header, verdict banner, summary figures, step-indexed
// charts (step time with input wait and starved stretches, throughput, logged
// metrics), wall-clock charts (GPU utilization, memory, temperature/power/clocks
// with throttling, host CPU/RAM), alert history, environment and config.
//
// Step-indexed charts share one cursor and zoom together; so do the wall-clock
// charts. Zooming pauses following; reset resumes. Zooming into downsampled
// data re-fetches the visible range at the chart's resolution and splices it in.

import { isNotFound } from "../api";
import { epochMetricsOf, epochSignature, formatEpochValue, runEpochCharts } from "../epochs";
import { metricsSpec, telemetryChart, telemetrySpec, throughputSpec, type TelemetryKind, type ThroughputData } from "../chartSpecs";
import { batchSizeOf, combineStarved, rangesFromStarvation, starvedRanges, throughputCaption } from "../derive";
import { h, replaceChildren, setAttrs, setText } from "../dom";
import { environmentSummary } from "../environment";
import { formatCount, formatPercent, formatRelativeTime, formatTimestamp, inputWaitLabel, inputWaitLevel } from "../format";
import { ChartGroup, LiveChart, type ZoomRange } from "../liveChart";
import {
  metricsDownsampled,
  shouldRefine,
  spliceMetrics,
  spliceSamples,
  spliceSteps,
  stepRangeQuery,
} from "../refine";
import { RUNS_HREF } from "../router";
import { flattenEntries, isRun, runEnded, runSummaryFigures, validateRunEdit } from "../runs";
import { lastMetricStep, lastSampleTime, mergeMetrics, mergeSamples, sampleCount, throttleRanges, type ShadeRange } from "../samples";
import { seriesFromColumns, type StepSeries } from "../series";
import { StepTimeChart } from "../stepChart";
import { StepSync } from "../stepSync";
import type { Alert, Diagnosis, MetricTrack, Run, RunEvent, SamplesData } from "../types";
import { evidenceText, parseDiagnosis, VerdictGeneration, verdictHeadline, verdictTone } from "../verdict";
import { EpochChartGrid } from "./epochCharts";
import { WorkerCharts } from "./workerCharts";
import { errorMessage, every, statusBadge, tagList, type AppContext, type View } from "./common";

const POLL_MS = 5000;

interface ChartBox {
  section: HTMLElement;
  box: HTMLElement;
  info: HTMLElement;
}

function chartPanel(title: string, id: string, testId: string, aria: string, tools: Node[] = []): ChartBox {
  const box = h("div", { attrs: { "data-testid": testId, role: "group", "aria-label": aria } });
  const info = h("span", { class: "chart-info muted" });
  const section = h(
    "section",
    { class: "panel chart-panel", attrs: { "aria-labelledby": id } },
    h("div", { class: "panel-head" }, h("h2", { text: title, attrs: { id } }), info, h("div", { class: "spacer" }), ...tools),
    box,
  );
  return { section, box, info };
}

type Availability = "loading" | "ok" | "error";

export class RunPageView implements View {
  readonly el: HTMLElement;
  private readonly ctx: AppContext;
  private readonly runId: number;
  private readonly headerBox: HTMLElement;
  private readonly bannerBox: HTMLElement;
  private readonly editBox: HTMLElement;
  private readonly actionError: HTMLElement;
  private readonly figuresBox: HTMLElement;
  private readonly detailsBox: HTMLElement;
  private readonly envBox: HTMLElement;
  private readonly alertsBox: HTMLElement;
  private readonly chartBox: HTMLElement;
  private readonly chartInfo: HTMLElement;
  private readonly chartError: HTMLElement;
  private readonly followButton: HTMLButtonElement;
  private readonly timeFollowButton: HTMLButtonElement;
  private readonly throughputBox: ChartBox;
  private readonly metricsBox: ChartBox;
  private readonly telemetryBoxes: Record<TelemetryKind, ChartBox>;
  private readonly samplesNote: HTMLElement;
  private readonly timeGrid: HTMLElement;
  private readonly abort = new AbortController();
  private readonly cleanups: (() => void)[] = [];
  private readonly stepGroup = new ChartGroup();
  private readonly timeGroup = new ChartGroup();
  private chart: StepTimeChart | null = null;
  private throughputChart: LiveChart<ThroughputData> | null = null;
  private metricsChart: LiveChart<MetricTrack[]> | null = null;
  private readonly telemetryCharts = new Map<TelemetryKind, LiveChart<SamplesData>>();
  private sync: StepSync | null = null;
  private run: Run | null = null;
  private detailsKey = "";
  private envKey = "";
  private following = true;
  private timeFollowing = true;
  private destroyed = false;
  // Step data: the synced overview and, while zoomed, a refined range.
  private overview: StepSeries | null = null;
  private stepDetail: { lo: number; hi: number; series: StepSeries } | null = null;
  private stepZoom: ZoomRange | null = null;
  private stepZoomTimer: ReturnType<typeof setTimeout> | null = null;
  private starved: ShadeRange[] = [];
  /** Starved ranges the server computed (exact, not from downsampled buckets), and up to which step. */
  private serverStarved: { steps: ShadeRange[]; time: ShadeRange[]; covered: number } | null = null;
  private events: RunEvent[] = [];
  private eventsState: Availability = "loading";
  // Metrics and samples, polled.
  private metrics: MetricTrack[] = [];
  private metricsState: Availability = "loading";
  private metricsDetail: { lo: number; hi: number; tracks: MetricTrack[] } | null = null;
  private samples: SamplesData = { device: [], host: [] };
  private samplesState: Availability = "loading";
  // Epoch metrics: re-fetched whenever the run's summary says an epoch arrived.
  private readonly epochGrid = new EpochChartGrid({ testId: "epoch-chart" });
  private readonly workerCharts: WorkerCharts;
  private readonly epochGroup: HTMLElement;
  private epochSig: string | null = null;
  private epochLoading = false;
  private samplesDetail: { lo: number; hi: number; data: SamplesData } | null = null;
  private timeZoom: ZoomRange | null = null;
  private timeZoomTimer: ReturnType<typeof setTimeout> | null = null;
  private throttles: ShadeRange[] = [];
  private polling = false;
  private secondaryStarted = false;
  private secondaryTimer: ReturnType<typeof setTimeout> | null = null;
  // Diagnosis.
  private diagnosis: Diagnosis | null = null;
  private diagnosisState: Availability = "loading";
  private lastLiveVerdict = 0;
  /** Bumped by every live verdict: a REST answer to an older request is dropped. */
  private readonly verdictGen = new VerdictGeneration();
  /** The poll in flight, so the final refresh after the run ends runs after it. */
  private pollTask: Promise<void> | null = null;

  constructor(ctx: AppContext, runId: number) {
    this.ctx = ctx;
    this.runId = runId;
    this.headerBox = h("header", { class: "run-header" }, h("p", { class: "muted", text: "Loading run…" }));
    this.editBox = h("div", { attrs: { hidden: true } });
    this.actionError = h("p", { class: "error", attrs: { role: "alert", hidden: true, "data-testid": "run-action-error" } });
    this.bannerBox = h("section", {
      class: "verdict-banner tone-info",
      attrs: { "data-testid": "verdict-banner", "data-verdict": "loading", "aria-live": "polite", "aria-label": "Diagnosis" },
    });
    this.figuresBox = h("dl", { class: "figures", attrs: { "aria-label": "Run summary" } });
    this.detailsBox = h("div", { class: "details" });
    this.envBox = h("div");
    this.alertsBox = h("div");
    this.chartBox = h("div", {
      attrs: { "data-testid": "step-time-chart", role: "group", "aria-label": "Step time per step, in milliseconds" },
    });
    this.chartInfo = h("span", { class: "chart-info muted", attrs: { "data-testid": "chart-info" } });
    this.chartError = h("p", { class: "chart-error error", attrs: { role: "status", hidden: true } });
    this.followButton = h("button", {
      class: "follow on",
      text: "Live",
      attrs: {
        type: "button",
        "aria-pressed": "true",
        "data-testid": "follow-button",
        title: "Following live data. Drag on the chart to zoom; double-click to reset.",
      },
      on: { click: () => this.chart?.resumeFollow() },
    });
    this.timeFollowButton = h("button", {
      class: "follow on",
      text: "Live",
      attrs: { type: "button", "aria-pressed": "true", "data-testid": "time-follow-button" },
      on: { click: () => this.telemetryCharts.get("gpu")?.resumeFollow() ?? this.telemetryCharts.values().next().value?.resumeFollow() },
    });
    this.throughputBox = chartPanel("Throughput", "throughput-heading", "throughput-chart", "Training throughput per step");
    this.metricsBox = chartPanel("Loss and metrics", "metrics-heading", "metrics-chart", "Logged loss and metrics per step");
    this.telemetryBoxes = {
      gpu: chartPanel("GPU utilization", "gpu-util-heading", "gpu-util-chart", "GPU utilization over time, per GPU"),
      memory: chartPanel("GPU memory", "memory-heading", "memory-chart", "GPU memory over time: NVML used, TensorFlow allocator current and peak, total"),
      thermal: chartPanel("Temperature, power, clocks", "thermal-heading", "thermal-chart", "GPU temperature, power and SM clock over time; throttling shaded"),
      host: chartPanel("Host CPU and memory", "host-heading", "host-chart", "Host and process CPU and memory over time"),
    };
    this.samplesNote = h("p", { class: "muted empty-note", attrs: { "data-testid": "samples-note", hidden: true } });
    this.timeGrid = h(
      "div",
      { class: "chart-grid" },
      this.telemetryBoxes.gpu.section,
      this.telemetryBoxes.memory.section,
      this.telemetryBoxes.thermal.section,
      this.telemetryBoxes.host.section,
    );

    const stepSection = h(
      "section",
      { class: "panel chart-panel", attrs: { "aria-labelledby": "step-time-heading" } },
      h(
        "div",
        { class: "panel-head" },
        h("h2", { text: "Step time", attrs: { id: "step-time-heading" } }),
        this.chartInfo,
        h("div", { class: "spacer" }),
        h("span", { class: "legend-key starved-key", text: "starved", attrs: { title: "Stretches where input wait was ≥ 20 % of step time" } }),
        h("span", { class: "hint muted", text: "drag to zoom · double-click to reset · y axis ignores rare outliers" }),
        this.followButton,
      ),
      this.chartError,
      this.chartBox,
    );

    this.workerCharts = new WorkerCharts(ctx.api, this.abort.signal);
    this.epochGroup = h(
      "div",
      { class: "chart-group", attrs: { "aria-label": "Epoch metrics", role: "region", "data-testid": "epoch-metrics", hidden: true } },
      h(
        "div",
        { class: "group-head" },
        h("h2", { class: "group-title", text: "Epoch metrics" }),
        h("span", { class: "muted small", text: "values at the end of each epoch (x: epoch, from 0); validation dashed" }),
      ),
      this.epochGrid.el,
    );

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
      this.actionError,
      this.editBox,
      this.bannerBox,
      this.figuresBox,
      h(
        "div",
        { class: "chart-group", attrs: { "aria-label": "Charts by step", role: "region" } },
        h("h2", { class: "group-title", text: "By step" }),
        stepSection,
        h("div", { class: "chart-grid" }, this.throughputBox.section, this.metricsBox.section),
      ),
      this.workerCharts.el,
      this.epochGroup,
      h(
        "div",
        { class: "chart-group", attrs: { "aria-label": "Charts by wall-clock time", role: "region" } },
        h(
          "div",
          { class: "group-head" },
          h("h2", { class: "group-title", text: "By wall-clock time" }),
          h("div", { class: "spacer" }),
          this.timeFollowButton,
        ),
        this.samplesNote,
        this.timeGrid,
      ),
      h("div", { class: "details" }, this.alertsBox, this.envBox),
      this.detailsBox,
    );

    this.renderBanner();
    const known = ctx.runs.get(runId);
    if (known) this.showRun(known);
  }

  /** Called once the page is in the document (the charts need their width). */
  mounted(): void {
    const { ctx, runId } = this;
    const stepSync = `stoker-steps-${runId}`;
    const timeSync = `stoker-time-${runId}`;
    this.chart = new StepTimeChart(this.chartBox, {
      onFollowChange: (follow) => this.showFollow(follow),
      onZoom: (range) => this.onStepZoom(range),
      syncKey: stepSync,
      group: this.stepGroup,
      shade: () => this.starved,
    });
    this.throughputChart = new LiveChart(this.throughputBox.box, throughputSpec(), {
      height: 200,
      emptyText: "Waiting for the first steps…",
      syncKey: stepSync,
      group: this.stepGroup,
      onZoom: (range) => this.onStepZoom(range),
      shade: () => this.starved,
    });
    this.metricsChart = new LiveChart(this.metricsBox.box, metricsSpec(), {
      height: 200,
      emptyText: "Waiting for logged metrics…",
      syncKey: stepSync,
      group: this.stepGroup,
      onZoom: (range) => this.onStepZoom(range),
    });
    for (const kind of ["gpu", "memory", "thermal", "host"] as TelemetryKind[]) {
      this.telemetryCharts.set(
        kind,
        new LiveChart(this.telemetryBoxes[kind].box, telemetrySpec(kind), {
          height: 220,
          emptyText: "Waiting for samples…",
          syncKey: timeSync,
          group: this.timeGroup,
          onZoom: (range) => this.onTimeZoom(range),
          onFollowChange: (f) => this.showTimeFollow(f),
          ...(kind === "thermal" ? { shade: () => this.throttles } : {}),
          ...(kind === "gpu" ? { shade: () => this.serverStarved?.time ?? [] } : {}),
        }),
      );
    }

    this.sync = new StepSync({
      fetchSteps: (query) => ctx.api.getSteps(runId, query, this.abort.signal),
      // One point per CSS pixel: downsampled buckets keep their min/max band.
      maxPoints: () => Math.max(200, this.chart?.widthPx ?? 800),
      onChange: (series) => this.onSeries(series),
      onError: (err) => {
        if (this.destroyed || this.abort.signal.aborted) return false;
        if (isNotFound(err)) {
          this.showChartError("No step data for this run.");
          return false;
        }
        this.showChartError(`Cannot load steps (${errorMessage(err)}); retrying…`);
        return true;
      },
    });
    const sync = this.sync;
    if (this.run) this.showRun(this.run);

    // Catch-up: subscribe first, buffer live steps while fetching, then merge.
    this.cleanups.push(
      ctx.live.on("steps", ({ runId: id, data, rank }) => {
        // The charts show rank 0 (as `GET /steps` does by default); other workers' steps would interleave.
        if (id === runId && (rank === undefined || rank === 0)) sync.onLive(data);
      }),
    );
    ctx.live.subscribe(runId);
    this.cleanups.push(() => ctx.live.unsubscribe(runId));
    // A (re)opened socket may have missed steps; so may a slow client told so by a notice.
    this.cleanups.push(ctx.live.on("open", () => sync.sync()));
    this.cleanups.push(ctx.live.on("notice", () => sync.sync()));
    sync.sync();

    this.cleanups.push(
      ctx.live.on("verdict", ({ runId: id, diagnosis }) => {
        if (id !== runId) return;
        this.lastLiveVerdict = Date.now();
        this.verdictGen.live();
        this.diagnosis = diagnosis;
        this.diagnosisState = "ok";
        this.renderBanner();
      }),
    );
    this.cleanups.push(ctx.alerts.subscribe(() => this.renderAlerts()));
    this.cleanups.push(
      ctx.live.on("event", (event) => {
        if (event.run_id !== runId || this.events.some((e) => e.id === event.id && event.id !== 0)) return;
        this.events = [event, ...this.events].slice(0, 500);
        this.renderAlerts();
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
    this.cleanups.push(every(POLL_MS, () => void this.poll()));
    void this.loadRun();
    // The step chart first: everything else waits for its answer (or 1.5 s), so
    // that a long run's page shows its main chart without queueing behind slower reads.
    this.secondaryTimer = setTimeout(() => this.loadSecondary(), 1500);
    this.renderAlerts();
  }

  private loadSecondary(): void {
    if (this.secondaryStarted || this.destroyed) return;
    this.secondaryStarted = true;
    if (this.secondaryTimer !== null) clearTimeout(this.secondaryTimer);
    void this.loadDiagnosis();
    void this.loadMetrics(true);
    void this.loadSamples(true);
    void this.loadEvents();
    // The slowest read (it scans the run's steps): last.
    setTimeout(() => void this.loadStarvation(), 300);
  }

  destroy(): void {
    if (this.destroyed) return;
    this.destroyed = true;
    this.abort.abort();
    for (const c of this.cleanups.splice(0)) c();
    if (this.stepZoomTimer !== null) clearTimeout(this.stepZoomTimer);
    if (this.secondaryTimer !== null) clearTimeout(this.secondaryTimer);
    if (this.timeZoomTimer !== null) clearTimeout(this.timeZoomTimer);
    this.sync?.stop();
    this.chart?.destroy();
    this.throughputChart?.destroy();
    this.metricsChart?.destroy();
    this.epochGrid.destroy();
    this.workerCharts.destroy();
    for (const c of this.telemetryCharts.values()) c.destroy();
  }

  // ---- loading ----

  private async loadRun(): Promise<void> {
    try {
      const run = await this.ctx.api.getRun(this.runId, this.abort.signal);
      if (this.destroyed) return;
      if (isRun(run)) {
        // Through the store, so the runs list and this page agree.
        if (!this.ctx.runs.upsert(run)) this.showRun(this.ctx.runs.get(this.runId) ?? run);
      }
    } catch (err) {
      if (this.destroyed) return;
      if (isNotFound(err)) this.showNotFound();
      else if (!this.run) {
        replaceChildren(this.headerBox, h("p", { class: "error", text: `Cannot load run: ${errorMessage(err)}` }));
      }
    }
  }

  private async loadDiagnosis(): Promise<void> {
    const token = this.verdictGen.begin();
    try {
      const raw = await this.ctx.api.getDiagnosis(this.runId, this.abort.signal);
      if (this.destroyed) return;
      // A live verdict applied while this request was in flight is newer: keep it.
      if (!this.verdictGen.accepts(token)) return;
      const d = parseDiagnosis(raw);
      this.diagnosis = d;
      this.diagnosisState = d ? "ok" : "error";
      if (d) this.ctx.runs.setVerdict(this.runId, d.verdict);
    } catch (err) {
      if (this.destroyed || this.abort.signal.aborted) return;
      // A failed request must not replace a live verdict that arrived meanwhile.
      if (!this.verdictGen.accepts(token) && this.diagnosis) return;
      this.diagnosisState = "error";
    }
    this.renderBanner();
  }

  private async loadMetrics(initial: boolean): Promise<void> {
    const width = this.metricsChart?.widthPx ?? 600;
    const after = initial ? null : lastMetricStep(this.metrics);
    try {
      const tracks = await this.ctx.api.getMetrics(
        this.runId,
        after === null ? { maxPoints: Math.max(200, width) } : { afterStep: after, maxPoints: 5000 },
        this.abort.signal,
      );
      if (this.destroyed) return;
      this.metrics = after === null ? tracks : mergeMetrics(this.metrics, tracks).tracks;
      this.metricsState = "ok";
    } catch (err) {
      if (this.destroyed || this.abort.signal.aborted) return;
      this.metricsState = "error";
    }
    this.renderMetrics();
  }

  private async loadSamples(initial: boolean): Promise<void> {
    const width = this.telemetryCharts.get("gpu")?.widthPx ?? 600;
    const since = initial ? null : lastSampleTime(this.samples);
    try {
      const data = await this.ctx.api.getSamples(
        this.runId,
        since === null ? { maxPoints: Math.max(200, width) } : { sinceT: since, maxPoints: 5000 },
        this.abort.signal,
      );
      if (this.destroyed) return;
      this.samples = since === null ? data : mergeSamples(this.samples, data).data;
      this.samplesState = "ok";
    } catch (err) {
      if (this.destroyed || this.abort.signal.aborted) return;
      this.samplesState = "error";
    }
    this.renderSamples();
  }

  private async loadStarvation(): Promise<void> {
    const covered = this.overview && this.overview.step.length > 0 ? this.overview.step[this.overview.step.length - 1]! : -1;
    try {
      const resp = await this.ctx.api.getStarvation(this.runId, {}, this.abort.signal);
      if (this.destroyed) return;
      this.serverStarved = { ...rangesFromStarvation(resp), covered };
      this.chartBox.setAttribute("data-starved-source", "server");
      this.drawSteps();
      this.telemetryCharts.get("gpu")?.redraw();
    } catch (err) {
      if (this.destroyed || this.abort.signal.aborted) return;
    }
  }

  private async loadEvents(): Promise<void> {
    try {
      const page = await this.ctx.api.listRunEvents(this.runId, this.abort.signal);
      if (this.destroyed) return;
      const known = new Set(this.events.map((e) => e.id));
      const fetched = Array.isArray(page?.data) ? page.data : [];
      this.events = [...this.events, ...fetched.filter((e) => !known.has(e.id))].sort((a, b) => (a.at < b.at ? 1 : a.at > b.at ? -1 : b.id - a.id));
      this.eventsState = "ok";
    } catch (err) {
      if (this.destroyed || this.abort.signal.aborted) return;
      this.eventsState = "error";
    }
    this.renderAlerts();
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
      const tasks: Promise<void>[] = [
        this.loadRun(),
        this.loadSamples(this.samplesState !== "ok"),
        this.loadMetrics(this.metricsState !== "ok"),
      ];
      if (Date.now() - this.lastLiveVerdict > 3 * POLL_MS) tasks.push(this.loadDiagnosis());
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
    this.sync?.sync();
    // Before the secondary loads started, they are still to come and fetch it all.
    if (!this.secondaryStarted) return;
    // After a poll in flight, so incremental fetches start from what it added.
    if (this.pollTask) await this.pollTask.catch(() => undefined);
    if (this.destroyed) return;
    this.polling = true;
    try {
      const tasks: Promise<void>[] = [
        this.loadSamples(this.samplesState !== "ok"),
        this.loadMetrics(this.metricsState !== "ok"),
        this.loadEvents(),
        this.loadDiagnosis(),
        this.loadStarvation(),
      ];
      await Promise.all(tasks);
    } finally {
      this.polling = false;
    }
  }

  // ---- step-indexed data ----

  private onSeries(series: StepSeries): void {
    this.overview = series;
    if (!this.secondaryStarted) requestAnimationFrame(() => this.loadSecondary());
    this.chartError.hidden = true;
    const total = this.sync?.total ?? null;
    const n = series.step.length;
    let text = `${formatCount(n)} points`;
    if (series.downsampled) text += ` (downsampled${total !== null ? ` from ${formatCount(total)} steps` : ""})`;
    if (this.stepDetail) text += " · zoom refined";
    setText(this.chartInfo, text);
    this.drawSteps();
  }

  private drawSteps(): void {
    if (!this.overview) return;
    const d = this.stepDetail;
    const series = d ? spliceSteps(this.overview, d.series, d.lo, d.hi) : this.overview;
    const derived = starvedRanges(series);
    const server = this.serverStarved;
    this.starved = server ? combineStarved(server.steps, server.covered, derived) : derived;
    this.chartBox.setAttribute("data-starved-ranges", String(this.starved.length));
    this.chart?.setSeries(series);
    this.throughputChart?.setData({ series, batchSize: batchSizeOf(this.run?.config) });
    this.showThroughputCaption();
  }

  private showThroughputCaption(): void {
    const caption = throughputCaption(this.run?.config, this.run?.summary);
    setText(this.throughputBox.info, caption.text);
    this.throughputBox.info.title = caption.title;
  }

  private onStepZoom(range: ZoomRange | null): void {
    this.stepZoom = range;
    if (this.stepZoomTimer !== null) clearTimeout(this.stepZoomTimer);
    if (this.secondaryTimer !== null) clearTimeout(this.secondaryTimer);
    this.stepZoomTimer = setTimeout(() => {
      this.stepZoomTimer = null;
      void this.refineSteps();
    }, 200);
  }

  private async refineSteps(): Promise<void> {
    const range = this.stepZoom;
    void this.refineMetrics(range);
    if (!range) {
      if (this.stepDetail) {
        this.stepDetail = null;
        this.drawSteps();
      }
      return;
    }
    const base = this.overview;
    const width = this.chart?.widthPx ?? 800;
    if (!base || !shouldRefine(base.step, base.downsampled, range.min, range.max, width)) return;
    const q = stepRangeQuery(range.min, range.max, width);
    try {
      const resp = await this.ctx.api.getSteps(this.runId, q, this.abort.signal);
      if (this.destroyed || this.stepZoom !== range) return;
      this.stepDetail = { lo: range.min, hi: range.max, series: seriesFromColumns(resp) };
      this.chartBox.setAttribute("data-refined", `${range.min},${range.max}`);
      this.drawSteps();
    } catch {
      /* keep the overview's min/max band */
    }
  }

  // ---- epoch metrics ----

  /** The summary's epoch metrics changed (an epoch ended, or the run was resumed): redraw. */
  private maybeLoadEpochs(): void {
    if (!this.run || this.destroyed || this.epochLoading || !this.el.isConnected) return;
    const sig = epochSignature(this.run.summary);
    if (sig === this.epochSig) return;
    this.epochSig = sig;
    if (sig !== "") void this.loadEpochs();
  }

  private async loadEpochs(): Promise<void> {
    this.epochLoading = true;
    try {
      const tracks = await this.ctx.api.getEpochMetrics(this.runId, [], this.abort.signal);
      if (this.destroyed) return;
      const summary = epochMetricsOf(this.run?.summary);
      const charts = runEpochCharts(tracks);
      setAttrs(this.epochGroup, { hidden: charts.length === 0 ? true : null, "data-charts": charts.length });
      this.epochGrid.update(charts, (c) =>
        c.lines
          .map((l) => summary[l.label])
          .map((e, i) => (e && e.best !== null ? `best ${c.lines[i]!.label} ${formatEpochValue(e.best)} @ ${e.best_epoch}` : ""))
          .filter(Boolean)
          .join(" · "),
      );
    } catch {
      if (this.destroyed) return;
      this.epochSig = null; // retried at the next run update
    } finally {
      this.epochLoading = false;
    }
    this.maybeLoadEpochs(); // an epoch that arrived meanwhile
  }

  // ---- metrics ----

  private async refineMetrics(range: ZoomRange | null): Promise<void> {
    if (!range) {
      if (this.metricsDetail) {
        this.metricsDetail = null;
        this.renderMetrics();
      }
      return;
    }
    if (this.metricsState !== "ok" || !metricsDownsampled(this.metrics)) return;
    const q = stepRangeQuery(range.min, range.max, this.metricsChart?.widthPx ?? 600);
    try {
      const tracks = await this.ctx.api.getMetrics(this.runId, q, this.abort.signal);
      if (this.destroyed || this.stepZoom !== range) return;
      this.metricsDetail = { lo: range.min, hi: range.max, tracks };
      this.renderMetrics();
    } catch {
      /* keep the overview */
    }
  }

  private renderMetrics(): void {
    const box = this.metricsBox;
    setAttrs(box.box, { "data-state": this.metricsState });
    if (this.metricsState === "error") this.metricsChart?.setEmptyText("Cannot load metrics; retrying…");
    else if (this.metrics.length === 0)
      this.metricsChart?.setEmptyText(this.run?.status === "running" ? "Waiting for logged metrics…" : "No metrics were logged for this run.");
    setText(box.info, this.metrics.map((m) => m.name).join(", "));
    const d = this.metricsDetail;
    const tracks = d ? spliceMetrics(this.metrics, d.tracks, d.lo, d.hi) : this.metrics;
    if (tracks.length > 0) this.metricsChart?.setData(tracks);
  }

  // ---- wall-clock data ----

  private renderSamples(): void {
    const state = this.samplesState;
    if (state === "error") {
      this.samplesNote.hidden = false;
      setText(this.samplesNote, "Cannot load device and host samples; retrying…");
      setAttrs(this.samplesNote, { "data-state": state });
    } else {
      this.samplesNote.hidden = true;
    }
    const d = this.samplesDetail;
    const data = d ? spliceSamples(this.samples, d.data, d.lo, d.hi) : this.samples;
    this.throttles = throttleRanges(data.device);
    for (const [kind, chart] of this.telemetryCharts) {
      const box = this.telemetryBoxes[kind];
      const c = telemetryChart(kind, data);
      setAttrs(box.box, { "data-state": state, "data-series": c.series.length });
      if (c.series.length === 0)
        chart.setEmptyText(
          kind === "host"
            ? "No host samples."
            : data.device.length === 0
              ? "No GPU samples (no GPU, or NVML unavailable to the agent)."
              : "The GPU did not report these readings.",
        );
      if (c.series.length > 0) chart.setData(data);
    }
    setText(this.telemetryBoxes.gpu.info, data.device.length > 0 ? `${data.device.length} GPU${data.device.length > 1 ? "s" : ""}` : "");
    setText(this.telemetryBoxes.thermal.info, this.throttles.length > 0 ? `throttled ${this.throttles.length}×` : "");
    this.telemetryBoxes.thermal.box.setAttribute("data-throttle-ranges", String(this.throttles.length));
    setText(this.telemetryBoxes.host.info, sampleCount(data) > 0 ? "" : "");
  }

  private onTimeZoom(range: ZoomRange | null): void {
    this.timeZoom = range;
    if (this.timeZoomTimer !== null) clearTimeout(this.timeZoomTimer);
    this.timeZoomTimer = setTimeout(() => {
      this.timeZoomTimer = null;
      void this.refineSamples();
    }, 200);
  }

  private async refineSamples(): Promise<void> {
    const range = this.timeZoom;
    if (!range) {
      if (this.samplesDetail) {
        this.samplesDetail = null;
        this.renderSamples();
      }
      return;
    }
    const first = this.samples.device[0] ?? this.samples.host[0];
    const width = this.telemetryCharts.get("gpu")?.widthPx ?? 600;
    if (!first || !shouldRefine(first.t, first.downsampled, range.min, range.max, width)) return;
    try {
      const data = await this.ctx.api.getSamples(
        this.runId,
        { sinceT: range.min - 1e-6, untilT: range.max, maxPoints: Math.max(200, width) },
        this.abort.signal,
      );
      if (this.destroyed || this.timeZoom !== range) return;
      this.samplesDetail = { lo: range.min, hi: range.max, data };
      this.renderSamples();
    } catch {
      /* keep the overview's min/max bands */
    }
  }

  // ---- verdict banner ----

  private renderBanner(): void {
    const b = this.bannerBox;
    const d = this.diagnosis;
    if (d) {
      const tone = verdictTone(d.verdict);
      b.className = `verdict-banner tone-${tone}`;
      setAttrs(b, { "data-verdict": d.verdict, "data-source": d.source });
      const share =
        d.input_wait_share !== null ? `Input wait: ${formatPercent(d.input_wait_share)} of step time` : null;
      const window =
        d.window_s !== undefined ? `over the last ${Math.round(d.window_s)} s${d.steps_in_window !== undefined ? ` (${formatCount(d.steps_in_window)} steps)` : ""}` : null;
      replaceChildren(
        b,
        h(
          "div",
          { class: "verdict-head" },
          h("span", { class: `badge verdict tone-${tone}`, text: d.verdict.replace(/_/g, " ") }),
          h("h2", { class: "verdict-title", text: verdictHeadline(d.verdict), attrs: { "data-testid": "verdict-title" } }),
        ),
        h(
          "p",
          { class: "verdict-meta" },
          [share, window].filter(Boolean).join(" "),
          d.source === "fallback"
            ? h("span", {
                class: "fallback-note",
                text: " · inferred from GPU utilization and host CPU (input wait not measured: wrap the dataset with cb.wrap(...))",
                attrs: { "data-testid": "verdict-fallback" },
              })
            : null,
        ),
        d.evidence.length > 0
          ? h(
              "div",
              { class: "verdict-col" },
              h("h3", { text: "Evidence" }),
              h("ul", { attrs: { "data-testid": "verdict-evidence" } }, ...d.evidence.map((e) => h("li", { text: evidenceText(e) }))),
            )
          : null,
        d.advice.length > 0
          ? h(
              "div",
              { class: "verdict-col" },
              h("h3", { text: "What to try" }),
              h("ul", { attrs: { "data-testid": "verdict-advice" } }, ...d.advice.map((a) => h("li", { text: a }))),
            )
          : null,
      );
      return;
    }
    // No diagnosis: say why, and what the summary alone says.
    const s = this.run?.summary;
    const level = inputWaitLevel(s?.input_wait_share);
    b.className = `verdict-banner tone-info`;
    setAttrs(b, { "data-verdict": this.diagnosisState === "loading" ? "loading" : "unavailable", "data-source": "summary" });
    const why = this.diagnosisState === "loading" ? "Diagnosing…" : "Cannot load the diagnosis.";
    replaceChildren(
      b,
      h("div", { class: "verdict-head" }, h("h2", { class: "verdict-title", text: why, attrs: { "data-testid": "verdict-title" } })),
      level !== "unknown"
        ? h("p", {
            class: "verdict-meta",
            text: `From the run summary: input wait ${formatPercent(s?.input_wait_share)} of step time — ${inputWaitLabel(level)}.`,
          })
        : null,
    );
  }

  // ---- alerts, environment ----

  private renderAlerts(): void {
    const store = this.ctx.alerts;
    const alerts = store.forRun(this.runId);
    let body: Node;
    if (store.status === "loading") body = h("p", { class: "muted", text: "Loading alerts…" });
    else if (alerts.length === 0) body = h("p", { class: "muted", text: "No alerts for this run." });
    else body = alertList(alerts, this.ctx.now());
    const events =
      this.eventsState === "ok" && this.events.length > 0
        ? h(
            "details",
            { class: "events", attrs: { "data-testid": "run-events", open: this.events.length <= 8 } },
            h("summary", { text: `Events (${this.events.length}): verdict changes and alert transitions` }),
            h(
              "ul",
              { class: "events-list" },
              ...this.events.slice(0, 200).map((e) =>
                h(
                  "li",
                  { attrs: { "data-kind": e.kind } },
                  h("span", { class: "alert-when muted", text: formatRelativeTime(e.at, this.ctx.now()), attrs: { title: formatTimestamp(e.at) } }),
                  h("span", { class: "event-kind", text: e.kind }),
                  h("span", { text: e.message }),
                ),
              ),
            ),
          )
        : null;
    replaceChildren(
      this.alertsBox,
      h(
        "section",
        { class: "panel", attrs: { "data-testid": "run-alerts", "aria-labelledby": "run-alerts-heading" } },
        h(
          "div",
          { class: "panel-head" },
          h("h2", { text: "Alert history", attrs: { id: "run-alerts-heading" } }),
          h("div", { class: "spacer" }),
          h("a", { text: "Rules", attrs: { href: "#/alerts" } }),
        ),
        body,
        events,
      ),
    );
  }

  private renderEnv(run: Run): void {
    const env = environmentSummary(run.environment);
    const key = JSON.stringify(env);
    if (key === this.envKey) return;
    this.envKey = key;
    const empty = env.rows.length === 0 && env.gpus.length === 0 && env.warnings.length === 0;
    replaceChildren(
      this.envBox,
      h(
        "section",
        { class: "panel env-panel", attrs: { "data-testid": "env-panel", "aria-labelledby": "env-heading" } },
        h("div", { class: "panel-head" }, h("h2", { text: "Environment", attrs: { id: "env-heading" } })),
        env.warnings.length > 0
          ? h(
              "ul",
              { class: "doctor-warnings", attrs: { "data-testid": "doctor-warnings", "aria-label": "Doctor warnings" } },
              ...env.warnings.map((w) => h("li", { text: w })),
            )
          : null,
        empty ? h("p", { class: "muted", text: "The agent reported no environment for this run." }) : null,
        env.rows.length > 0
          ? h(
              "table",
              { class: "kv" },
              h("caption", { class: "visually-hidden", text: "Environment" }),
              h(
                "tbody",
                null,
                ...env.rows.map((r) =>
                  h("tr", { attrs: { "data-env": r.key } }, h("th", { text: r.label, attrs: { scope: "row" } }), h("td", { text: r.value })),
                ),
              ),
            )
          : null,
        env.gpus.length > 0
          ? h(
              "table",
              { class: "kv gpus", attrs: { "data-testid": "env-gpus" } },
              h("caption", { class: "visually-hidden", text: "GPUs" }),
              h(
                "thead",
                null,
                h("tr", null, ...["GPU", "name", "memory", "compute capability"].map((t) => h("th", { text: t, attrs: { scope: "col" } }))),
              ),
              h(
                "tbody",
                null,
                ...env.gpus.map((g) => h("tr", null, h("td", { text: g.index }), h("td", { text: g.name }), h("td", { text: g.memory }), h("td", { text: g.capability }))),
              ),
            )
          : null,
      ),
    );
  }

  // ---- edit, export, delete ----

  private openEdit(): void {
    const run = this.run;
    if (!run) return;
    const err = (id: string) => h("p", { class: "field-error", attrs: { id, hidden: true, "data-testid": id } });
    const name = h("input", { attrs: { id: "run-edit-name", type: "text", maxlength: "200", "data-testid": "run-edit-name" } });
    const tags = h("input", { attrs: { id: "run-edit-tags", type: "text", "data-testid": "run-edit-tags", placeholder: "baseline, bs256" } });
    const notes = h("textarea", { attrs: { id: "run-edit-notes", rows: 3, maxlength: "10000", "data-testid": "run-edit-notes" } });
    name.value = run.name;
    tags.value = (run.tags ?? []).join(", ");
    notes.value = run.notes ?? "";
    const errs = { name: err("run-edit-error-name"), tags: err("run-edit-error-tags"), notes: err("run-edit-error-notes") };
    const formError = h("p", { class: "error", attrs: { hidden: true, role: "alert" } });
    const close = () => {
      this.editBox.hidden = true;
      replaceChildren(this.editBox);
    };
    const form = h(
      "form",
      { class: "panel run-edit-form rule-form", attrs: { "data-testid": "run-edit-form", "aria-label": "Edit run" } },
      h("div", { class: "field" }, h("label", { text: "Name", attrs: { for: "run-edit-name" } }), name, errs.name),
      h("div", { class: "field" }, h("label", { text: "Tags (comma or space separated)", attrs: { for: "run-edit-tags" } }), tags, errs.tags),
      h("div", { class: "field" }, h("label", { text: "Notes", attrs: { for: "run-edit-notes" } }), notes, errs.notes),
      formError,
      h(
        "div",
        { class: "form-actions" },
        h("button", { text: "Cancel", attrs: { type: "button" }, on: { click: close } }),
        h("button", { class: "primary", text: "Save", attrs: { type: "submit", "data-testid": "run-edit-save" } }),
      ),
    );
    form.addEventListener("submit", (ev) => {
      ev.preventDefault();
      const { patch, errors } = validateRunEdit({ name: name.value, tags: tags.value, notes: notes.value });
      for (const [k, el] of Object.entries(errs)) {
        const msg = errors[k as keyof typeof errors];
        el.hidden = !msg;
        setText(el, msg ?? "");
      }
      if (!patch) return;
      this.ctx.api.updateRun(this.runId, patch).then(
        (updated) => {
          if (isRun(updated)) {
            if (!this.ctx.runs.upsert(updated)) this.showRun({ ...updated });
          }
          close();
        },
        (e: unknown) => {
          formError.hidden = false;
          setText(formError, `Cannot save: ${errorMessage(e)}`);
        },
      );
    });
    replaceChildren(this.editBox, form);
    this.editBox.hidden = false;
    name.focus();
  }

  private showActionError(message: string): void {
    setText(this.actionError, message);
    this.actionError.hidden = false;
  }

  private async exportCsv(): Promise<void> {
    try {
      const blob = await this.ctx.api.getBlob(`/runs/${this.runId}/steps.csv`, this.abort.signal);
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

  private showNotFound(why?: string): void {
    this.sync?.stop();
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

  private showRun(run: Run): void {
    const first = this.run === null;
    const ended = runEnded(this.run?.status, run.status);
    this.run = run;
    this.maybeLoadEpochs();
    this.workerCharts.update(run);
    const now = this.ctx.now();
    document.title = `${run.name || `run ${run.id}`} · Stoker`;
    replaceChildren(
      this.headerBox,
      h(
        "div",
        { class: "title-row" },
        h("h1", { class: "run-name", text: run.name || `run ${run.id}`, attrs: { "data-testid": "run-name" } }),
        statusBadge(run.status, run.summary.steps_to_upload),
        h("div", { class: "spacer" }),
        h(
          "div",
          { class: "run-actions" },
          h("button", { text: "Edit", attrs: { type: "button", "data-testid": "run-edit-button", "aria-label": "Edit name, tags and notes" }, on: { click: () => this.openEdit() } }),
          h("button", { text: "Export CSV", attrs: { type: "button", "data-testid": "export-csv", "aria-label": "Download all steps as CSV" }, on: { click: () => void this.exportCsv() } }),
          h("button", { class: "danger", text: "Delete", attrs: { type: "button", "data-testid": "run-delete", "aria-label": "Delete this run" }, on: { click: () => void this.deleteRun() } }),
        ),
      ),
      h(
        "div",
        { class: "meta-row" },
        h("span", { class: "meta" }, h("span", { class: "meta-label", text: "project" }), h("span", { class: "project", text: run.project || "—" })),
        h("span", { class: "meta" }, h("span", { class: "meta-label", text: "id" }), h("span", { class: "mono", text: String(run.id) })),
        h("span", { class: "meta" }, h("span", { class: "meta-label", text: "started" }), h("span", { class: "mono", text: formatTimestamp(run.started_at) })),
        run.ended_at
          ? h("span", { class: "meta" }, h("span", { class: "meta-label", text: "ended" }), h("span", { class: "mono", text: formatTimestamp(run.ended_at) }))
          : null,
        Array.isArray(run.tags) && run.tags.length > 0 ? tagList(run.tags.map(String)) : null,
      ),
      run.notes ? h("p", { class: "run-notes", text: run.notes, attrs: { "data-testid": "run-notes" } }) : null,
    );
    const figures = runSummaryFigures(run, now);
    replaceChildren(
      this.figuresBox,
      ...figures.map((f) =>
        h(
          "div",
          { class: `figure ${f.tone ?? ""}`.trim(), attrs: { "data-figure": f.key, title: f.title ?? null } },
          h("dt", { text: f.label }),
          h("dd", { text: f.value }),
        ),
      ),
    );
    this.showDetails(run);
    this.renderEnv(run);
    this.showFollow(this.following);
    this.showTimeFollow(this.timeFollowing);
    this.chart?.setEmptyText(run.status === "running" ? "Waiting for the first steps…" : "No steps were recorded for this run.");
    if (!this.diagnosis) this.renderBanner();
    if (first) this.drawSteps();
    this.showThroughputCaption();
    if (ended) void this.finalRefresh();
  }

  private showDetails(run: Run): void {
    const config = flattenEntries(run.config);
    const env = flattenEntries(run.environment, 8);
    const key = JSON.stringify([config, env]);
    if (key === this.detailsKey) return;
    this.detailsKey = key;
    const table = (caption: string, rows: [string, string][], empty: string, open: boolean, testId: string) =>
      h(
        "details",
        { class: "panel kv-panel", attrs: { open, "data-testid": testId } },
        h("summary", null, h("h2", { text: caption }), h("span", { class: "muted", text: `${rows.length}` })),
        rows.length === 0
          ? h("p", { class: "muted", text: empty })
          : h(
              "table",
              { class: "kv" },
              h("caption", { class: "visually-hidden", text: caption }),
              h(
                "tbody",
                null,
                ...rows.map(([k, v]) => h("tr", null, h("th", { text: k, attrs: { scope: "row" } }), h("td", { text: v }))),
              ),
            ),
      );
    replaceChildren(
      this.detailsBox,
      table("Config", config, "No config was recorded. Pass config={...} to StokerCallback.", true, "config-panel"),
      table("Environment (raw)", env, "No environment was recorded.", false, "env-raw"),
    );
  }

  private showChartError(message: string): void {
    this.chartError.textContent = message;
    this.chartError.hidden = false;
  }

  private showFollow(follow: boolean): void {
    this.following = follow;
    followButtonState(this.followButton, follow, this.run?.status === "running", "steps");
  }

  private showTimeFollow(follow: boolean): void {
    this.timeFollowing = follow;
    followButtonState(this.timeFollowButton, follow, this.run?.status === "running", "samples");
  }
}

function followButtonState(button: HTMLButtonElement, follow: boolean, live: boolean, what: string): void {
  button.classList.toggle("on", follow);
  setAttrs(button, {
    "aria-pressed": follow ? "true" : "false",
    title: follow
      ? live
        ? "Following live data. Drag on a chart to zoom; double-click to reset."
        : `Showing all ${what}. Drag on a chart to zoom; double-click to reset.`
      : live
        ? `Zoomed: new ${what} keep arriving without moving the view. Click (or double-click the chart) to follow live again.`
        : `Zoomed. Click (or double-click the chart) to show all ${what}.`,
  });
  setText(button, follow ? (live ? "Live" : `All ${what}`) : live ? "Resume live" : "Reset zoom");
}

/** A list of alerts (run page history and alerts view). */
export function alertList(alerts: Alert[], nowMs: number, runName?: (id: number) => string | null): HTMLElement {
  return h(
    "ul",
    { class: "alerts-list", attrs: { "data-testid": "alerts-list" } },
    ...alerts.map((a) => {
      const when = a.resolved_at ?? a.fired_at ?? a.started_at;
      const name = runName?.(a.run_id);
      return h(
        "li",
        { class: `alert-item state-${a.state}`, attrs: { "data-testid": "alert-row", "data-state": a.state, "data-alert-id": a.id } },
        h("span", { class: `badge alert-state state-${a.state}`, text: a.state }),
        h(
          "div",
          { class: "alert-body" },
          h("div", { class: "alert-title" }, h("strong", { text: a.rule_name }), runName ? h("a", { class: "alert-run", text: name ?? `run #${a.run_id}`, attrs: { href: `#/runs/${a.run_id}` } }) : null),
          a.message ? h("div", { class: "alert-message", text: a.message }) : null,
        ),
        h("span", { class: "alert-when muted", text: formatRelativeTime(when, nowMs), attrs: { title: formatTimestamp(when) } }),
      );
    }),
  );
}
