// Epoch metrics (what Keras reports at the end of each epoch: loss, val_loss,
// val_accuracy, learning_rate…): parsing the API's epoch series, grouping them
// into charts (train against val by epoch), overlays of several runs, the best
// values of the summary, and the runs list's epoch-metric column. No DOM.

import type { CompareMetric } from "./compare";
import { MISSING } from "../app/format";
import { joinTracks } from "./samples";
import type { CompareRun, EpochMetricSummary, Run, RunSummary } from "../api/types";

/** One epoch metric of one run, in epoch order (`epoch` 0-based, as Keras counts). */
export interface EpochTrack {
  name: string;
  epoch: number[];
  /** The run's step count when each epoch ended. */
  step: number[];
  value: (number | null)[];
}

/** One line of an epoch chart. */
export interface EpochLine {
  label: string;
  epoch: number[];
  value: (number | null)[];
  /** Drawn dashed (validation and evaluation lines). */
  dashed?: boolean;
}

/** One chart: x = epoch, one line per series. */
export interface EpochChart {
  key: string;
  title: string;
  lines: EpochLine[];
}

function isObj(v: unknown): v is Record<string, unknown> {
  return typeof v === "object" && v !== null && !Array.isArray(v);
}

function num(v: unknown): number | null {
  return typeof v === "number" && Number.isFinite(v) ? v : null;
}

/** The epoch series (`axis: "epoch"`) of a `GET /runs/{id}/metrics` answer, by name. */
export function normalizeEpochMetrics(raw: unknown): EpochTrack[] {
  const list = isObj(raw) && Array.isArray(raw.series) ? raw.series : [];
  const out: EpochTrack[] = [];
  for (const item of list) {
    if (!isObj(item) || item.axis !== "epoch" || !Array.isArray(item.epoch)) continue;
    const epochs = item.epoch;
    const steps = Array.isArray(item.step) ? item.step : [];
    const values = Array.isArray(item.value) ? item.value : [];
    const rows: [number, number, number | null][] = [];
    for (let i = 0; i < epochs.length; i++) {
      const e = num(epochs[i]);
      if (e !== null) rows.push([e, num(steps[i]) ?? NaN, num(values[i])]);
    }
    rows.sort((a, b) => a[0] - b[0]);
    out.push({ name: String(item.name ?? "value"), epoch: rows.map((r) => r[0]), step: rows.map((r) => r[1]), value: rows.map((r) => r[2]) });
  }
  return out.sort((a, b) => a.name.localeCompare(b.name));
}

const PREFIXES = ["val_", "evaluate_"] as const;

/** The metric a name measures, without Keras's `val_` / `evaluate_` prefix: `val_loss` → `loss`. */
export function baseMetric(name: string): string {
  for (const p of PREFIXES) if (name.startsWith(p) && name.length > p.length) return name.slice(p.length);
  return name;
}

function prefixRank(name: string): number {
  if (name.startsWith("val_")) return 1;
  if (name.startsWith("evaluate_")) return 2;
  return 0;
}

/** Loss first, then the other metrics alphabetically; the learning rate last. */
function chartOrder(a: string, b: string): number {
  const rank = (k: string) => (k === "loss" ? 0 : /learning_rate|^lr$/.test(k) ? 2 : 1);
  return rank(a) - rank(b) || a.localeCompare(b);
}

/** A run's epoch charts: one per base metric, train against val (`loss` and `val_loss` together). */
export function runEpochCharts(tracks: EpochTrack[]): EpochChart[] {
  const groups = new Map<string, EpochTrack[]>();
  for (const t of tracks) {
    const key = baseMetric(t.name);
    const g = groups.get(key);
    if (g) g.push(t);
    else groups.set(key, [t]);
  }
  return [...groups.keys()].sort(chartOrder).map((key) => {
    const members = groups.get(key)!.slice().sort((a, b) => prefixRank(a.name) - prefixRank(b.name) || a.name.localeCompare(b.name));
    return {
      key,
      title: members.map((m) => m.name).join(" · "),
      lines: members.map((m) => ({ label: m.name, epoch: m.epoch, value: m.value, dashed: prefixRank(m.name) > 0 })),
    };
  });
}

/** One metric of several runs overlaid by epoch: one line per run (a run without it draws no line). */
export function overlayEpochChart(metric: string, runs: { label: string; track: EpochTrack | null }[]): EpochChart {
  return {
    key: metric,
    title: metric,
    lines: runs.map((r) => ({ label: r.label, epoch: r.track?.epoch ?? [], value: r.track?.value ?? [] })),
  };
}

/** uPlot columns of an epoch chart: `[epochs, line1, line2, …]`. */
export function epochColumns(chart: EpochChart): (number | null)[][] {
  if (chart.lines.length === 0) return [[]];
  return joinTracks(chart.lines.map((l) => ({ x: l.epoch, ys: [l.value] })));
}

export function epochPointCount(chart: EpochChart): number {
  return chart.lines.reduce((n, l) => n + l.value.filter((v) => v !== null).length, 0);
}

// ---- summaries ----

export type Goal = "min" | "max";

/** The goal the server chose, else the same rule: min for losses and errors, max otherwise. */
export function epochGoal(name: string, entry?: Partial<EpochMetricSummary> | null): Goal {
  if (entry?.goal === "min" || entry?.goal === "max") return entry.goal;
  return /loss|error/i.test(name) ? "min" : "max";
}

export function epochMetricsOf(summary: Partial<RunSummary> | null | undefined): Record<string, EpochMetricSummary> {
  const em = summary?.epoch_metrics;
  return isObj(em) ? (em as Record<string, EpochMetricSummary>) : {};
}

/** Every epoch metric of these runs' summaries: validation first (what runs are compared by), then the rest. */
export function epochMetricNames(summaries: (Partial<RunSummary> | null | undefined)[]): string[] {
  const names = new Set<string>();
  for (const s of summaries) for (const n of Object.keys(epochMetricsOf(s))) names.add(n);
  const group = (n: string) => (prefixRank(n) === 1 ? 0 : 1);
  return [...names].sort((a, b) => group(a) - group(b) || chartOrder(baseMetric(a), baseMetric(b)) || a.localeCompare(b));
}

/** The metric an overlay starts with: `val_loss`, else `loss`, else the first. */
export function defaultEpochMetric(names: string[]): string | null {
  for (const n of ["val_loss", "loss"]) if (names.includes(n)) return n;
  return names[0] ?? null;
}

/** A change signature of a run's epoch metrics (re-fetch the series when it changes). */
export function epochSignature(summary: Partial<RunSummary> | null | undefined): string {
  const em = epochMetricsOf(summary);
  return Object.keys(em)
    .sort()
    .map((n) => `${n}:${em[n]?.epochs ?? ""}:${em[n]?.last_epoch ?? ""}:${em[n]?.last ?? ""}`)
    .join("|");
}

/** Epoch metric values: 4 significant digits, small numbers in exponent form. */
export function formatEpochValue(v: number | null | undefined): string {
  if (typeof v !== "number" || !Number.isFinite(v)) return MISSING;
  if (v !== 0 && Math.abs(v) < 1e-3) return v.toExponential(2);
  return String(Number(v.toPrecision(4)));
}

/** Whether a metric has a direction (the server says: the user's choice or Keras's own);
 * a summary from before the server said so is taken to have one. */
export function epochDirected(entry: Partial<EpochMetricSummary> | null | undefined): boolean {
  return entry?.directed !== false;
}

/**
 * Rows for the compare table: the best value of each epoch metric with a direction, the best
 * run marked; the last value of one without (`learning_rate`), never marked.
 */
export function epochCompareMetrics(runs: CompareRun[]): CompareMetric[] {
  return epochMetricNames(runs.map((r) => r.summary)).map((name) => {
    const entry = runs.map((r) => epochMetricsOf(r.summary)[name]).find((e) => e) ?? null;
    if (!epochDirected(entry)) {
      return {
        key: `epoch:${name}`,
        label: `Last ${name}`,
        better: null,
        value: (r: CompareRun) => num(epochMetricsOf(r.summary)[name]?.last),
        format: formatEpochValue,
      };
    }
    const goal = epochGoal(name, entry);
    return {
      key: `epoch:${name}`,
      label: `Best ${name}`,
      better: goal === "min" ? "lower" : "higher",
      value: (r: CompareRun) => num(epochMetricsOf(r.summary)[name]?.best),
      format: formatEpochValue,
    };
  });
}

// ---- runs list ----

/** The best value of `metric` in a run's summary, or null. */
export function bestEpochValue(run: Run, metric: string): number | null {
  return num(epochMetricsOf(run.summary)[metric]?.best);
}

/** The runs-list cell of an epoch metric: its best value, and when and what it was last. */
export function epochCell(run: Run, metric: string): { text: string; title: string } {
  const e = epochMetricsOf(run.summary)[metric];
  if (!e) return { text: MISSING, title: `${metric} not recorded` };
  const goal = epochGoal(metric, e);
  if (!epochDirected(e)) {
    return { text: formatEpochValue(e.last), title: `last ${metric} ${formatEpochValue(e.last)} at epoch ${e.last_epoch ?? MISSING} (it has no better direction)` };
  }
  return {
    text: formatEpochValue(e.best),
    title: `best ${metric} (${goal === "min" ? "lowest" : "highest"}) ${formatEpochValue(e.best)} at epoch ${e.best_epoch ?? MISSING}; last ${formatEpochValue(e.last)} at epoch ${e.last_epoch ?? MISSING}`,
  };
}
