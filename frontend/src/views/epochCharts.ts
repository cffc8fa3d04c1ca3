// A grid of epoch charts (x = epoch), one panel per chart, kept in step with
// the charts handed to `update`: the run page's train-against-val charts and
// the compare view's overlays use it alike.

import { epochSpec } from "../charts/chartSpecs";
import { h, replaceChildren, setAttrs, setText } from "../app/dom";
import { epochPointCount, type EpochChart } from "../state/epochs";
import { LiveChart } from "../charts/liveChart";

interface Panel {
  section: HTMLElement;
  box: HTMLElement;
  info: HTMLElement;
  chart: LiveChart<EpochChart> | null;
}

export class EpochChartGrid {
  readonly el: HTMLElement;
  private readonly panels = new Map<string, Panel>();
  private readonly testId: string;
  private readonly height: number;

  constructor(opts: { testId: string; height?: number }) {
    this.testId = opts.testId;
    this.height = opts.height ?? 220;
    this.el = h("div", { class: "chart-grid epoch-grid", attrs: { "data-testid": `${opts.testId}-grid` } });
  }

  /** Draw these charts (in this order); panels of charts no longer given are removed. */
  update(charts: EpochChart[], info: (c: EpochChart) => string = () => ""): void {
    const keep = new Set(charts.map((c) => c.key));
    for (const [key, panel] of this.panels) {
      if (keep.has(key)) continue;
      panel.chart?.destroy();
      panel.section.remove();
      this.panels.delete(key);
    }
    const sections: HTMLElement[] = [];
    for (const c of charts) {
      let panel = this.panels.get(c.key);
      if (!panel) {
        const id = `${this.testId}-${this.panels.size}-heading`;
        const box = h("div", { attrs: { "data-testid": this.testId, "data-metric": c.key, role: "group", "aria-label": `${c.title} by epoch` } });
        const infoEl = h("span", { class: "chart-info muted" });
        const section = h("section", { class: "panel chart-panel" }, h("div", { class: "panel-head" }, h("h3", { text: c.title, attrs: { id } }), infoEl), box);
        setAttrs(section, { "aria-labelledby": id });
        panel = { section, box, info: infoEl, chart: null };
        this.panels.set(c.key, panel);
      }
      const heading = panel.section.querySelector("h3");
      if (heading) setText(heading, c.title);
      setText(panel.info, info(c));
      setAttrs(panel.box, { "data-lines": c.lines.filter((l) => l.value.length > 0).length, "data-epoch-points": epochPointCount(c) });
      sections.push(panel.section);
    }
    const current = [...this.el.children];
    if (current.length !== sections.length || sections.some((s, i) => current[i] !== s)) replaceChildren(this.el, ...sections);
    // Charts are created once their panel is in the document (they need its width).
    for (const c of charts) {
      const panel = this.panels.get(c.key)!;
      panel.chart ??= new LiveChart(panel.box, epochSpec(), { height: this.height, emptyText: "No epochs yet." });
      if (epochPointCount(c) > 0) panel.chart.setData(c);
    }
  }

  destroy(): void {
    for (const panel of this.panels.values()) panel.chart?.destroy();
    this.panels.clear();
  }
}
