// Chart scales: the y ranges (from zero, outlier-aware, fixed) and the x range helpers.

import type uPlot from "uplot";
import type { AxisSpec } from "./axes";

/**
 * X range of a chart over whole units (epochs): one x value alone (a run of one
 * epoch) sits in the middle of a span of one unit, so its single tick reads its
 * own number, where uPlot would spread it over 0..100. Other ranges pass through.
 */
export function singleXRange(u: { data?: ArrayLike<ArrayLike<number | null | undefined>> }, min: number | null, max: number | null): [number | null, number | null] {
  const xs = u.data?.[0];
  const n = xs?.length ?? 0;
  const first = n > 0 ? xs![0] : null;
  const last = n > 0 ? xs![n - 1] : null;
  if (typeof first === "number" && first === last) return [first - 0.5, first + 0.5];
  return [min, max];
}

/**
 * A y maximum that ignores rare outliers (the first, compiling step; a
 * checkpoint save): 1.25 × the 98th percentile of the values when the largest value
 * is more than `factor` times the 98th percentile, else the largest value. Null when there
 * is nothing to go by.
 */
export function robustMax(values: ArrayLike<number | null | undefined>, from = 0, to = values.length - 1, factor = 3): number | null {
  const vs: number[] = [];
  for (let i = Math.max(0, from); i <= Math.min(values.length - 1, to); i++) {
    const v = values[i];
    if (typeof v === "number" && Number.isFinite(v)) vs.push(v);
  }
  if (vs.length === 0) return null;
  let max = -Infinity;
  for (const v of vs) if (v > max) max = v;
  if (vs.length < 20) return max;
  vs.sort((a, b) => a - b);
  const q = vs[Math.floor((vs.length - 1) * 0.98)]!;
  return max > factor * q && q > 0 ? q * 1.25 : max;
}

/** Range function for a zero-based scale whose top ignores outliers of series `seriesIdx`. */
export function outlierAwareRange(seriesIdxs: number[]): uPlot.Scale.Range {
  return (u, min, max) => {
    const anyU = u as unknown as { data?: ArrayLike<number | null>[]; series?: { idxs?: [number, number] }[] };
    let top: number | null = null;
    for (const i of seriesIdxs) {
      const col = anyU.data?.[i];
      if (!col) continue;
      const idxs = anyU.series?.[i]?.idxs;
      const m = robustMax(col, idxs?.[0] ?? 0, idxs?.[1] ?? col.length - 1);
      if (m !== null && (top === null || m > top)) top = m;
    }
    return durationRange(u, min, top !== null && max !== null ? Math.min(max, top) : max);
  };
}

/** Y range for durations: anchored at zero, headroom above the largest value. */
export function durationRange(_u: unknown, min: number | null, max: number | null): [number, number] {
  const hi = max === null || !Number.isFinite(max) || max <= 0 ? 1 : max * 1.08;
  const lo = min === null || !Number.isFinite(min) ? 0 : Math.min(0, min);
  return [lo, hi];
}

/**
 * Whether an x scale shows all the data (so the chart is following live),
 * as opposed to a user zoom on part of it.
 */
export function isFullRange(
  scaleMin: number | null | undefined,
  scaleMax: number | null | undefined,
  firstX: number | null | undefined,
  lastX: number | null | undefined,
): boolean {
  if (scaleMin == null || scaleMax == null || firstX == null || lastX == null) return true;
  const eps = Math.max(1e-9, Math.abs(lastX - firstX) * 1e-6);
  return scaleMin <= firstX + eps && scaleMax >= lastX - eps;
}

/** Y range: from zero (or the fixed range), with headroom. */
export function rangeFor(axis: AxisSpec): uPlot.Scale.Range {
  if (axis.range) {
    const [lo, hi] = axis.range;
    return (_u, min, max) => [Math.min(lo, min ?? lo), Math.max(hi, max ?? hi)];
  }
  return (_u, min, max) => {
    const hi0 = max === null || !Number.isFinite(max) ? 1 : max;
    const lo0 = min === null || !Number.isFinite(min) ? 0 : min;
    if (axis.fromZero) return [Math.min(0, lo0), hi0 <= 0 ? 1 : hi0 * 1.08];
    const pad = (hi0 - lo0) * 0.08 || Math.abs(hi0) * 0.1 || 1;
    return [lo0 - pad, hi0 + pad];
  };
}
