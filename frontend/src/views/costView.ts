// `#/cost?since=YYYY-MM-DD` — device time lost to input starvation since a date
// (7 days ago by default), per project and per run, costliest first
// (`GET /starvation`), priced when the server sets a GPU-hour price.

import { defaultSince, formatLostHours, formatMoney, loadUiSettings, LOST_TIME, LOST_TIME_MEANS, starvationPath, type Price, type Starvation } from "../state/cost";
import { h, replaceChildren } from "../app/dom";
import { formatInputWait, formatTimestamp } from "../app/format";
import { RUNS_HREF, runHref } from "../app/router";
import { cannotLoad } from "./loading";
import { emptyNote, panel, statusBadge, type AppContext, type View } from "./common";

/** `YYYY-MM-DD` of a date (UTC), for the date input. */
function dayOf(date: Date): string {
  return date.toISOString().slice(0, 10);
}

export class CostView implements View {
  readonly el: HTMLElement;
  private readonly ctx: AppContext;
  private readonly abort = new AbortController();
  private readonly sinceInput: HTMLInputElement;
  private readonly body: HTMLElement;

  constructor(ctx: AppContext, since: string | null) {
    this.ctx = ctx;
    const start = since && !Number.isNaN(Date.parse(since)) ? since.slice(0, 10) : dayOf(defaultSince(ctx.now()));
    this.sinceInput = h("input", {
      attrs: { type: "date", value: start, "aria-label": "Runs active since", "data-testid": "cost-since" },
      on: { change: () => this.changeSince() },
    });
    this.body = h("div", { attrs: { "data-testid": "cost-body" } }, h("p", { class: "muted", text: "Loading…" }));
    this.el = h(
      "section",
      { class: "page cost-page", attrs: { "aria-labelledby": "cost-heading" } },
      h(
        "nav",
        { class: "breadcrumb", attrs: { "aria-label": "Breadcrumb" } },
        h("a", { text: "Runs", attrs: { href: RUNS_HREF } }),
        h("span", { class: "sep", text: "/", attrs: { "aria-hidden": "true" } }),
        h("span", { text: "Starvation cost", attrs: { "aria-current": "page" } }),
      ),
      h(
        "div",
        { class: "page-head" },
        h("h1", { text: "Starvation cost", attrs: { id: "cost-heading" } }),
        h("div", { class: "spacer" }),
        h("label", null, "runs active since ", this.sinceInput),
      ),
      h("p", {
        class: "muted",
        text: `${LOST_TIME_MEANS} A run counts with its whole cost when it was active on or after the date.`,
      }),
      this.body,
    );
    void this.load();
  }

  destroy(): void {
    this.abort.abort();
  }

  private changeSince(): void {
    const value = this.sinceInput.value;
    if (!value) return;
    history.replaceState(null, "", `#/cost?since=${value}`);
    void this.load();
  }

  private async load(): Promise<void> {
    const since = new Date(`${this.sinceInput.value}T00:00:00Z`);
    try {
      const [data, settings] = await Promise.all([
        this.ctx.api.getJson<Starvation>(starvationPath(since), this.abort.signal),
        loadUiSettings(this.ctx.api),
      ]);
      if (!this.abort.signal.aborted) this.render(data, settings);
    } catch (err) {
      if (!this.abort.signal.aborted) replaceChildren(this.body, h("p", { class: "error", text: cannotLoad("the starvation cost", err, false) }));
    }
  }

  private render(data: Starvation, settings: Price): void {
    const priced = settings.gpu_hour_price !== null;
    const money = (hours: number) => formatMoney(hours, settings) ?? "";
    const total = `${formatLostHours(data.lost_gpu_hours)} of device time lost${priced ? ` (${money(data.lost_gpu_hours)})` : ""} since ${formatTimestamp(data.since)}`;
    // The first `textColumns` columns hold text, the others numbers.
    const headRow = (textColumns: number, ...labels: string[]) =>
      h("tr", null, ...labels.map((l, i) => h("th", { class: i < textColumns ? "" : "num", text: l, attrs: { scope: "col" } })));
    const priceHead = priced ? [`Cost (${settings.currency}${settings.gpu_hour_price}/h)`] : [];
    const projects = h(
      "table",
      { class: "runs-table", attrs: { "data-testid": "cost-projects" } },
      h("thead", null, headRow(1, "Project", LOST_TIME, ...priceHead, "Runs")),
      h(
        "tbody",
        null,
        ...data.projects.map((p) =>
          h(
            "tr",
            { attrs: { "data-project": p.project } },
            h("td", { text: p.project }),
            h("td", { class: "num", text: formatLostHours(p.lost_gpu_hours), attrs: { "data-testid": "cost-lost" } }),
            priced ? h("td", { class: "num", text: money(p.lost_gpu_hours) }) : null,
            h("td", { class: "num", text: String(p.runs) }),
          ),
        ),
      ),
    );
    const runs = h(
      "table",
      { class: "runs-table", attrs: { "data-testid": "cost-runs" } },
      h("thead", null, headRow(3, "Run", "Project", "Status", LOST_TIME, "Input wait · whole run", ...priceHead)),
      h(
        "tbody",
        null,
        ...data.runs.map((r) =>
          h(
            "tr",
            { attrs: { "data-run-id": r.id } },
            h("td", null, h("a", { text: r.name || `run ${r.id}`, attrs: { href: runHref(r.id) } }), h("span", { class: "run-id", text: `#${r.id}` })),
            h("td", { text: r.project }),
            h("td", null, statusBadge(r.status)),
            h("td", { class: "num", text: formatLostHours(r.lost_gpu_hours), attrs: { "data-testid": "cost-lost" } }),
            h("td", { class: "num", text: formatInputWait(r.input_wait_share), attrs: { "data-testid": "cost-wait" } }),
            priced ? h("td", { class: "num", text: money(r.lost_gpu_hours) }) : null,
          ),
        ),
      ),
    );
    replaceChildren(
      this.body,
      h("p", { class: "cost-total", text: total, attrs: { "data-testid": "cost-total" } }),
      panel("Projects", "cost-projects-heading", data.projects.length ? [h("div", { class: "table-wrap" }, projects)] : [emptyNote("No run was active since then.")]),
      panel("Runs, costliest first", "cost-runs-heading", data.runs.length ? [h("div", { class: "table-wrap" }, runs)] : [emptyNote("No run was active since then.")]),
    );
  }
}
