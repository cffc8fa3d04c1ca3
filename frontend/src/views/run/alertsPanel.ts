// The run page's alert history: this run's alerts (from the shared alerts
// store) and its events (verdict changes, alert transitions), loaded once and
// kept current by live `event` messages.

import { h, replaceChildren } from "../../app/dom";
import { formatRelativeTime, formatTimestamp } from "../../app/format";
import type { RunEvent } from "../../api/types";
import { alertList, profileLink, type AppContext } from "../common";

export class AlertsPanel {
  readonly el = h("div");
  private events: RunEvent[] = [];
  private eventsState: "loading" | "ok" | "error" = "loading";
  private readonly ctx: AppContext;
  private readonly runId: number;
  private readonly signal: AbortSignal;

  constructor(ctx: AppContext, runId: number, signal: AbortSignal) {
    this.ctx = ctx;
    this.runId = runId;
    this.signal = signal;
  }

  /** A live event; ignored when it is another run's; one already held is replaced (an alert's
   * firing event gains the profile its rule captured). */
  addLive(event: RunEvent): void {
    if (event.run_id !== this.runId) return;
    const held = this.events.findIndex((e) => e.id === event.id && event.id !== 0);
    if (held >= 0) this.events = this.events.map((e, i) => (i === held ? event : e));
    else this.events = [event, ...this.events].slice(0, 500);
    this.render();
  }

  async loadEvents(): Promise<void> {
    try {
      const page = await this.ctx.api.listRunEvents(this.runId, this.signal);
      if (this.signal.aborted) return;
      const known = new Set(this.events.map((e) => e.id));
      const fetched = Array.isArray(page?.data) ? page.data : [];
      this.events = [...this.events, ...fetched.filter((e) => !known.has(e.id))].sort((a, b) => (a.at < b.at ? 1 : a.at > b.at ? -1 : b.id - a.id));
      this.eventsState = "ok";
    } catch {
      if (this.signal.aborted) return;
      this.eventsState = "error";
    }
    this.render();
  }

  render(): void {
    const store = this.ctx.alerts;
    const alerts = store.forRun(this.runId);
    let body: Node;
    if (store.status === "loading") body = h("p", { class: "muted", text: "Loading alerts…" });
    else if (alerts.length === 0) body = h("p", { class: "muted", text: "No alerts for this run." });
    else body = alertList(alerts, this.ctx.now());
    replaceChildren(
      this.el,
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
        this.eventsState === "ok" && this.events.length > 0 ? this.eventList() : null,
      ),
    );
  }

  private eventList(): HTMLElement {
    const now = this.ctx.now();
    return h(
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
            h("span", { class: "alert-when muted", text: formatRelativeTime(e.at, now), attrs: { title: formatTimestamp(e.at) } }),
            h("span", { class: "event-kind", text: e.kind }),
            h(
              "span",
              { class: "event-message" },
              e.message,
              typeof e.data?.profile_id === "number" ? profileLink(this.runId, e.data.profile_id, "event-profile") : null,
            ),
          ),
        ),
      ),
    );
  }
}
