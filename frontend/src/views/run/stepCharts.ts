// The run page's "By step" group: step time (input wait, and the starved
// stretches the server found (`GET /runs/{id}/starvation`) shaded), throughput and logged metrics. The three charts share one cursor
// and zoom together; zooming pauses following, a reset resumes it. The step
// series follows the live stream (StepSync); steps and metrics are each a
// SeriesResource, so a zoom into downsampled data is refined the same way.

import { isNotFound, type ApiClient } from "../../api/client";
import { metricsSpec, throughputSpec, type ThroughputData } from "../../charts/chartSpecs";
import { uiSettings } from "../../state/cost";
import { batchSizeOf, rangesFromStarvation, throughputCaption } from "../../state/derive";
import { h, setAttrs, setText } from "../../app/dom";
import { formatCount } from "../../app/format";
import { ChartGroup, LiveChart, type ZoomRange } from "../../charts/liveChart";
import { metricsDownsampled, shouldRefine, spliceMetrics, spliceSteps, stepRangeQuery } from "../../state/refine";
import { lastMetricStep, mergeMetrics, type ShadeRange } from "../../state/samples";
import { seriesFromColumns, type StepSeries } from "../../state/series";
import { SeriesResource } from "../../state/seriesResource";
import { retentionNote } from "../../state/retention";
import { StepTimeChart } from "./stepTimeChart";
import { StepSync } from "../../state/stepSync";
import type { MetricTrack, Run, StarvedRanges, StepColumns, StepsResponse } from "../../api/types";
import { cannotLoad } from "../loading";
import { chartPanel, Debounce, followButtonState, type ChartBox } from "./panels";

export interface StepChartsOptions {
  api: ApiClient;
  runId: number;
  signal: AbortSignal;
  /** The step series changed (from the first answer on). */
  onSeries: () => void;
  /** The user zoomed or reset the zoom. */
  onZoom: () => void;
}

export class StepCharts {
  readonly el: HTMLElement;
  readonly steps: SeriesResource<StepSeries>;
  readonly metrics: SeriesResource<MetricTrack[]>;
  private readonly opts: StepChartsOptions;
  private readonly chartBox: HTMLElement;
  private readonly chartInfo: HTMLElement;
  private readonly chartError: HTMLElement;
  private readonly followButton: HTMLButtonElement;
  private readonly throughputBox: ChartBox;
  private readonly metricsBox: ChartBox;
  private readonly group = new ChartGroup();
  private readonly refine = new Debounce(200, () => {
    void this.metrics.refine();
    void this.steps.refine();
  });
  private chart: StepTimeChart | null = null;
  private throughputChart: LiveChart<ThroughputData> | null = null;
  private metricsChart: LiveChart<MetricTrack[]> | null = null;
  private sync: StepSync | null = null;
  private run: Run | null = null;
  private following = true;
  /** Starved stretches by step, as the server computed them (exact, not from downsampled buckets). */
  private starved: ShadeRange[] = [];
  private readonly starvedKey: HTMLElement;
  /** Retention reduced the run's steps to rollups no finer than `finestSteps`. */
  private compacted = false;
  private finestSteps: number | null = null;
  private zoom: ZoomRange | null = null;
  private readonly retentionNoteEl: HTMLElement;

  constructor(opts: StepChartsOptions) {
    this.opts = opts;
    const { api, runId, signal } = opts;
    this.steps = new SeriesResource<StepSeries>(
      {
        wantsDetail: (held, r, width) => shouldRefine(held.step, held.downsampled, r.min, r.max, width),
        fetchDetail: async (r, width, sig) => seriesFromColumns(this.noteCompaction(await api.getSteps(runId, stepRangeQuery(r.min, r.max, width), sig))),
        splice: (base, detail, r) => spliceSteps(base, detail, r.min, r.max),
      },
      { widthPx: () => this.chart?.widthPx ?? 800, signal, onChange: () => this.onStepsRefined() },
    );
    this.metrics = new SeriesResource<MetricTrack[]>(
      {
        fetchOverview: (maxPoints, sig) => api.getMetrics(runId, { maxPoints }, sig),
        fetchNewer: (held, sig) => {
          const after = lastMetricStep(held);
          return after === null ? null : api.getMetrics(runId, { afterStep: after, maxPoints: 5000 }, sig);
        },
        merge: (held, newer) => mergeMetrics(held, newer).tracks,
        wantsDetail: (held) => this.metrics.state === "ok" && metricsDownsampled(held),
        fetchDetail: (r, width, sig) => api.getMetrics(runId, stepRangeQuery(r.min, r.max, width), sig),
        splice: (base, detail, r) => spliceMetrics(base, detail, r.min, r.max),
      },
      { widthPx: () => this.metricsChart?.widthPx ?? 600, signal, onChange: () => this.renderMetrics() },
    );

    this.chartBox = h("div", {
      attrs: { "data-testid": "step-time-chart", role: "group", "aria-label": "Step time per step, in milliseconds", "data-starved-ranges": 0 },
    });
    this.chartInfo = h("span", { class: "chart-info muted", attrs: { "data-testid": "chart-info" } });
    this.chartError = h("p", { class: "chart-error error", attrs: { role: "status", hidden: true } });
    this.retentionNoteEl = h("span", { class: "retention-note", attrs: { role: "status", hidden: true, "data-testid": "retention-note" } });
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
    this.throughputBox = chartPanel("Throughput", "throughput-heading", "throughput-chart", "Training throughput per step");
    this.metricsBox = chartPanel("Loss and metrics", "metrics-heading", "metrics-chart", "Logged loss and metrics per step");
    this.starvedKey = h("span", { class: "legend-key starved-key", text: "starved", attrs: { title: starvedTitle(uiSettings().input_bound?.highly_input_bound ?? null) } });
    const stepSection = h(
      "section",
      { class: "panel chart-panel", attrs: { "aria-labelledby": "step-time-heading" } },
      h(
        "div",
        { class: "panel-head" },
        h("h2", { text: "Step time", attrs: { id: "step-time-heading" } }),
        this.chartInfo,
        this.retentionNoteEl,
        h("div", { class: "spacer" }),
        this.starvedKey,
        h("span", { class: "hint muted", text: "drag to zoom · double-click to reset · y axis ignores rare outliers" }),
        this.followButton,
      ),
      this.chartError,
      this.chartBox,
    );
    this.el = h(
      "div",
      { class: "chart-group", attrs: { "aria-label": "Charts by step", role: "region" } },
      h("h2", { class: "group-title", text: "By step" }),
      stepSection,
      h("div", { class: "chart-grid" }, this.throughputBox.section, this.metricsBox.section),
    );
  }

  /** Called once the page is in the document (the charts need their width). */
  mount(syncKey: string): void {
    const { api, runId, signal } = this.opts;
    const onZoom = (range: ZoomRange | null) => this.onZoom(range);
    this.chart = new StepTimeChart(this.chartBox, {
      onFollowChange: (follow) => this.showFollow(follow),
      onZoom,
      syncKey,
      group: this.group,
      shade: () => this.starved,
    });
    this.throughputChart = new LiveChart(this.throughputBox.box, throughputSpec(), {
      height: 200,
      emptyText: "Waiting for the first steps…",
      syncKey,
      group: this.group,
      onZoom,
      shade: () => this.starved,
    });
    this.metricsChart = new LiveChart(this.metricsBox.box, metricsSpec(), {
      height: 200,
      emptyText: "Waiting for logged metrics…",
      syncKey,
      group: this.group,
      onZoom,
    });
    this.sync = new StepSync({
      fetchSteps: async (query) => this.noteCompaction(await api.getSteps(runId, query, signal)),
      // One point per CSS pixel: downsampled buckets keep their min/max band.
      maxPoints: () => Math.max(200, this.chart?.widthPx ?? 800),
      onChange: (series) => this.onSeries(series),
      onError: (err) => {
        if (signal.aborted) return false;
        if (isNotFound(err)) {
          this.showChartError("No step data for this run.");
          return false;
        }
        this.showChartError(cannotLoad("steps", err, true));
        return true;
      },
    });
  }

  /** Fetch the steps after the last one held (live steps are buffered meanwhile). */
  catchUp(): void {
    this.sync?.sync();
  }

  /** Live steps of this run's rank 0. */
  onLive(data: StepColumns): void {
    this.sync?.onLive(data);
  }

  /** The server's starved stretches; returns them in wall-clock time for the GPU charts. */
  setStarvation(resp: StarvedRanges): ShadeRange[] {
    const ranges = rangesFromStarvation(resp);
    this.starved = ranges.steps;
    this.starvedKey.title = starvedTitle(resp.threshold);
    this.chartBox.setAttribute("data-starved-source", "server");
    this.chartBox.setAttribute("data-starved-ranges", String(this.starved.length));
    this.draw();
    return ranges.time;
  }

  update(run: Run): void {
    const first = this.run === null;
    this.run = run;
    this.showFollow(this.following);
    this.chart?.setEmptyText(run.status === "running" ? "Waiting for the first steps…" : "No steps were recorded for this run.");
    if (first) this.draw();
    this.showThroughputCaption();
  }

  stop(): void {
    this.sync?.stop();
  }

  destroy(): void {
    this.refine.cancel();
    this.sync?.stop();
    this.chart?.destroy();
    this.throughputChart?.destroy();
    this.metricsChart?.destroy();
  }

  /** Keep what an answer says of retention (the flag and the rollups' resolution). */
  private noteCompaction(resp: StepsResponse): StepsResponse {
    if (resp.compacted) {
      this.compacted = true;
      this.finestSteps = resp.finest_steps ?? this.finestSteps;
    }
    return resp;
  }

  private showRetentionNote(): void {
    const compacted = this.compacted || Boolean(this.run?.compacted_at);
    const note = retentionNote(compacted, this.finestSteps, this.zoom, this.chart?.widthPx ?? 800);
    this.retentionNoteEl.hidden = note === null;
    setText(this.retentionNoteEl, note ?? "");
  }

  private onZoom(range: ZoomRange | null): void {
    this.zoom = range;
    this.showRetentionNote();
    this.steps.setZoom(range);
    this.metrics.setZoom(range);
    this.opts.onZoom();
    this.refine.schedule();
  }

  private onSeries(series: StepSeries): void {
    this.steps.setOverview(series);
    this.opts.onSeries();
    this.chartError.hidden = true;
    const total = this.sync?.total ?? null;
    let text = `${formatCount(series.step.length)} points`;
    if (series.downsampled) text += ` (downsampled${total !== null ? ` from ${formatCount(total)} steps` : ""})`;
    if (this.steps.refined) text += " · zoom refined";
    setText(this.chartInfo, text);
    this.draw();
  }

  private onStepsRefined(): void {
    const r = this.steps.refined;
    if (r) this.chartBox.setAttribute("data-refined", `${r.min},${r.max}`);
    this.draw();
  }

  private draw(): void {
    const series = this.steps.data;
    if (!series) return;
    this.chart?.setSeries(series);
    this.throughputChart?.setData({ series, batchSize: batchSizeOf(this.run?.config) });
    this.showRetentionNote();
    this.showThroughputCaption();
  }

  private showThroughputCaption(): void {
    const caption = throughputCaption(this.run?.config, this.run?.summary);
    setText(this.throughputBox.info, caption.text);
    this.throughputBox.info.title = caption.title;
  }

  private renderMetrics(): void {
    const box = this.metricsBox;
    const state = this.metrics.state;
    const held = this.metrics.held ?? [];
    setAttrs(box.box, { "data-state": state });
    if (state === "error") this.metricsChart?.setEmptyText(cannotLoad("metrics", null, true));
    else if (held.length === 0)
      this.metricsChart?.setEmptyText(this.run?.status === "running" ? "Waiting for logged metrics…" : "No metrics were logged for this run.");
    setText(box.info, held.map((m) => m.name).join(", "));
    const tracks = this.metrics.data ?? [];
    if (tracks.length > 0) this.metricsChart?.setData(tracks);
  }

  private showChartError(message: string): void {
    this.chartError.textContent = message;
    this.chartError.hidden = false;
  }

  private showFollow(follow: boolean): void {
    this.following = follow;
    followButtonState(this.followButton, follow, this.run?.status === "running", "steps");
  }
}

/** The starved key's tooltip: the server's threshold (its settings, then its answer), once known. */
function starvedTitle(threshold: number | null): string {
  if (threshold === null) return "Stretches where input wait was a large share of step time";
  return `Stretches where input wait was ≥ ${Math.round(threshold * 100)} % of step time`;
}
