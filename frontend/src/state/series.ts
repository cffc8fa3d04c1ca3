// Columnar step series held by the browser for one run, in milliseconds.
//
// The wire carries seconds (`dur`, `wait`); charts show milliseconds, so the
// conversion happens once, on the way in. Rows are kept in strictly increasing
// step order: anything at or below the last step already held is dropped,
// which is what makes the catch-up merge free of duplicates.

import type { StepColumns } from "../api/types";

export interface StepSeries {
  step: number[];
  /** Wall-clock start of each step, unix seconds. */
  t: (number | null)[];
  durMs: (number | null)[];
  waitMs: (number | null)[];
  /** Lower edge of the spike band; null until downsampled data is held. */
  minMs: (number | null)[] | null;
  /** Upper edge of the spike band; null until downsampled data is held. */
  maxMs: (number | null)[] | null;
  /** Whether any held point stands for a bucket of several steps. */
  downsampled: boolean;
  /** Whether any held point has a measured input wait. */
  hasWait: boolean;
}

/** Which optional columns a chart of this series needs. */
export interface SeriesShape {
  wait: boolean;
  band: boolean;
}

export function emptySeries(): StepSeries {
  return {
    step: [],
    t: [],
    durMs: [],
    waitMs: [],
    minMs: null,
    maxMs: null,
    downsampled: false,
    hasWait: false,
  };
}

function finite(v: unknown): number | null {
  return typeof v === "number" && Number.isFinite(v) ? v : null;
}

/** Seconds to milliseconds; anything that is not a finite number becomes null. */
export function secondsToMs(v: unknown): number | null {
  const s = finite(v);
  return s === null ? null : s * 1000;
}

export function lastStep(s: StepSeries): number | null {
  const n = s.step.length;
  return n === 0 ? null : s.step[n - 1]!;
}

export function seriesShape(s: StepSeries): SeriesShape {
  return { wait: s.hasWait, band: s.minMs !== null };
}

export function sameShape(a: SeriesShape, b: SeriesShape): boolean {
  return a.wait === b.wait && a.band === b.band;
}

/** Number of usable rows in a columnar chunk (the shortest required column). */
function rowCount(cols: StepColumns): number {
  const step = Array.isArray(cols.step) ? cols.step.length : 0;
  const dur = Array.isArray(cols.dur) ? cols.dur.length : 0;
  return Math.min(step, dur);
}

/** Row order of a chunk by step, skipping rows without a usable step index. */
function orderedRows(cols: StepColumns, n: number): number[] {
  const rows: number[] = [];
  let sorted = true;
  let prev = -Infinity;
  for (let i = 0; i < n; i++) {
    const st = finite(cols.step[i]);
    if (st === null) continue;
    if (st <= prev) sorted = false;
    prev = st;
    rows.push(i);
  }
  if (!sorted) rows.sort((a, b) => cols.step[a]! - cols.step[b]!);
  return rows;
}

/**
 * Append the rows of `cols` whose step is greater than the last step held,
 * in step order, converting seconds to milliseconds. Mutates `target`.
 * Returns the number of rows appended.
 */
export function appendNewer(target: StepSeries, cols: StepColumns): number {
  const n = rowCount(cols);
  if (n === 0) return 0;
  const rows = orderedRows(cols, n);
  const chunkBand = Array.isArray(cols.dur_min) && Array.isArray(cols.dur_max);

  if (chunkBand && target.minMs === null) {
    // First downsampled data: raw points held so far are their own min and max.
    target.minMs = target.durMs.slice();
    target.maxMs = target.durMs.slice();
  }

  let last = lastStep(target) ?? -Infinity;
  let added = 0;
  const waitCol = Array.isArray(cols.wait) ? cols.wait : null;
  const tCol = Array.isArray(cols.t) ? cols.t : null;
  for (const i of rows) {
    const st = cols.step[i]!;
    if (st <= last) continue;
    last = st;
    const dur = secondsToMs(cols.dur[i]);
    const wait = waitCol ? secondsToMs(waitCol[i]) : null;
    target.step.push(st);
    target.t.push(tCol ? finite(tCol[i]) : null);
    target.durMs.push(dur);
    target.waitMs.push(wait);
    if (wait !== null) target.hasWait = true;
    if (target.minMs !== null && target.maxMs !== null) {
      if (chunkBand) {
        target.minMs.push(secondsToMs(cols.dur_min![i]) ?? dur);
        target.maxMs.push(secondsToMs(cols.dur_max![i]) ?? dur);
      } else {
        target.minMs.push(dur);
        target.maxMs.push(dur);
      }
    }
    added++;
  }
  if (added > 0 && chunkBand) target.downsampled = true;
  return added;
}

/** A new series holding the rows of `cols` (seconds in, milliseconds held). */
export function seriesFromColumns(cols: StepColumns): StepSeries {
  const s = emptySeries();
  appendNewer(s, cols);
  return s;
}

function mean(values: (number | null)[], from: number, to: number): number | null {
  let sum = 0;
  let n = 0;
  for (let i = from; i < to; i++) {
    const v = values[i];
    if (v !== null && v !== undefined) {
      sum += v;
      n++;
    }
  }
  return n === 0 ? null : sum / n;
}

function extreme(
  values: (number | null)[],
  from: number,
  to: number,
  pick: (a: number, b: number) => number,
): number | null {
  let out: number | null = null;
  for (let i = from; i < to; i++) {
    const v = values[i];
    if (v !== null && v !== undefined) out = out === null ? v : pick(out, v);
  }
  return out;
}

/**
 * Shrink a long series for display: the oldest rows are folded into at most
 * `buckets` points (mean line, min/max band so that spikes stay visible), the
 * most recent `keepRecent` rows stay as they are, so the last step is kept
 * exactly and live appends continue from it. Returns a new series.
 */
export function compactSeries(s: StepSeries, buckets: number, keepRecent: number): StepSeries {
  const n = s.step.length;
  const head = Math.max(0, n - Math.max(0, keepRecent));
  if (buckets < 1 || head <= buckets) return s;
  const lows = s.minMs ?? s.durMs;
  const highs = s.maxMs ?? s.durMs;
  const out = emptySeries();
  out.minMs = [];
  out.maxMs = [];
  out.downsampled = true;
  const size = head / buckets;
  for (let b = 0; b < buckets; b++) {
    const from = Math.floor(b * size);
    const to = Math.min(head, Math.floor((b + 1) * size));
    if (to <= from) continue;
    const mid = from + Math.floor((to - from - 1) / 2);
    const wait = mean(s.waitMs, from, to);
    out.step.push(s.step[mid]!);
    out.t.push(s.t[mid] ?? null);
    out.durMs.push(mean(s.durMs, from, to));
    out.waitMs.push(wait);
    out.minMs.push(extreme(lows, from, to, Math.min));
    out.maxMs.push(extreme(highs, from, to, Math.max));
    if (wait !== null) out.hasWait = true;
  }
  for (let i = head; i < n; i++) {
    out.step.push(s.step[i]!);
    out.t.push(s.t[i] ?? null);
    out.durMs.push(s.durMs[i] ?? null);
    out.waitMs.push(s.waitMs[i] ?? null);
    out.minMs.push(lows[i] ?? null);
    out.maxMs.push(highs[i] ?? null);
    if (s.waitMs[i] != null) out.hasWait = true;
  }
  return out;
}

/**
 * Columns for uPlot, in the order the chart's series are built:
 * `[step, stepTime, inputWait?, min?, max?]`. The arrays are the series' own
 * (not copies): uPlot only reads them.
 */
export function chartColumns(s: StepSeries, shape: SeriesShape): (number | null)[][] {
  const cols: (number | null)[][] = [s.step, s.durMs];
  if (shape.wait) cols.push(s.waitMs);
  if (shape.band) {
    cols.push(s.minMs ?? s.durMs);
    cols.push(s.maxMs ?? s.durMs);
  }
  return cols;
}
