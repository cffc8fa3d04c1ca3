// `#/tune/<id>` — one `stoker tune` group: the command it tuned, its table (each change's
// steps/s, input wait, speed-up against the unchanged run, verdict and the line to edit), and
// its trials' step times overlaid by step. While the group runs, it is read again every few
// seconds.

import { overlaySpec, type OverlayData } from "../charts/chartSpecs";
import { LiveChart } from "../charts/liveChart";
import { h, replaceChildren, setAttrs } from "../app/dom";
import { formatInputWait, formatTimestamp } from "../app/format";
import { RUNS_HREF, runHref, TUNE_HREF, tuneHref } from "../app/router";
import { emptySeries, seriesFromColumns, type StepSeries } from "../state/series";
import { formatRate, formatSpeedup, shellQuote, trialLines, tuneRunning, verdictTone, type TuneGroup, type TuneRow } from "../state/tune";
import { errorMessage, type AppContext, type View } from "./common";

const POLL_MS = 2000;

export class TuneView implements View {
  readonly el: HTMLElement;
  private readonly ctx: AppContext;
  private readonly id: number;
  private readonly abort = new AbortController();
  private readonly head = h("div", { class: "page-head" });
  private readonly body = h("div", { class: "tune-body" }, h("p", { class: "muted", text: "Loading the tune group…" }));
  private readonly chartBox = h("div", { attrs: { "data-testid": "tune-chart", role: "group", "aria-label": "Step time of each trial" } });
  private chart: LiveChart<OverlayData> | null = null;
  private timer: ReturnType<typeof setTimeout> | null = null;
  private destroyed = false;

  constructor(ctx: AppContext, id: number) {
    this.ctx = ctx;
    this.id = id;
    this.el = h(
      "section",
      { class: "page tune-page", attrs: { "data-testid": "tune-view", "aria-labelledby": "tune-heading" } },
      h(
        "nav",
        { class: "breadcrumb", attrs: { "aria-label": "Breadcrumb" } },
        h("a", { text: "Runs", attrs: { href: RUNS_HREF } }),
        h("span", { class: "sep", text: "/", attrs: { "aria-hidden": "true" } }),
        h("a", { text: "Tune", attrs: { href: TUNE_HREF } }),
        h("span", { class: "sep", text: "/", attrs: { "aria-hidden": "true" } }),
        h("span", { text: `#${id}`, attrs: { "aria-current": "page" } }),
      ),
      this.head,
      this.body,
    );
  }

  mounted(): void {
    void this.load();
  }

  destroy(): void {
    this.destroyed = true;
    this.abort.abort();
    if (this.timer !== null) clearTimeout(this.timer);
    this.chart?.destroy();
  }

  private async load(): Promise<void> {
    let group: TuneGroup;
    try {
      group = await this.ctx.api.getTuneGroup(this.id, this.abort.signal);
    } catch (err) {
      if (this.destroyed) return;
      replaceChildren(this.body, h("p", { class: "error", text: `Cannot load tune group #${this.id}: ${errorMessage(err)}`, attrs: { "data-testid": "tune-error" } }));
      return;
    }
    if (this.destroyed) return;
    document.title = `Tune #${group.id} · Stoker`;
    this.render(group);
    await this.loadSeries(group);
    if (!this.destroyed && tuneRunning(group)) this.timer = setTimeout(() => void this.load(), POLL_MS);
  }

  private render(group: TuneGroup): void {
    replaceChildren(
      this.head,
      h("h1", { text: `Tune: ${group.name || group.command.map(shellQuote).join(" ")}`, attrs: { id: "tune-heading", "data-testid": "tune-name" } }),
      h("span", { class: `badge status status-${group.status === "running" ? "running" : group.status === "finished" ? "finished" : "failed"}`, text: group.status, attrs: { "data-testid": "tune-status" } }),
    );
    const table = group.table;
    const meta = h(
      "p",
      { class: "tune-meta muted" },
      `${group.steps} steps per trial · started ${formatTimestamp(group.created_at)}`,
      group.cwd ? ` · in ${group.cwd}` : "",
    );
    const notes = [table.noise_text ? `Noise: ${table.noise_text}.` : "", table.elements_text ? `Elements: ${table.elements_text}` : "", ...(table.warnings ?? []).map((w) => `Note: ${w}.`)].filter(Boolean);
    replaceChildren(
      this.body,
      meta,
      h("pre", { class: "code", text: `stoker tune --steps ${group.steps} -- ${group.command.map(shellQuote).join(" ")}`, attrs: { "data-testid": "tune-command" } }),
      table.error ? h("p", { class: "error", text: table.error, attrs: { "data-testid": "tune-failure" } }) : null,
      table.conclusion ? h("p", { class: "tune-conclusion", text: table.conclusion, attrs: { "data-testid": "tune-conclusion" } }) : null,
      (table.rows ?? []).length > 0 ? this.tablePanel(group) : null,
      ...notes.map((n) => h("p", { class: "muted small", text: n })),
      h(
        "section",
        { class: "panel chart-panel", attrs: { "aria-labelledby": "tune-chart-heading" } },
        h("div", { class: "panel-head" }, h("h2", { text: "Step time of each trial", attrs: { id: "tune-chart-heading" } }), h("span", { class: "chart-info muted", text: "x: step" })),
        this.chartBox,
      ),
    );
    if (this.chart === null) this.chart = new LiveChart(this.chartBox, overlaySpec(), { height: 280, emptyText: "Loading the trials' steps…" });
  }

  private tablePanel(group: TuneGroup): HTMLElement {
    const runOf = new Map(group.trials.map((t) => [t.run_key, t.run_id ?? null]));
    return h(
      "section",
      { class: "panel", attrs: { "aria-labelledby": "tune-table-heading" } },
      h("div", { class: "panel-head" }, h("h2", { text: "Changes tried", attrs: { id: "tune-table-heading" } }), h("span", { class: "muted small", text: "each measured in its own run of the script; the script file is never changed" })),
      h(
        "div",
        { class: "table-wrap" },
        h(
          "table",
          { class: "compare-table tune-table", attrs: { "data-testid": "tune-table" } },
          h("caption", { class: "visually-hidden", text: "Each change Stoker advises, measured against the unchanged run" }),
          h(
            "thead",
            null,
            h(
              "tr",
              null,
              ...["change", "steps/s", "input wait", "speed-up", "verdict", "line to edit"].map((c) => h("th", { text: c, attrs: { scope: "col" } })),
            ),
          ),
          h("tbody", null, ...(group.table.rows ?? []).map((row) => this.row(row, row.id === group.table.best, runOf))),
        ),
      ),
    );
  }

  private row(row: TuneRow, best: boolean, runOf: Map<string, number | null>): HTMLElement {
    const runId = row.run_key ? runOf.get(row.run_key) ?? null : null;
    const again = row.repeat_speedup != null ? h("span", { class: "muted small", text: ` (${formatSpeedup(row.repeat_speedup)} again)` }) : null;
    return h(
      "tr",
      { class: `tune-row tone-row-${verdictTone(row.verdict)}${best ? " best" : ""}`, attrs: { "data-change": row.id, "data-verdict": row.verdict } },
      h(
        "th",
        { attrs: { scope: "row", title: row.title } },
        runId !== null ? h("a", { text: row.label, attrs: { href: runHref(runId) } }) : row.label,
        best ? h("span", { class: "best-mark", text: " ★", attrs: { "aria-label": "best", title: "best" } }) : null,
      ),
      h("td", { class: "num", text: formatRate(row.steps_per_s) }),
      h("td", { class: "num", text: row.input_wait_share == null ? "—" : formatInputWait(row.input_wait_share) }),
      h("td", { class: "num" }, row.id === "unchanged" ? "1.00×" : formatSpeedup(row.speedup), again),
      h(
        "td",
        { class: "tune-verdict" },
        h("span", { class: `badge tune-badge tone-tune-${verdictTone(row.verdict)}`, text: row.verdict === "unchanged" ? "baseline" : row.verdict }),
        row.note ? h("div", { class: "tune-note small", text: row.note }) : null,
      ),
      h(
        "td",
        { class: "tune-edit" },
        row.edit
          ? h(
              "div",
              { attrs: { "data-testid": "tune-edit" } },
              h("div", { class: "mono small muted", text: row.edit.where }),
              h("code", { class: "tune-before", text: row.edit.before }),
              h("div", { class: "small muted", text: "→" }),
              h("code", { class: "tune-after", text: row.edit.after }),
            )
          : null,
      ),
    );
  }

  private async loadSeries(group: TuneGroup): Promise<void> {
    const lines = trialLines(group);
    const width = this.chart?.widthPx ?? 800;
    const series: StepSeries[] = await Promise.all(
      lines.map(async (line) => {
        try {
          return seriesFromColumns(await this.ctx.api.getSteps(line.runId, { maxPoints: Math.max(200, width) }, this.abort.signal));
        } catch {
          return emptySeries();
        }
      }),
    );
    if (this.destroyed || !this.chart) return;
    const points = series.reduce((n, s) => n + s.step.length, 0);
    setAttrs(this.chartBox, { "data-trials": lines.length });
    if (points === 0) {
      this.chart.setEmptyText(lines.length === 0 ? "No trial has reached the server yet." : "No steps recorded yet.");
      return;
    }
    this.chart.setData({ series, names: lines.map((l) => l.label), align: "step", field: "durMs" });
  }
}

/** `#/tune` — every `stoker tune` group, newest first. */
export class TuneListView implements View {
  readonly el: HTMLElement;
  private readonly ctx: AppContext;
  private readonly abort = new AbortController();
  private readonly body = h("div", null, h("p", { class: "muted", text: "Loading tune groups…" }));

  constructor(ctx: AppContext) {
    this.ctx = ctx;
    this.el = h(
      "section",
      { class: "page", attrs: { "data-testid": "tune-list", "aria-labelledby": "tune-list-heading" } },
      h("div", { class: "page-head" }, h("h1", { text: "Tune", attrs: { id: "tune-list-heading" } })),
      h(
        "p",
        { class: "muted" },
        "Each ",
        h("code", { text: "stoker tune" }),
        " run measures the changes Stoker advises on a script's own pipeline before anyone edits it. A run's diagnosis gives the command (Prove it).",
      ),
      this.body,
    );
  }

  mounted(): void {
    void this.load();
  }

  destroy(): void {
    this.abort.abort();
  }

  private async load(): Promise<void> {
    try {
      const page = await this.ctx.api.listTuneGroups({ limit: 200 }, this.abort.signal);
      this.render(page.data);
    } catch (err) {
      if (this.abort.signal.aborted) return;
      replaceChildren(this.body, h("p", { class: "error", text: `Cannot load tune groups: ${errorMessage(err)}` }));
    }
  }

  private render(groups: TuneGroup[]): void {
    if (groups.length === 0) {
      replaceChildren(this.body, h("p", { class: "muted", text: "No tune group yet.", attrs: { "data-testid": "tune-list-empty" } }));
      return;
    }
    const bestText = (g: TuneGroup): string => {
      const best = (g.table.rows ?? []).find((r) => r.id === g.table.best);
      return best ? `${best.label}: ${formatSpeedup(best.speedup)}` : g.status === "running" ? "running…" : "no measurable gain";
    };
    const cell = (text: string) => h("td", { text });
    replaceChildren(
      this.body,
      h(
        "div",
        { class: "table-wrap" },
        h(
          "table",
          { class: "compare-table", attrs: { "data-testid": "tune-list-table" } },
          h("thead", null, h("tr", null, ...["#", "command", "status", "best change", "started"].map((c) => h("th", { text: c, attrs: { scope: "col" } })))),
          h(
            "tbody",
            null,
            ...groups.map((g) =>
              h(
                "tr",
                { attrs: { "data-group": g.id } },
                h("td", null, h("a", { text: `#${g.id}`, attrs: { href: tuneHref(g.id) } })),
                h("td", { class: "mono", text: g.name }),
                cell(g.status),
                cell(bestText(g)),
                cell(formatTimestamp(g.created_at)),
              ),
            ),
          ),
        ),
      ),
    );
  }
}
