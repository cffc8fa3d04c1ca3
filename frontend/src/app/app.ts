// The application shell: top bar, connection status, hash router, and the
// runs store fed by REST and the live socket.

import { h, setAttrs, setText } from "./dom";
import type { ConnectionState } from "../api/liveClient";
import { ALERTS_HREF, COST_HREF, parseRoute, RUNS_HREF, TUNE_HREF, type Route } from "./router";
import { effectiveTheme, nextTheme, parseTheme, THEME_EVENT, THEME_KEY, type ThemeChoice } from "./theme";
import type { Alert } from "../api/types";
import { accessBadge, parseAccess } from "../state/access";
import { diskBanner, DISK_POLL_MS } from "../state/disk";
import { AlertsView } from "../views/alertsView";
import { errorMessage, type AppContext, type View } from "../views/common";
import { CompareView } from "../views/compareView";
import { CostView } from "../views/costView";
import { RunPageView } from "../views/runPage";
import { RunsListView } from "../views/runsList";
import { TuneListView, TuneView } from "../views/tuneView";
import { readStorage, writeStorage } from "./storage";

interface MountableView extends View {
  mounted?(): void;
}

export class App {
  private readonly ctx: AppContext;
  private readonly main: HTMLElement;
  private readonly statusEl: HTMLElement;
  private readonly statusText: HTMLElement;
  private readonly statusCountdown: HTMLElement;
  private view: MountableView | null = null;
  private statusTimer: ReturnType<typeof setInterval> | null = null;
  private loadingRuns: Promise<void> | null = null;
  private readonly alertsLink: HTMLAnchorElement;
  private readonly alertsCount: HTMLElement;
  private readonly themeButton: HTMLButtonElement;
  /** What the token in use may do; a reader may click it to enter the admin token. */
  private readonly accessButton: HTMLButtonElement;
  /** While the database's disk is full or nearly full. */
  private readonly diskBanner: HTMLElement;
  private theme: ThemeChoice = "auto";

  constructor(root: HTMLElement, ctx: AppContext) {
    this.ctx = ctx;
    this.statusText = h("span", { attrs: { role: "status", "aria-live": "polite" } });
    // The countdown changes every second: visible, but not announced.
    this.statusCountdown = h("span", { class: "countdown", attrs: { "aria-hidden": "true" } });
    this.statusEl = h(
      "span",
      { class: "conn", attrs: { "data-testid": "connection-status" } },
      h("span", { class: "conn-dot", attrs: { "aria-hidden": "true" } }),
      this.statusText,
      this.statusCountdown,
    );
    this.main = h("main", { class: "main", attrs: { id: "main", tabindex: "-1" } });
    this.alertsCount = h("span", { class: "nav-count", attrs: { "data-testid": "nav-alerts-count", hidden: true } });
    this.alertsLink = h("a", { attrs: { href: ALERTS_HREF, "data-testid": "nav-alerts" } }, "Alerts", this.alertsCount);
    this.accessButton = h("button", {
      class: "access",
      attrs: { type: "button", hidden: true, "data-testid": "access-badge" },
      on: { click: () => void this.askForAdmin() },
    });
    this.themeButton = h("button", {
      class: "theme-toggle",
      attrs: { type: "button", "data-testid": "theme-toggle" },
      on: { click: () => this.setTheme(nextTheme(this.theme), true) },
    });
    const header = h(
      "header",
      { class: "topbar" },
      h(
        "a",
        { class: "brand", attrs: { href: RUNS_HREF, "aria-label": "Stoker: all runs" } },
        h("span", { class: "brand-mark", attrs: { "aria-hidden": "true" } }),
        "Stoker",
      ),
      h(
        "nav",
        { class: "topnav", attrs: { "aria-label": "Main" } },
        h("a", { text: "Runs", attrs: { href: RUNS_HREF, "data-testid": "nav-runs" } }),
        this.alertsLink,
        h("a", { text: "Cost", attrs: { href: COST_HREF, "data-testid": "nav-cost", title: "GPU time lost to input starvation, per project and run" } }),
        h("a", { text: "Tune", attrs: { href: TUNE_HREF, "data-testid": "nav-tune", title: "stoker tune: advice measured on a script before it is edited" } }),
      ),
      h("div", { class: "spacer" }),
      this.accessButton,
      this.statusEl,
      this.themeButton,
    );
    this.diskBanner = h("div", { class: "disk-banner", attrs: { role: "alert", hidden: true, "data-testid": "disk-banner" } });
    root.replaceChildren(
      h("a", {
        class: "skip-link",
        text: "Skip to content",
        attrs: { href: "#main" },
        // Focus the content without touching the hash, which holds the route.
        on: {
          click: (ev) => {
            ev.preventDefault();
            this.main.focus();
          },
        },
      }),
      header,
      this.diskBanner,
      this.main,
    );
  }

  start(): void {
    const { live, runs, alerts } = this.ctx;
    this.setTheme(parseTheme(readStorage(THEME_KEY)), false);
    if (typeof matchMedia === "function") matchMedia("(prefers-color-scheme: dark)").addEventListener("change", () => this.setTheme(this.theme, false));
    live.on("run", (run) => runs.upsert(run));
    live.on("verdict", ({ runId, diagnosis }) => runs.setVerdict(runId, { verdict: diagnosis.verdict, label: diagnosis.verdict_label ?? "" }));
    live.on("deleted", ({ runId }) => runs.remove(runId));
    live.on("alert", (alert) => {
      if (alerts.upsert(alert)) this.notify(alert);
      if (alert.run_id == null) void this.loadDisk(); // a server (disk) alert changed
    });
    this.ctx.disk.subscribe(() => this.showDisk());
    this.ctx.access.subscribe(() => this.showAccess());
    setInterval(() => void this.loadDisk(), DISK_POLL_MS);
    alerts.subscribe(() => this.showAlertCount());
    live.on("open", ({ reconnect }) => {
      if (reconnect) void this.loadAlerts();
    });
    live.on("state", (state) => this.showConnection(state));
    live.on("open", ({ reconnect }) => {
      if (reconnect) void this.loadRuns();
    });
    live.on("notice", ({ message }) => {
      console.info("stoker: server notice:", message);
      void this.loadRuns();
    });
    window.addEventListener("hashchange", () => this.route());
    this.showConnection(live.state);
    this.route();
    live.start();
    void this.loadRuns();
    void this.loadAlerts();
    void this.loadDisk();
    void this.loadAccess();
  }

  /** Ask the server what the token in use may do (again after a token was entered). */
  async loadAccess(): Promise<void> {
    try {
      this.ctx.access.set(parseAccess(await this.ctx.api.getAccess()));
    } catch (err) {
      console.info("stoker: access unknown:", errorMessage(err));
    }
  }

  private showAccess(): void {
    const badge = accessBadge(this.ctx.access.current);
    this.accessButton.hidden = badge === null;
    if (badge === null) return;
    setText(this.accessButton, badge.text);
    this.accessButton.title = badge.title;
    this.accessButton.disabled = !badge.canAskForAdmin;
    setAttrs(this.accessButton, { "aria-label": `${badge.text}. ${badge.title}` });
  }

  private async askForAdmin(): Promise<void> {
    if (await this.ctx.api.askForAdminToken()) await this.loadAccess();
  }

  /** Read the disk figures; a failed read keeps the last ones (reads are retried at the next poll). */
  async loadDisk(): Promise<void> {
    try {
      this.ctx.disk.set(await this.ctx.api.getDisk());
    } catch (err) {
      console.info("stoker: disk figures unavailable:", errorMessage(err));
    }
  }

  private showDisk(): void {
    const banner = diskBanner(this.ctx.disk.current);
    this.diskBanner.hidden = banner === null;
    if (!banner) {
      this.diskBanner.replaceChildren();
      return;
    }
    setAttrs(this.diskBanner, { "data-level": banner.level });
    this.diskBanner.replaceChildren(h("strong", { text: banner.title }), " ", h("span", { text: banner.body }));
  }

  /** (Re)load recent alerts. */
  async loadAlerts(): Promise<void> {
    try {
      const page = await this.ctx.api.listAlerts({ limit: 200 });
      this.ctx.alerts.replaceAll(Array.isArray(page?.data) ? page.data : []);
    } catch (err) {
      this.ctx.alerts.setStatus("error", errorMessage(err));
    }
  }

  private showAlertCount(): void {
    const n = this.ctx.alerts.firingCount();
    setText(this.alertsCount, n > 0 ? String(n) : "");
    this.alertsCount.hidden = n === 0;
    setAttrs(this.alertsLink, { "aria-label": n > 0 ? `Alerts, ${n} firing` : "Alerts" });
  }

  /** A browser notification for an alert that started firing, when the user allowed them. */
  private notify(alert: Alert): void {
    if (typeof Notification === "undefined" || Notification.permission !== "granted") return;
    const runId = alert.run_id; // null: a server alert (disk)
    const run = runId == null ? undefined : this.ctx.runs.get(runId);
    try {
      const n = new Notification(`Stoker: ${alert.rule_name}`, {
        body: `${runId == null ? "server" : run ? run.name : `run #${runId}`}: ${alert.message}`,
        tag: `stoker-alert-${alert.id}`,
      });
      n.onclick = () => {
        window.focus();
        location.hash = runId == null ? "#/alerts" : `#/runs/${runId}`;
      };
    } catch {
      /* notifications unavailable (e.g. insecure context) */
    }
  }

  private setTheme(choice: ThemeChoice, persist: boolean): void {
    this.theme = choice;
    const dark = typeof matchMedia === "function" && matchMedia("(prefers-color-scheme: dark)").matches;
    const eff = effectiveTheme(choice, dark);
    document.documentElement.setAttribute("data-theme", eff);
    setText(this.themeButton, choice === "auto" ? `theme: auto (${eff})` : `theme: ${choice}`);
    setAttrs(this.themeButton, { "aria-label": `Color theme: ${choice}. Change theme`, "data-theme": eff });
    if (persist) {
      writeStorage(THEME_KEY, choice);
      window.dispatchEvent(new Event(THEME_EVENT));
    }
  }

  /** (Re)load the full runs list; overlapping calls share one request. */
  loadRuns(): Promise<void> {
    if (!this.loadingRuns) {
      this.loadingRuns = this.ctx.api
        .listRuns(undefined, { limit: RUNS_PAGE })
        .then((page) => this.ctx.runs.replaceAll(Array.isArray(page?.data) ? page.data : [], page?.count))
        .catch((err: unknown) => this.ctx.runs.setError(errorMessage(err)))
        .finally(() => {
          this.loadingRuns = null;
        });
    }
    return this.loadingRuns;
  }

  private route(): void {
    const route = parseRoute(location.hash);
    this.view?.destroy();
    this.view = this.createView(route);
    this.main.replaceChildren(this.view.el);
    this.view.mounted?.();
    setAttrs(this.main, { "data-route": route.name });
  }

  private createView(route: Route): MountableView {
    switch (route.name) {
      case "runs":
        document.title = "Runs · Stoker";
        return new RunsListView(this.ctx);
      case "run":
        document.title = `Run #${route.id} · Stoker`;
        return new RunPageView(this.ctx, route.id);
      case "compare":
        document.title = "Compare runs · Stoker";
        return new CompareView(this.ctx, route.ids);
      case "alerts":
        document.title = "Alerts · Stoker";
        return new AlertsView(this.ctx);
      case "cost":
        document.title = "Starvation cost · Stoker";
        return new CostView(this.ctx, route.since);
      case "tunes":
        document.title = "Tune · Stoker";
        return new TuneListView(this.ctx);
      case "tune":
        document.title = `Tune #${route.id} · Stoker`;
        return new TuneView(this.ctx, route.id);
      case "notFound": {
        document.title = "Not found · Stoker";
        const el = h(
          "section",
          { class: "page empty-state" },
          h("h1", { text: "Page not found" }),
          h("p", null, h("a", { text: "Go to all runs", attrs: { href: RUNS_HREF } })),
        );
        return { el, destroy() {} };
      }
    }
  }

  private showConnection(state: ConnectionState): void {
    if (this.statusTimer !== null) {
      clearInterval(this.statusTimer);
      this.statusTimer = null;
    }
    setAttrs(this.statusEl, { "data-state": state.kind });
    setText(this.statusCountdown, "");
    switch (state.kind) {
      case "open":
        setText(this.statusText, "live");
        this.statusEl.title = "Connected: updates arrive live";
        break;
      case "connecting":
        setText(this.statusText, "connecting…");
        this.statusEl.title = "Connecting to the live feed";
        break;
      case "stopped":
        setText(this.statusText, "offline");
        this.statusEl.title = "Not connected";
        break;
      case "waiting": {
        setText(this.statusText, "reconnecting");
        this.statusEl.title = "Live feed lost; reconnecting automatically";
        const tick = () => {
          const s = Math.max(0, Math.ceil((state.retryAt - Date.now()) / 1000));
          setText(this.statusCountdown, s > 0 ? ` in ${s}s` : "…");
        };
        tick();
        this.statusTimer = setInterval(tick, 1000);
        break;
      }
    }
  }
}

/** Runs fetched per request (the server's maximum page). */
export const RUNS_PAGE = 1000;
