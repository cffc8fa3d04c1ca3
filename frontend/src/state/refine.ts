// Zoom refinement: when the user zooms into a downsampled chart, fetch the
// visible range again at the chart's resolution and splice it into the
// overview, so the zoomed view shows real detail while the rest of the run
// stays downsampled. The detail is clipped to the range (its query rounds the
// bounds outwards to whole steps). Pure, unit-tested.

import type { StepSeries } from "./series";
import type { MetricTrack, SampleTrack, SamplesData } from "../api/types";

/** Index of the first x >= v in a sorted array. */
export function lowerBound(xs: ArrayLike<number>, v: number): number {
  let lo = 0;
  let hi = xs.length;
  while (lo < hi) {
    const mid = (lo + hi) >>> 1;
    if (xs[mid]! < v) lo = mid + 1;
    else hi = mid;
  }
  return lo;
}

/** Index just past the last x <= v in a sorted array. */
export function upperBound(xs: ArrayLike<number>, v: number): number {
  let lo = 0;
  let hi = xs.length;
  while (lo < hi) {
    const mid = (lo + hi) >>> 1;
    if (xs[mid]! <= v) lo = mid + 1;
    else hi = mid;
  }
  return lo;
}

/** Points of `xs` inside [lo, hi]. */
export function visibleCount(xs: ArrayLike<number>, lo: number, hi: number): number {
  return Math.max(0, upperBound(xs, hi) - lowerBound(xs, lo));
}

/**
 * Whether a zoom onto [lo, hi] deserves a re-fetch: the held data is
 * downsampled and shows fewer points there than half the chart's pixels.
 */
export function shouldRefine(xs: ArrayLike<number>, downsampled: boolean, lo: number, hi: number, widthPx: number): boolean {
  if (!downsampled || !(hi > lo)) return false;
  return visibleCount(xs, lo, hi) < Math.max(16, widthPx / 2);
}

/** Step query for a zoomed range (inclusive): `after_step` = lo-1, `before_step` = hi+1, one point per pixel. */
export function stepRangeQuery(lo: number, hi: number, widthPx: number): { afterStep: number; beforeStep: number; maxPoints: number } {
  return {
    afterStep: Math.floor(lo) - 1,
    beforeStep: Math.ceil(hi) + 1,
    maxPoints: Math.max(100, Math.round(widthPx)),
  };
}

function pick<T>(arr: T[] | null, idx: number[]): T[] | null {
  return arr ? idx.map((i) => arr[i]!) : null;
}

function rowsWhere(xs: number[], keep: (x: number) => boolean): number[] {
  const out: number[] = [];
  for (let i = 0; i < xs.length; i++) if (keep(xs[i]!)) out.push(i);
  return out;
}

/** Rows of a step series with lo <= step <= hi. */
export function clipSteps(s: StepSeries, lo: number, hi: number): StepSeries {
  const idx = rowsWhere(s.step, (x) => x >= lo && x <= hi);
  return {
    step: idx.map((i) => s.step[i]!),
    t: idx.map((i) => s.t[i] ?? null),
    durMs: idx.map((i) => s.durMs[i] ?? null),
    waitMs: idx.map((i) => s.waitMs[i] ?? null),
    minMs: pick(s.minMs, idx),
    maxMs: pick(s.maxMs, idx),
    downsampled: s.downsampled,
    hasWait: idx.some((i) => s.waitMs[i] != null),
  };
}

/**
 * The overview with [lo, hi] replaced by `detail` (clipped to the range).
 * The band columns survive: detail rows that are not buckets are their own min and max.
 */
export function spliceSteps(base: StepSeries, detail: StepSeries, lo: number, hi: number): StepSeries {
  const d = clipSteps(detail, lo, hi);
  const before = rowsWhere(base.step, (x) => x < lo);
  const after = rowsWhere(base.step, (x) => x > hi);
  const band = base.minMs !== null || d.minMs !== null;
  const out: StepSeries = {
    step: [],
    t: [],
    durMs: [],
    waitMs: [],
    minMs: band ? [] : null,
    maxMs: band ? [] : null,
    downsampled: base.downsampled || d.downsampled,
    hasWait: false,
  };
  const push = (s: StepSeries, i: number) => {
    out.step.push(s.step[i]!);
    out.t.push(s.t[i] ?? null);
    const dur = s.durMs[i] ?? null;
    out.durMs.push(dur);
    const w = s.waitMs[i] ?? null;
    out.waitMs.push(w);
    if (w !== null) out.hasWait = true;
    if (band) {
      out.minMs!.push(s.minMs?.[i] ?? dur);
      out.maxMs!.push(s.maxMs?.[i] ?? dur);
    }
  };
  for (const i of before) push(base, i);
  for (let i = 0; i < d.step.length; i++) push(d, i);
  for (const i of after) push(base, i);
  return out;
}

/** One track with [lo, hi] (in t) replaced by the matching detail rows. */
export function spliceTrack(base: SampleTrack, detail: SampleTrack, lo: number, hi: number): SampleTrack {
  const before = rowsWhere(base.t, (x) => x < lo);
  const inside = rowsWhere(detail.t, (x) => x >= lo && x <= hi);
  const after = rowsWhere(base.t, (x) => x > hi);
  const out: SampleTrack = { ...base, t: [], cols: {}, downsampled: base.downsampled };
  out.t = [...before.map((i) => base.t[i]!), ...inside.map((i) => detail.t[i]!), ...after.map((i) => base.t[i]!)];
  const keys = new Set([...Object.keys(base.cols), ...Object.keys(detail.cols)]);
  for (const k of keys) {
    const b = base.cols[k];
    const d = detail.cols[k];
    // A detail row without a band column is its own min/max.
    const dFallback = k.endsWith("_min") || k.endsWith("_max") ? detail.cols[k.slice(0, -4)] : undefined;
    out.cols[k] = [
      ...before.map((i) => b?.[i] ?? null),
      ...inside.map((i) => d?.[i] ?? dFallback?.[i] ?? null),
      ...after.map((i) => b?.[i] ?? null),
    ];
  }
  return out;
}

/** Splice every track of `detail` into the matching track of `base` (by rank and GPU). */
export function spliceSamples(base: SamplesData, detail: SamplesData, lo: number, hi: number): SamplesData {
  const key = (t: SampleTrack) => `${t.rank}:${t.gpu ?? "host"}`;
  const splice = (bs: SampleTrack[], ds: SampleTrack[]) => {
    const dm = new Map(ds.map((t) => [key(t), t]));
    return bs.map((b) => {
      const d = dm.get(key(b));
      return d ? spliceTrack(b, d, lo, hi) : b;
    });
  };
  return { device: splice(base.device, detail.device), host: splice(base.host, detail.host) };
}

/** Each metric track with [lo, hi] replaced by the detail track of the same name (clipped). */
export function spliceMetrics(base: MetricTrack[], detail: MetricTrack[], lo: number, hi: number): MetricTrack[] {
  const byName = new Map(detail.map((t) => [t.name, t]));
  return base.map((b) => {
    const d = byName.get(b.name);
    if (!d) return b;
    const before = rowsWhere(b.step, (x) => x < lo);
    const inside = rowsWhere(d.step, (x) => x >= lo && x <= hi);
    const after = rowsWhere(b.step, (x) => x > hi);
    const band = b.min !== null || d.min !== null;
    const col = (bs: (number | null)[] | null, ds: (number | null)[] | null, fallbackB: (number | null)[], fallbackD: (number | null)[]) => [
      ...before.map((i) => (bs ?? fallbackB)[i] ?? null),
      ...inside.map((i) => (ds ?? fallbackD)[i] ?? null),
      ...after.map((i) => (bs ?? fallbackB)[i] ?? null),
    ];
    return {
      ...b,
      step: [...before.map((i) => b.step[i]!), ...inside.map((i) => d.step[i]!), ...after.map((i) => b.step[i]!)],
      value: col(b.value, d.value, b.value, d.value),
      min: band ? col(b.min, d.min, b.value, d.value) : null,
      max: band ? col(b.max, d.max, b.value, d.value) : null,
    };
  });
}

/** Whether any metric track holds downsampled buckets (a min/max band). */
export function metricsDownsampled(tracks: MetricTrack[]): boolean {
  return tracks.some((t) => t.min !== null);
}
