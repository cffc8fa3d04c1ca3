// The run page's per-worker group, shown when a run has more than one worker:
// a table of the workers and two overlays by step (step time, input wait), one
// line per rank, the slowest drawn thick. Each rank's steps are fetched from
// GET /runs/{id}/steps?rank=N, at most every REFRESH_MS while the run steps.

import type uPlot from "uplot";
import type { ApiClient } from "../api/client";
import { formatStepTick } from "../charts/axes";
import { lineChartOptions } from "../charts/lineChartOptions";
import { overlayColumns } from "../state/compare";
import { h, replaceChildren, setAttrs } from "../app/dom";
import { formatCount, formatInputWait, formatMs, formatMsTick } from "../app/format";
import { LiveChart, type ChartSpec } from "../charts/liveChart";
import { seriesFromColumns, type StepSeries } from "../state/series";
import type { Run, StepsResponse, WorkerSummary } from "../api/types";
import { slowestRank, workerLabel } from "./workerRanks";

const REFRESH_MS = 5000;
const MAX_POINTS = 800;

interface WorkerLines {
  series: StepSeries[];
  labels: string[];
  slowest: number; // index into series, -1 when none
  field: "durMs" | "waitMs";
}

function workerSpec(): ChartSpec<WorkerLines> {
  return {
    shapeKey: (d) => `${d.field}:${d.labels.join("|")}`,
    columns: (d) => overlayColumns(d.series, "step", d.field) as uPlot.AlignedData,
    options: (d, size, style) =>
      lineChartOptions({
        ...size,
        palette: style.palette,
        time: false,
        xLabel: "step",
        xFormat: formatStepTick,
        axes: [{ scale: "ms", label: "ms", format: formatMsTick, fromZero: true, clipOutliersOf: d.labels.map((_, i) => i + 1) }],
        lines: d.labels.map((label, i) => ({
          label,
          scale: "ms",
          color: style.colors[i % style.colors.length]!,
          width: i === d.slowest ? 3 : 1.25,
          spanGaps: true,
          format: formatMs,
        })),
      }),
  };
}

export class WorkerCharts {
  readonly el: HTMLElement;
  private readonly table: HTMLElement;
  private readonly boxes: { durMs: HTMLElement; waitMs: HTMLElement };
  private readonly charts: { durMs: LiveChart<WorkerLines> | null; waitMs: LiveChart<WorkerLines> | null } = { durMs: null, waitMs: null };
  private lastFetch = 0;
  private lastSteps = -1;
  private loading = false;
  private latest: Run | null = null;
  private timer: ReturnType<typeof setTimeout> | null = null;

  constructor(
    private readonly api: ApiClient,
    private readonly signal: AbortSignal,
  ) {
    this.table = h("div", { attrs: { "data-testid": "worker-table" } });
    const panel = (title: string, testId: string, aria: string) => {
      const box = h("div", { attrs: { "data-testid": testId, role: "group", "aria-label": aria } });
      const section = h("section", { class: "panel chart-panel" }, h("div", { class: "panel-head" }, h("h3", { text: title })), box);
      return { box, section };
    };
    const dur = panel("Step time per worker", "worker-step-chart", "Step time per step, one line per worker");
    const wait = panel("Input wait per worker", "worker-wait-chart", "Input wait per step, one line per worker");
    this.boxes = { durMs: dur.box, waitMs: wait.box };
    this.el = h(
      "div",
      { class: "chart-group", attrs: { "aria-label": "Workers", role: "region", "data-testid": "workers", hidden: true } },
      h(
        "div",
        { class: "group-head" },
        h("h2", { class: "group-title", text: "Workers" }),
        h("span", { class: "muted small", text: "each rank of the job; the slowest drawn thick" }),
      ),
      this.table,
      h("div", { class: "chart-grid" }, dur.section, wait.section),
    );
  }

  /** The run changed: show its workers, and refetch their steps when due. */
  update(run: Run): void {
    const workers = run.summary.workers ?? [];
    if (workers.length < 2) {
      setAttrs(this.el, { hidden: true });
      return;
    }
    setAttrs(this.el, { hidden: null, "data-workers": workers.length });
    const slowest = slowestRank(workers);
    this.renderTable(workers, slowest);
    this.latest = run;
    const stepped = workers.reduce((sum, w) => sum + (w.steps ?? 0), 0);
    if (this.loading || stepped === this.lastSteps) return;
    const now = Date.now();
    const wait = this.lastFetch + REFRESH_MS - now;
    if (wait > 0) {
      // Too soon: come back once due, so the last steps of an ended run are drawn too.
      this.timer ??= setTimeout(() => {
        this.timer = null;
        if (this.latest) this.update(this.latest);
      }, wait);
      return;
    }
    this.lastSteps = stepped;
    this.lastFetch = now;
    void this.load(run.id, workers, slowest);
  }

  private renderTable(workers: WorkerSummary[], slowest: number | null): void {
    const row = (w: WorkerSummary) =>
      h(
        "tr",
        { class: w.rank === slowest ? "slowest" : "", attrs: { "data-rank": w.rank } },
        h("td", { text: workerLabel(w, slowest) }),
        h("td", { text: w.status }),
        h("td", { class: "num", text: formatCount(w.steps) }),
        h("td", { class: "num", text: w.step_time_ms_median === null ? "—" : formatMs(w.step_time_ms_median) }),
        h("td", { class: "num", text: w.input_wait_share === null ? "—" : formatInputWait(w.input_wait_share) }),
        h("td", { class: "mono", text: w.pid ? String(w.pid) : "—" }),
      );
    replaceChildren(
      this.table,
      h(
        "div",
        { class: "table-wrap workers-wrap" },
        h(
          "table",
          { class: "runs-table workers-table" },
        h("thead", null, h("tr", null, ...["worker", "status", "steps", "median step", "input wait", "pid"].map((t) => h("th", { text: t })))),
          h("tbody", null, ...workers.map(row)),
        ),
      ),
    );
  }

  private async load(runId: number, workers: WorkerSummary[], slowest: number | null): Promise<void> {
    this.loading = true;
    try {
      const series = await Promise.all(
        workers.map((w) =>
          this.api
            .getJson<StepsResponse>(`/runs/${runId}/steps?rank=${w.rank}&max_points=${MAX_POINTS}`, this.signal)
            .then(seriesFromColumns),
        ),
      );
      const labels = workers.map((w) => workerLabel(w, slowest));
      const index = workers.findIndex((w) => w.rank === slowest);
      for (const field of ["durMs", "waitMs"] as const) {
        const data: WorkerLines = { series, labels, slowest: index, field };
        this.charts[field] ??= new LiveChart(this.boxes[field], workerSpec(), { height: 220, emptyText: "No steps yet." });
        this.charts[field]!.setData(data);
      }
    } catch {
      this.lastFetch = 0; // retried at the next update
      this.lastSteps = -1;
    } finally {
      this.loading = false;
    }
  }

  destroy(): void {
    if (this.timer !== null) clearTimeout(this.timer);
    this.charts.durMs?.destroy();
    this.charts.waitMs?.destroy();
  }
}
