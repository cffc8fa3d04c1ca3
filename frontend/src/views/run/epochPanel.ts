// The run page's epoch metrics group: re-fetched (`axis=epoch`) whenever the
// run's summary says an epoch arrived; hidden while the run has none.

import type { ApiClient } from "../../api/client";
import { h, setAttrs } from "../../app/dom";
import { epochMetricsOf, epochSignature, formatEpochValue, runEpochCharts } from "../../state/epochs";
import type { Run } from "../../api/types";
import { EpochChartGrid } from "../epochCharts";

export class EpochPanel {
  readonly el: HTMLElement;
  private readonly grid = new EpochChartGrid({ testId: "epoch-chart" });
  private run: Run | null = null;
  private sig: string | null = null;
  private loading = false;
  private readonly api: ApiClient;
  private readonly runId: number;
  private readonly signal: AbortSignal;

  constructor(api: ApiClient, runId: number, signal: AbortSignal) {
    this.api = api;
    this.runId = runId;
    this.signal = signal;
    this.el = h(
      "div",
      { class: "chart-group", attrs: { "aria-label": "Epoch metrics", role: "region", "data-testid": "epoch-metrics", hidden: true } },
      h(
        "div",
        { class: "group-head" },
        h("h2", { class: "group-title", text: "Epoch metrics" }),
        h("span", { class: "muted small", text: "values at the end of each epoch (x: epoch, from 0); validation dashed" }),
      ),
      this.grid.el,
    );
  }

  /** The run changed: load the epochs when its summary's epoch metrics did. */
  update(run: Run): void {
    this.run = run;
    this.maybeLoad();
  }

  destroy(): void {
    this.grid.destroy();
  }

  private maybeLoad(): void {
    if (!this.run || this.signal.aborted || this.loading || !this.el.isConnected) return;
    const sig = epochSignature(this.run.summary);
    if (sig === this.sig) return;
    this.sig = sig;
    if (sig !== "") void this.load();
  }

  private async load(): Promise<void> {
    this.loading = true;
    try {
      const tracks = await this.api.getEpochMetrics(this.runId, [], this.signal);
      if (this.signal.aborted) return;
      const summary = epochMetricsOf(this.run?.summary);
      const charts = runEpochCharts(tracks);
      setAttrs(this.el, { hidden: charts.length === 0 ? true : null, "data-charts": charts.length });
      this.grid.update(charts, (c) =>
        c.lines
          .map((l) => summary[l.label])
          .map((e, i) => (e && e.best !== null ? `best ${c.lines[i]!.label} ${formatEpochValue(e.best)} @ ${e.best_epoch}` : ""))
          .filter(Boolean)
          .join(" · "),
      );
    } catch {
      if (this.signal.aborted) return;
      this.sig = null; // retried at the next run update
    } finally {
      this.loading = false;
    }
    this.maybeLoad(); // an epoch that arrived meanwhile
  }
}
