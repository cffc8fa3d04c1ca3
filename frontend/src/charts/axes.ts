// Chart axes: tick increments, tick labels, an axis's description and its style.

import type uPlot from "uplot";
import type { ChartPalette } from "./palette";

/** Integer-friendly tick increments for step indices. */
export const STEP_INCRS: number[] = (() => {
  const out: number[] = [];
  for (let e = 0; e <= 10; e++) for (const m of [1, 2, 5]) out.push(m * 10 ** e);
  return out;
})();

/**
 * Tick increments for byte axes: powers of two (1 B … 256 MiB, 512 MiB, 1 GiB,
 * 2 GiB … 16 GiB, 32 GiB … 1 PiB). Memory is labelled in binary units, so
 * ticks must fall on binary values: decimal steps (10 GB = 9.31 GiB) would read
 * 18.6 GiB, 37.3 GiB.
 */
export const BYTE_INCRS: number[] = Array.from({ length: 51 }, (_, e) => 2 ** e);

/**
 * Tick increments of a wall-clock axis, in seconds: whole seconds and up. uPlot's own go down to
 * a millisecond, and over a run of a few seconds it wrote ticks such as ":58.000 :58.500".
 */
export const TIME_INCRS: number[] = [
  1, 2, 5, 10, 15, 30,
  60, 2 * 60, 5 * 60, 10 * 60, 15 * 60, 30 * 60,
  3600, 2 * 3600, 3 * 3600, 6 * 3600, 12 * 3600,
  86400, 2 * 86400, 3 * 86400, 7 * 86400, 14 * 86400, 30 * 86400, 91 * 86400, 182 * 86400, 365 * 86400,
];

const BYTE_UNITS = ["B", "KiB", "MiB", "GiB", "TiB", "PiB"];

/**
 * Byte tick label in binary units with at most two decimals and no trailing
 * zeros: 512 MiB, 1.5 GiB, 16 GiB.
 */
export function formatBytesTick(v: number | null | undefined): string {
  if (typeof v !== "number" || !Number.isFinite(v)) return "";
  if (v === 0) return "0";
  let k = 0;
  while (k < BYTE_UNITS.length - 1 && Math.abs(v) >= 1024 ** (k + 1)) k++;
  const n = v / 1024 ** k;
  const text = Number.isInteger(n) ? String(n) : n.toFixed(2).replace(/\.?0+$/, "");
  return `${text} ${BYTE_UNITS[k]}`;
}

/**
 * The increment uPlot picks from `incrs` for a numeric axis: the smallest one
 * whose ticks are at least `minSpacePx` apart over `dimPx` pixels for the range
 * `min..max` (the largest increment if none is wide enough).
 */
export function pickIncr(incrs: readonly number[], min: number, max: number, dimPx: number, minSpacePx: number): number {
  const span = max - min;
  if (!(span > 0) || !(dimPx > 0)) return incrs[0] ?? 1;
  const minIncr = (span / dimPx) * minSpacePx;
  for (const incr of incrs) if (incr >= minIncr) return incr;
  return incrs[incrs.length - 1] ?? 1;
}

/** Tick values (multiples of `incr`) in `min..max`. */
export function axisSplits(min: number, max: number, incr: number): number[] {
  const out: number[] = [];
  if (!(incr > 0)) return out;
  for (let v = Math.ceil(min / incr) * incr; v <= max + incr * 1e-9; v += incr) out.push(v);
  return out;
}

/** Decimal tick increments (1, 2, 5 × 10^k, 1e-12 … 5e12): each has as many decimals as its leading digit's place. */
export const DECIMAL_INCRS: number[] = (() => {
  const out: number[] = [];
  for (let e = -12; e <= 12; e++) for (const m of [1, 2, 5]) out.push(Number(`${m}e${e}`));
  return out;
})();

/** The decimals `incr` needs to be written exactly: 0.02 → 2, 0.025 → 3, 5 → 0. */
export function incrDecimals(incr: number): number {
  if (!(incr > 0) || !Number.isFinite(incr)) return 0;
  for (let d = 0; d < 16; d++) {
    const scaled = incr * 10 ** d;
    if (Math.round(scaled) >= 1 && Math.abs(scaled - Math.round(scaled)) < 1e-9 * scaled) return d;
  }
  return 16;
}

/**
 * Tick labels of a numeric y axis that never read alike: as many decimals as
 * the increment `incr` between ticks needs (0.8206, 0.8208, 0.821…), thousands
 * and millions as k / M when the increment allows, and small values (below
 * 0.001) in exponent form, as their legend values are.
 */
export function tickLabels(splits: readonly (number | null)[], incr: number): string[] {
  let top = 0;
  for (const v of splits) if (v != null && Number.isFinite(v)) top = Math.max(top, Math.abs(v));
  const fixed = (v: number, unit: number) => {
    const text = (v / unit).toFixed(incrDecimals(incr / unit));
    return /^-0(\.0*)?$/.test(text) ? text.slice(1) : text;
  };
  return splits.map((v) => {
    if (v == null || !Number.isFinite(v)) return "";
    if (top >= 1e6 && incr >= 1e5) return `${fixed(v, 1e6)}M`;
    if (top >= 1e4 && incr >= 1e3) return `${fixed(v, 1e3)}k`;
    if (top < 1e-3) {
      if (Math.abs(v) < incr * 1e-6) return "0";
      // Mantissa digits down to the increment's place: 1.2e-5 with increments of 1e-6.
      const digits = Math.max(0, incrDecimals(incr) + Math.floor(Math.log10(Math.abs(v))));
      return v.toExponential(Math.min(digits, 20));
    }
    return fixed(v, 1);
  });
}

/** Step index tick label: 950, 12k, 1.2M. */
export function formatStepTick(v: number | null | undefined): string {
  if (typeof v !== "number" || !Number.isFinite(v)) return "";
  const a = Math.abs(v);
  const trim = (s: string) => (s.includes(".") ? s.replace(/\.?0+$/, "") : s);
  if (a >= 1e6) return `${trim((v / 1e6).toFixed(2))}M`;
  if (a >= 1e4) return `${trim((v / 1e3).toFixed(1))}k`;
  return String(Math.round(v));
}

export interface AxisSpec {
  /** Scale key the series refer to. */
  scale: string;
  label: string;
  side?: "left" | "right";
  format: (v: number) => string;
  /** Anchor the range at zero (utilization, memory, durations). */
  fromZero?: boolean;
  /** Fixed range, e.g. [0, 100] for percentages. */
  range?: [number, number];
  /** Draw no axis (a scale shown only in the legend). */
  hidden?: boolean;
  /** Axis width in CSS pixels (room for the tick labels). */
  size?: number;
  /** Ignore rare outliers of these series (uPlot indices) when scaling. */
  clipOutliersOf?: number[];
  /** Tick increments uPlot chooses from (e.g. BYTE_INCRS for binary units). */
  incrs?: number[];
  /** Tick labels from the ticks and their increment (instead of `format` on each). */
  labels?: (splits: readonly (number | null)[], incr: number) => string[];
}

/** An axis drawn in the palette's text, font, grid and tick colors (both builders' axes). */
export function axisStyle(p: ChartPalette, extra: Partial<uPlot.Axis>): uPlot.Axis {
  return {
    stroke: p.text,
    font: p.font,
    labelFont: p.font,
    grid: { stroke: p.grid, width: 1 },
    ticks: { stroke: p.axis, width: 1, size: 4 },
    ...extra,
  };
}
