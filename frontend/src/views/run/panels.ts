// Building blocks of the run page's chart groups: a chart panel and the
// "Live / Resume live / Reset zoom" button of a group of synced charts.

import { h, setAttrs, setText } from "../../app/dom";

export interface ChartBox {
  section: HTMLElement;
  box: HTMLElement;
  info: HTMLElement;
}

export function chartPanel(title: string, id: string, testId: string, aria: string, tools: Node[] = []): ChartBox {
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

export function followButtonState(button: HTMLButtonElement, follow: boolean, live: boolean, what: string): void {
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

/** Calls `fn` once `ms` after the last `schedule()` (a zoom settles before refining). */
export class Debounce {
  private timer: ReturnType<typeof setTimeout> | null = null;
  private readonly ms: number;
  private readonly fn: () => void;

  constructor(ms: number, fn: () => void) {
    this.ms = ms;
    this.fn = fn;
  }

  schedule(): void {
    this.cancel();
    this.timer = setTimeout(() => {
      this.timer = null;
      this.fn();
    }, this.ms);
  }

  cancel(): void {
    if (this.timer !== null) clearTimeout(this.timer);
    this.timer = null;
  }
}
