// `#/runs/<id>` — one run: header, summary figures, live step-time chart,
// config and environment.

import { isNotFound } from "../api";
import { h, replaceChildren, setAttrs, setText } from "../dom";
import { formatCount, formatTimestamp } from "../format";
import { RUNS_HREF } from "../router";
import { flattenEntries, isRun, runSummaryFigures } from "../runs";
import type { StepSeries } from "../series";
import { StepTimeChart } from "../stepChart";
import { StepSync } from "../stepSync";
import type { Run } from "../types";
import { errorMessage, every, statusBadge, tagList, type AppContext, type View } from "./common";

export class RunPageView implements View {
  readonly el: HTMLElement;
  private readonly ctx: AppContext;
  private readonly runId: number;
  private readonly headerBox: HTMLElement;
  private readonly figuresBox: HTMLElement;
  private readonly detailsBox: HTMLElement;
  private readonly chartBox: HTMLElement;
  private readonly chartInfo: HTMLElement;
  private readonly chartError: HTMLElement;
  private readonly followButton: HTMLButtonElement;
  private readonly abort = new AbortController();
  private readonly cleanups: (() => void)[] = [];
  private chart: StepTimeChart | null = null;
  private sync: StepSync | null = null;
  private run: Run | null = null;
  private detailsKey = "";
  private following = true;
  private destroyed = false;

  constructor(ctx: AppContext, runId: number) {
    this.ctx = ctx;
    this.runId = runId;
    this.headerBox = h("header", { class: "run-header" }, h("p", { class: "muted", text: "Loading run…" }));
    this.figuresBox = h("dl", { class: "figures", attrs: { "aria-label": "Run summary" } });
    this.detailsBox = h("div", { class: "details" });
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
        title: "Following live data. Drag on the chart to zoom; double-click to reset.",
      },
      on: { click: () => this.chart?.resumeFollow() },
    });

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
      this.figuresBox,
      h(
        "section",
        { class: "panel", attrs: { "aria-labelledby": "step-time-heading" } },
        h(
          "div",
          { class: "panel-head" },
          h("h2", { text: "Step time", attrs: { id: "step-time-heading" } }),
          this.chartInfo,
          h("div", { class: "spacer" }),
          h("span", { class: "hint muted", text: "drag to zoom · double-click to reset" }),
          this.followButton,
        ),
        this.chartError,
        this.chartBox,
      ),
      this.detailsBox,
    );

    const known = ctx.runs.get(runId);
    if (known) this.showRun(known);
  }

  /** Called once the page is in the document (the chart needs its width). */
  mounted(): void {
    const { ctx, runId } = this;
    this.chart = new StepTimeChart(this.chartBox, {
      onFollowChange: (follow) => this.showFollow(follow),
    });
    this.sync = new StepSync({
      fetchSteps: (query) => ctx.api.getSteps(runId, query, this.abort.signal),
      maxPoints: () => Math.max(200, (this.chart?.widthPx ?? 800) * 2),
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
      ctx.live.on("steps", ({ runId: id, data }) => {
        if (id === runId) sync.onLive(data);
      }),
    );
    ctx.live.subscribe(runId);
    this.cleanups.push(() => ctx.live.unsubscribe(runId));
    // A (re)opened socket may have missed steps; so may a slow client told so by a notice.
    this.cleanups.push(ctx.live.on("open", () => sync.sync()));
    this.cleanups.push(ctx.live.on("notice", () => sync.sync()));
    sync.sync();

    this.cleanups.push(
      ctx.runs.subscribe((changed) => {
        const run = ctx.runs.get(runId);
        if (run && (changed === null || changed.id === runId)) this.showRun(run);
      }),
    );
    this.cleanups.push(every(5000, () => this.run && this.showRun(this.run)));
    void this.loadRun();
  }

  destroy(): void {
    if (this.destroyed) return;
    this.destroyed = true;
    this.abort.abort();
    for (const c of this.cleanups.splice(0)) c();
    this.sync?.stop();
    this.chart?.destroy();
  }

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

  private showNotFound(): void {
    this.sync?.stop();
    replaceChildren(
      this.el,
      h(
        "div",
        { class: "empty-state", attrs: { "data-testid": "run-not-found" } },
        h("h1", { text: "Run not found" }),
        h("p", { text: `There is no run #${this.runId} on this server.` }),
        h("p", null, h("a", { text: "Back to all runs", attrs: { href: RUNS_HREF } })),
      ),
    );
  }

  private showRun(run: Run): void {
    this.run = run;
    const now = this.ctx.now();
    document.title = `${run.name || `run ${run.id}`} · Stoker`;
    replaceChildren(
      this.headerBox,
      h(
        "div",
        { class: "title-row" },
        h("h1", { class: "run-name", text: run.name || `run ${run.id}`, attrs: { "data-testid": "run-name" } }),
        statusBadge(run.status),
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
    this.showFollow(this.following);
    this.chart?.setEmptyText(run.status === "running" ? "Waiting for the first steps…" : "No steps were recorded for this run.");
  }

  private showDetails(run: Run): void {
    const config = flattenEntries(run.config);
    const env = flattenEntries(run.environment);
    const key = JSON.stringify([config, env]);
    if (key === this.detailsKey) return;
    this.detailsKey = key;
    const table = (caption: string, rows: [string, string][], empty: string) =>
      h(
        "details",
        { class: "panel kv-panel", attrs: { open: true } },
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
      table("Config", config, "No config was recorded. Pass config={...} to StokerCallback."),
      table("Environment", env, "No environment was recorded."),
    );
  }

  private onSeries(series: StepSeries): void {
    this.chart?.setSeries(series);
    this.chartError.hidden = true;
    const total = this.sync?.total ?? null;
    const n = series.step.length;
    let text = `${formatCount(n)} points`;
    if (series.downsampled) text += ` (downsampled${total !== null ? ` from ${formatCount(total)} steps` : ""})`;
    setText(this.chartInfo, text);
  }

  private showChartError(message: string): void {
    this.chartError.textContent = message;
    this.chartError.hidden = false;
  }

  private showFollow(follow: boolean): void {
    this.following = follow;
    const live = this.run?.status === "running";
    this.followButton.classList.toggle("on", follow);
    setAttrs(this.followButton, {
      "aria-pressed": follow ? "true" : "false",
      title: follow
        ? live
          ? "Following live data. Drag on the chart to zoom; double-click to reset."
          : "Showing all steps. Drag on the chart to zoom; double-click to reset."
        : live
          ? "Zoomed: new steps keep arriving without moving the view. Click (or double-click the chart) to follow live again."
          : "Zoomed. Click (or double-click the chart) to show all steps.",
    });
    setText(this.followButton, follow ? (live ? "Live" : "All steps") : live ? "Resume live" : "Reset zoom");
  }
}
