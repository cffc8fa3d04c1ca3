// The application shell: top bar, connection status, hash router, and the
// runs store fed by REST and the live socket.

import { h, setAttrs, setText } from "./dom";
import type { ConnectionState } from "./liveClient";
import { parseRoute, RUNS_HREF, type Route } from "./router";
import { errorMessage, type AppContext, type View } from "./views/common";
import { RunPageView } from "./views/runPage";
import { RunsListView } from "./views/runsList";

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
    const header = h(
      "header",
      { class: "topbar" },
      h(
        "a",
        { class: "brand", attrs: { href: RUNS_HREF, "aria-label": "Stoker: all runs" } },
        h("span", { class: "brand-mark", attrs: { "aria-hidden": "true" } }),
        "Stoker",
      ),
      h("nav", { class: "topnav", attrs: { "aria-label": "Main" } }, h("a", { text: "Runs", attrs: { href: RUNS_HREF } })),
      h("div", { class: "spacer" }),
      this.statusEl,
    );
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
      this.main,
    );
  }

  start(): void {
    const { live, runs } = this.ctx;
    live.on("run", (run) => runs.upsert(run));
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
  }

  /** (Re)load the full runs list; overlapping calls share one request. */
  loadRuns(): Promise<void> {
    if (!this.loadingRuns) {
      this.loadingRuns = this.ctx.api
        .listRuns()
        .then((page) => this.ctx.runs.replaceAll(Array.isArray(page?.data) ? page.data : []))
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
