// `#/compare?runs=1,2` — chosen runs side by side: their diagnosis figures first (verdict,
// input wait, lost device time, step time), an overlay of their step times (aligned by step
// or by elapsed time), their epoch metrics, a summary table (the best value marked only for
// metrics with a direction), and the config and environment keys that differ. The figures
// follow the runs live, as the runs list does.

import { overlaySpec, type OverlayData } from "../charts/chartSpecs";
import { compareMetrics, compareRows, DIAGNOSIS_METRICS, diffFromServer, type Align, type CompareRow, type DiffRow } from "../state/compare";
import { loadUiSettings } from "../state/cost";
import { breakableKey, h, replaceChildren, setAttrs, setText } from "../app/dom";
import type { RunEnergy } from "../state/energy";
import { epochCompareMetrics, epochMetricNames, overlayEpochChart } from "../state/epochs";
import { LiveChart } from "../charts/liveChart";
import { RUNS_HREF, runHref } from "../app/router";
import { emptySeries, seriesFromColumns, type StepSeries } from "../state/series";
import type { CompareResponse, CompareRun } from "../api/types";
import { errorMessage, statusBadge, type AppContext, type View } from "./common";
import { EpochChartGrid } from "./epochCharts";
import { cannotLoad } from "./loading";

export class CompareView implements View {
  readonly el: HTMLElement;
  private readonly ctx: AppContext;
  private readonly ids: number[];
  private readonly abort = new AbortController();
  private readonly body: HTMLElement;
  private readonly chartBox: HTMLElement;
  private readonly chartInfo: HTMLElement;
  private readonly alignSelect: HTMLSelectElement;
  private readonly fieldSelect: HTMLSelectElement;
  private chart: LiveChart<OverlayData> | null = null;
  private runs: CompareRun[] = [];
  private epochNames: string[] = [];
  private readonly epochGrid = new EpochChartGrid({ testId: "compare-epoch-chart", height: 240 });
  private readonly epochBox: HTMLElement;
  private series: StepSeries[] = [];
  /** Each run's energy split (`/runs/{id}/energy`), for the energy rows; read once. */
  private readonly energies = new Map<number, RunEnergy | null>();
  private readonly summaryBox = h("div", { class: "table-wrap" });
  private readonly diagnosisBox = h("div", { class: "table-wrap" });
  private unsubscribe: (() => void) | null = null;
  private destroyed = false;

  constructor(ctx: AppContext, ids: number[]) {
    this.ctx = ctx;
    this.ids = ids;
    this.body = h("div", { class: "compare-body" }, h("p", { class: "muted", text: "Loading runs…" }));
    this.chartBox = h("div", { attrs: { "data-testid": "compare-chart", role: "group", "aria-label": "Step time of the compared runs" } });
    this.chartInfo = h("span", { class: "chart-info muted" });
    this.epochBox = h(
      "section",
      { class: "panel", attrs: { "aria-labelledby": "epoch-overlay-heading", "data-testid": "compare-epochs", hidden: true } },
      h(
        "div",
        { class: "panel-head" },
        h("h2", { text: "Epoch metrics", attrs: { id: "epoch-overlay-heading" } }),
        h("span", { class: "muted small", text: "one line per run · x: epoch (from 0)" }),
      ),
      this.epochGrid.el,
    );
    this.alignSelect = h(
      "select",
      { attrs: { "aria-label": "Align runs by", "data-testid": "align-select" }, on: { change: () => this.draw() } },
      h("option", { text: "align by step", attrs: { value: "step" } }),
      h("option", { text: "align by elapsed time", attrs: { value: "elapsed" } }),
    );
    this.fieldSelect = h(
      "select",
      { attrs: { "aria-label": "Series to overlay", "data-testid": "overlay-field" }, on: { change: () => this.draw() } },
      h("option", { text: "step time", attrs: { value: "durMs" } }),
      h("option", { text: "input wait", attrs: { value: "waitMs" } }),
    );
    this.el = h(
      "section",
      { class: "page compare-page", attrs: { "data-testid": "compare-view", "aria-labelledby": "compare-heading" } },
      h(
        "nav",
        { class: "breadcrumb", attrs: { "aria-label": "Breadcrumb" } },
        h("a", { text: "Runs", attrs: { href: RUNS_HREF } }),
        h("span", { class: "sep", text: "/", attrs: { "aria-hidden": "true" } }),
        h("span", { text: "compare", attrs: { "aria-current": "page" } }),
      ),
      h("div", { class: "page-head" }, h("h1", { text: `Compare ${ids.length} runs`, attrs: { id: "compare-heading" } })),
      this.body,
    );
  }

  mounted(): void {
    if (this.ids.length < 2) {
      replaceChildren(
        this.body,
        h(
          "div",
          { class: "empty-state", attrs: { "data-testid": "compare-empty" } },
          h("h2", { text: "Choose runs to compare" }),
          h("p", null, "Tick two or more runs in the ", h("a", { text: "runs list", attrs: { href: RUNS_HREF } }), " and press Compare."),
        ),
      );
      return;
    }
    void this.load();
  }

  destroy(): void {
    this.destroyed = true;
    this.unsubscribe?.();
    this.abort.abort();
    this.chart?.destroy();
    this.epochGrid.destroy();
  }

  private async load(): Promise<void> {
    // Prices the lost device time row; a failed read is said above the comparison.
    const settings = loadUiSettings(this.ctx.api).then(
      () => null,
      (err: unknown) => err,
    );
    let resp: CompareResponse;
    try {
      resp = await this.ctx.api.compare(this.ids, this.abort.signal);
    } catch (err) {
      if (this.destroyed) return;
      replaceChildren(this.body, h("p", { class: "error", text: `Cannot compare runs: ${errorMessage(err)}`, attrs: { "data-testid": "compare-error" } }));
      return;
    }
    if (this.destroyed) return;
    this.runs = resp.runs;
    this.epochNames = epochMetricNames(this.runs.map((r) => r.summary)).filter((n) => resp.epoch_metrics.includes(n));
    const settingsError = await settings;
    if (this.destroyed) return;
    const count = this.runs.length;
    this.render(diffFromServer(resp.differences.config, count), diffFromServer(resp.differences.environment, count), resp.missing);
    // A run that changes (live, or once it ends) changes its figures here as in the list.
    this.unsubscribe = this.ctx.runs.subscribe((changed) => this.follow(changed));
    if (settingsError !== null) {
      this.body.prepend(h("p", { class: "error", text: cannotLoad("the server's settings", settingsError, false), attrs: { "data-testid": "settings-error" } }));
    }
    await Promise.all([this.loadSeries(), this.loadEpochs(), this.loadEnergies()]);
  }

  private render(config: DiffRow[], env: DiffRow[], missing: number[]): void {
    const runs = this.runs;
    // Ids the server has no run for (e.g. a compare link naming a deleted run).
    const missingNote =
      missing.length > 0 ? h("p", { class: "error", text: `Not found: ${missing.map((i) => `#${i}`).join(", ")}`, attrs: { "data-testid": "compare-missing" } }) : null;
    if (runs.length === 0) {
      replaceChildren(
        this.body,
        missingNote,
        h("p", { class: "muted", attrs: { "data-testid": "compare-none" } }, "None of these runs exists. Choose runs in the ", h("a", { text: "runs list", attrs: { href: RUNS_HREF } }), "."),
      );
      return;
    }
    this.renderSummary();
    const diffTable = (rowsIn: DiffRow[], testId: string, caption: string, none: string) =>
      rowsIn.length === 0
        ? h("p", { class: "muted", text: none, attrs: { "data-testid": testId, "data-rows": 0 } })
        : h(
            "table",
            { class: "kv diff", attrs: { "data-testid": testId, "data-rows": rowsIn.length } },
            h("caption", { class: "visually-hidden", text: caption }),
            h("thead", null, h("tr", null, h("th", { text: "key", attrs: { scope: "col" } }), ...runs.map((r) => h("th", { text: r.name || `run ${r.id}`, attrs: { scope: "col" } })))),
            h(
              "tbody",
              null,
              ...rowsIn.map((d) => h("tr", { attrs: { "data-key": d.key } }, h("th", { attrs: { scope: "row" } }, ...breakableKey(d.key)), ...d.values.map((v) => h("td", { text: v })))),
            ),
          );
    replaceChildren(
      this.body,
      missingNote,
      h(
        "section",
        { class: "panel", attrs: { "aria-labelledby": "compare-diagnosis-heading" } },
        h("div", { class: "panel-head" }, h("h2", { text: "Diagnosis", attrs: { id: "compare-diagnosis-heading" } }), h("span", { class: "muted small", text: "each run's whole run (so far, while it runs)" })),
        this.diagnosisBox,
      ),
      h(
        "section",
        { class: "panel chart-panel", attrs: { "aria-labelledby": "overlay-heading" } },
        h(
          "div",
          { class: "panel-head" },
          h("h2", { text: "Overlay", attrs: { id: "overlay-heading" } }),
          this.chartInfo,
          h("div", { class: "spacer" }),
          this.fieldSelect,
          this.alignSelect,
        ),
        this.chartBox,
      ),
      this.epochBox,
      h(
        "section",
        { class: "panel", attrs: { "aria-labelledby": "summary-heading" } },
        h("div", { class: "panel-head" }, h("h2", { text: "Summary", attrs: { id: "summary-heading" } }), h("span", { class: "muted small", text: "★ best of a metric with a direction (↓ lower, ↑ higher is better)" })),
        this.summaryBox,
      ),
      h(
        "div",
        { class: "details" },
        h(
          "section",
          { class: "panel", attrs: { "aria-labelledby": "config-diff-heading" } },
          h("div", { class: "panel-head" }, h("h2", { text: "Config differences", attrs: { id: "config-diff-heading" } })),
          diffTable(config, "config-diff", "Config keys whose values differ", "The configs do not differ."),
        ),
        h(
          "section",
          { class: "panel", attrs: { "aria-labelledby": "env-diff-heading" } },
          h("div", { class: "panel-head" }, h("h2", { text: "Environment differences", attrs: { id: "env-diff-heading" } })),
          diffTable(env, "env-diff", "Environment keys whose values differ", "The environments do not differ."),
        ),
      ),
    );
    this.chart = new LiveChart(this.chartBox, overlaySpec(), { height: 280, emptyText: "Loading step series…" });
  }

  /** A run of the store changed: take its status and summary when it is one compared. */
  private follow(changed: { id: number } | null): void {
    if (this.destroyed) return;
    const held = changed === null ? [] : this.runs.filter((r) => r.id === changed.id);
    for (const r of held) {
      const run = this.ctx.runs.get(r.id);
      if (!run) continue;
      Object.assign(r, { status: run.status, ended_at: run.ended_at, summary: run.summary });
    }
    if (held.length) this.renderSummary();
  }

  /** The diagnosis figures, then the summary table (the best value of a metric marked). */
  private renderSummary(): void {
    const runs = this.runs;
    replaceChildren(this.diagnosisBox, this.table(compareRows(runs, DIAGNOSIS_METRICS), "compare-diagnosis", "Diagnosis figures of the compared runs, each over its whole run"));
    replaceChildren(
      this.summaryBox,
      this.table(compareRows(runs, [...compareMetrics(this.energies), ...epochCompareMetrics(runs)]), "compare-table", "Summary of the compared runs; the best value of each metric with a direction is marked"),
    );
  }

  private table(rows: CompareRow[], testId: string, caption: string): HTMLElement {
    const runs = this.runs;
    const head = h(
      "tr",
      null,
      h("th", { text: "", attrs: { scope: "col" } }),
      ...runs.map((r) =>
        h(
          "th",
          { attrs: { scope: "col", "data-run-id": r.id } },
          h("a", { text: r.name || `run ${r.id}`, attrs: { href: runHref(r.id) } }),
          h("span", { class: "run-id", text: `#${r.id}` }),
          r.status ? h("div", null, statusBadge(r.status)) : null,
        ),
      ),
    );
    const arrow = (row: CompareRow) =>
      row.better === null ? null : h("span", { class: "better muted", text: row.better === "lower" ? " ↓" : " ↑", attrs: { "aria-hidden": "true" } });
    return h(
      "table",
      { class: "compare-table", attrs: { "data-testid": testId } },
      h("caption", { class: "visually-hidden", text: caption }),
      h("thead", null, head),
      h(
        "tbody",
        null,
        ...rows.map((row) =>
          h(
            "tr",
            { attrs: { "data-metric": row.key } },
            h("th", { attrs: { scope: "row", title: row.better === null ? null : `${row.better} is better` } }, row.label, arrow(row)),
            ...row.cells.map((c) =>
              h(
                "td",
                { class: `num${c.best ? " best" : ""}`, attrs: { "data-best": c.best ? "true" : null, title: c.title || null } },
                c.text,
                c.best ? h("span", { class: "best-mark", text: " ★", attrs: { "aria-label": "best", title: "best" } }) : null,
              ),
            ),
          ),
        ),
      ),
    );
  }

  /** The energy split of each run that reports energy, for the energy rows (as the runs
   * list reads it); a run whose read fails keeps its summary's total and a dash. */
  private async loadEnergies(): Promise<void> {
    const reporting = this.runs.filter((r) => typeof r.summary?.energy_j === "number");
    if (reporting.length === 0) return;
    await Promise.all(
      reporting.map(async (r) => {
        try {
          this.energies.set(r.id, await this.ctx.api.getEnergy(r.id, this.abort.signal));
        } catch {
          this.energies.set(r.id, null);
        }
      }),
    );
    if (this.destroyed) return;
    this.renderSummary();
  }

  private async loadSeries(): Promise<void> {
    const width = this.chart?.widthPx ?? 800;
    this.series = await Promise.all(
      this.runs.map(async (r) => {
        try {
          return seriesFromColumns(await this.ctx.api.getSteps(r.id, { maxPoints: Math.max(200, width) }, this.abort.signal));
        } catch {
          return emptySeries();
        }
      }),
    );
    if (this.destroyed) return;
    this.draw();
  }

  /** Each epoch metric of the runs on one chart, one line per run. */
  private async loadEpochs(): Promise<void> {
    if (this.epochNames.length === 0) return;
    const tracks = await Promise.all(
      this.runs.map(async (r) => {
        try {
          return await this.ctx.api.getEpochMetrics(r.id, this.epochNames, this.abort.signal);
        } catch {
          return [];
        }
      }),
    );
    if (this.destroyed) return;
    const charts = this.epochNames.map((name) =>
      overlayEpochChart(
        name,
        this.runs.map((r, i) => ({ label: r.name || `run ${r.id}`, track: tracks[i]!.find((t) => t.name === name) ?? null })),
      ),
    );
    setAttrs(this.epochBox, { hidden: null, "data-charts": charts.length });
    this.epochGrid.update(charts);
  }

  private draw(): void {
    if (!this.chart || this.runs.length === 0) return;
    const align = this.alignSelect.value as Align;
    const field = this.fieldSelect.value === "waitMs" ? "waitMs" : "durMs";
    const points = this.series.reduce((n, s) => n + s.step.length, 0);
    if (points === 0) {
      this.chart.setEmptyText("No steps recorded for these runs.");
      return;
    }
    setText(this.chartInfo, align === "step" ? "x: step" : "x: seconds since each run's first step");
    setAttrs(this.chartBox, { "data-align": align });
    this.chart.setData({ series: this.series, names: this.runs.map((r) => r.name || `run ${r.id}`), align, field });
  }
}
