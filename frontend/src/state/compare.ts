// The compare view's pure parts: which runs, the diagnosis figures and the summary tables
// (the best value marked only where a metric has a direction: epoch metrics), the
// config/environment differences, and overlay alignment.

import { formatCount, formatDuration, formatInputWait, formatMs, formatPercentValue, formatRate, formatValue } from "../app/format";
import { formatLostPriced, LOST_TIME, LOST_TIME_MEANS, uiSettings } from "./cost";
import { energyCell, energyFigures, type RunEnergy } from "./energy";
import { formatBytes, joinTracks } from "./samples";
import type { StepSeries } from "./series";
import type { CompareRun, Verdict } from "../api/types";
import { verdictWords } from "./verdict";
import { MISSING, parseIso } from "../app/format";

/** `runs=1,2,3` from a hash query (`#/compare?runs=1,2`), deduplicated, positive ids only. */
export function parseRunIds(raw: string | null | undefined): number[] {
  if (!raw) return [];
  const out: number[] = [];
  for (const part of raw.split(",")) {
    const p = part.trim();
    if (!/^\d+$/.test(p)) continue;
    const id = Number(p);
    if (Number.isSafeInteger(id) && id > 0 && !out.includes(id)) out.push(id);
  }
  return out;
}

export function compareHref(ids: number[]): string {
  return `#/compare?runs=${ids.join(",")}`;
}

export type Better = "lower" | "higher";

export interface CompareMetric {
  key: string;
  label: string;
  /** Which way is better, for a metric with a direction (the server's: the user's or Keras's);
   * null for a figure without one, which is never starred. */
  better: Better | null;
  value: (r: CompareRun) => number | null;
  /** The cell's text (`r`: its run, for words that depend on it, such as GPU or device). */
  format: (v: number | null, r?: CompareRun) => string;
  /** The cell's tooltip, where its text needs one. */
  title?: (v: number | null, r: CompareRun) => string;
}

/** A run's whole-run verdict as a rank, for ordering its row's values. */
const LEVELS: Verdict[] = ["not_input_bound", "moderately_input_bound", "highly_input_bound"];

function n(v: unknown): number | null {
  return typeof v === "number" && Number.isFinite(v) ? v : null;
}

/** Run duration in seconds: the summary's when sent, else from the timestamps. */
export function compareDuration(r: CompareRun): number | null {
  const d = n(r.summary?.duration_s);
  if (d !== null) return d;
  const a = parseIso(r.started_at);
  const b = parseIso(r.ended_at ?? null);
  return a !== null && b !== null ? Math.max(0, (b - a) / 1000) : null;
}

export function energyMetrics(energies: ReadonlyMap<number, RunEnergy | null> = new Map()): CompareMetric[] {
  const split = (r?: CompareRun): RunEnergy | null => (r ? (energies.get(r.id) ?? null) : null);
  const starved = (r?: CompareRun) => energyFigures(split(r)).find((f) => f.key === "energy_starved");
  return [
    {
      key: "energy",
      label: "GPU energy",
      better: null,
      value: (r) => n(split(r)?.total_j) ?? n(r.summary?.energy_j),
      format: (v, r) => energyCell(v, split(r)).text,
      title: (v, r) => energyCell(v, split(r)).title,
    },
    {
      key: "energy_starved",
      label: "Burned while starved",
      better: null,
      value: (r) => n(split(r)?.starved_j),
      format: (v, r) => (v === null ? MISSING : (starved(r)?.value ?? MISSING)),
      title: (v, r) => (v === null ? "" : (starved(r)?.title ?? "")),
    },
  ];
}

/**
 * The diagnosis figures, first on the page: the verdict and input wait over the whole run,
 * the device time starvation lost, and the step time, each named as every other surface
 * names it. No star: none of them is a metric the user chose a direction for.
 */
export const DIAGNOSIS_METRICS: CompareMetric[] = [
  {
    key: "verdict",
    label: "Verdict · whole run",
    better: null,
    value: (r) => {
      const i = LEVELS.indexOf(r.summary?.verdict as Verdict);
      return i >= 0 ? i : null;
    },
    format: (v, r) => (v === null ? MISSING : verdictWords(r?.summary?.verdict_label)),
  },
  { key: "wait", label: "Input wait · whole run", better: null, value: (r) => n(r.summary?.input_wait_share), format: formatInputWait },
  {
    key: "lost_gpu",
    label: LOST_TIME,
    better: null,
    value: (r) => n(r.summary?.lost_gpu_s),
    format: (v) => formatLostPriced(v, uiSettings()),
    title: () => LOST_TIME_MEANS,
  },
  { key: "median", label: "Step time median", better: null, value: (r) => n(r.summary?.step_time_ms_median), format: formatMs },
  { key: "p95", label: "Step time p95", better: null, value: (r) => n(r.summary?.step_time_ms_p95), format: formatMs },
  { key: "steps", label: "Steps", better: null, value: (r) => n(r.summary?.steps), format: formatCount },
];

/** The rest of the summary, with the energy rows read from `energies` (see `energyMetrics`). */
export function compareMetrics(energies: ReadonlyMap<number, RunEnergy | null> = new Map()): CompareMetric[] {
  return [
    { key: "gpu", label: "GPU util (mean)", better: null, value: (r) => n(r.summary?.gpu_util_mean), format: formatPercentValue },
    { key: "sm_util", label: "SM active (mean, GPM)", better: null, value: (r) => n(r.summary?.sm_util_mean), format: formatPercentValue },
    { key: "tensor_util", label: "Tensor active (mean, GPM)", better: null, value: (r) => n(r.summary?.tensor_util_mean), format: formatPercentValue },
    ...energyMetrics(energies),
    { key: "memory", label: "Peak GPU memory", better: null, value: (r) => n(r.summary?.peak_memory_bytes), format: formatBytes },
    { key: "throughput", label: "Samples/s", better: null, value: (r) => n(r.summary?.samples_per_s), format: formatRate },
    { key: "duration", label: "Duration", better: null, value: compareDuration, format: formatDuration },
  ];
}

export const COMPARE_METRICS: CompareMetric[] = [...DIAGNOSIS_METRICS, ...compareMetrics()];

/**
 * Indices of the best values. Nothing is marked unless at least two runs have a value and
 * they do not all read the same (`texts`: the cells as shown, so that 16.0 GiB and 16.0 GiB
 * are never told apart, and 0.8301 beats 0.8318); ties for best, as shown, are all marked.
 */
export function bestIndices(values: (number | null)[], better: Better, texts: string[] = values.map(String)): Set<number> {
  const present = values.map((v, i) => [v, i] as const).filter((p): p is readonly [number, number] => p[0] !== null && Number.isFinite(p[0]));
  if (present.length < 2 || new Set(present.map((p) => texts[p[1]])).size < 2) return new Set();
  const nums = present.map((p) => p[0]);
  const best = better === "lower" ? Math.min(...nums) : Math.max(...nums);
  const bestText = texts[present.find((p) => p[0] === best)![1]];
  return new Set(present.filter((p) => texts[p[1]] === bestText).map((p) => p[1]));
}

export interface CompareRow {
  key: string;
  label: string;
  better: Better | null;
  cells: { text: string; best: boolean; value: number | null; title?: string }[];
}

export function compareRows(runs: CompareRun[], metrics: CompareMetric[] = COMPARE_METRICS): CompareRow[] {
  return metrics.map((m) => {
    const values = runs.map(m.value);
    const texts = values.map((v, i) => m.format(v, runs[i]));
    // A star only for a metric with a direction, and only between values that read
    // differently: never between two "0.1 %".
    const best = m.better === null ? new Set<number>() : bestIndices(values, m.better, texts);
    return {
      key: m.key,
      label: m.label,
      better: m.better,
      cells: values.map((v, i) => ({
        text: texts[i]!,
        best: best.has(i),
        value: v,
        ...(m.title ? { title: m.title(v, runs[i]!) } : {}),
      })),
    };
  });
}

export interface DiffRow {
  key: string;
  values: string[];
}

/** The server's `differences.config` (key → values per run) as rows, keys sorted. */
export function diffFromServer(diff: Record<string, unknown[]>, runCount: number): DiffRow[] {
  return Object.keys(diff)
    .sort()
    .map((key) => {
      const vals = Array.isArray(diff[key]) ? diff[key] : [];
      const values: string[] = [];
      for (let i = 0; i < runCount; i++) values.push(vals[i] === undefined ? "(absent)" : formatValue(vals[i]));
      return { key, values };
    });
}

export type Align = "step" | "elapsed";

/**
 * Overlay of several runs' step times on one x axis: by step index, or by
 * seconds since each run's first step. `[x, run1 ms, run2 ms, ...]`.
 */
export function overlayColumns(series: StepSeries[], align: Align, field: "durMs" | "waitMs" = "durMs"): (number | null)[][] {
  const parts = series.map((s) => {
    if (align === "step") return { x: s.step, ys: [s[field]] };
    const t0 = s.t.find((t) => t !== null) ?? null;
    const x: number[] = [];
    const y: (number | null)[] = [];
    for (let i = 0; i < s.step.length; i++) {
      const t = s.t[i];
      if (t === null || t === undefined || t0 === null) continue;
      x.push(t - t0);
      y.push(s[field][i] ?? null);
    }
    return { x, ys: [y] };
  });
  if (parts.length === 0) return [[]];
  return joinTracks(parts);
}
