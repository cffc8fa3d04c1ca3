// Pure uPlot option builders for Stoker's charts (no DOM, unit-tested).
//
// Column order of the step-time chart matches `chartColumns` in series.ts:
//   0 step index (x), 1 step time ms, [2 input wait ms], [min ms, max ms].

import type uPlot from "uplot";
import { MISSING, formatCount, formatMs, formatMsTick } from "./format";
import type { SeriesShape } from "./series";

/** Colors and font of a chart, read from the page's CSS custom properties. */
export interface ChartPalette {
  text: string;
  axis: string;
  grid: string;
  step: string;
  wait: string;
  band: string;
  bandEdge: string;
  font: string;
  /** Fill of shaded x ranges (starved stretches, throttling). */
  shade?: string;
}

export const LIGHT_PALETTE: ChartPalette = {
  text: "#3b4252",
  axis: "#c8ccd4",
  grid: "rgba(120,128,140,0.18)",
  step: "#2f6fde",
  wait: "#e8710a",
  band: "rgba(47,111,222,0.16)",
  bandEdge: "rgba(47,111,222,0.35)",
  font: '11px ui-monospace, "SF Mono", Menlo, Consolas, monospace',
  shade: "rgba(232,113,10,0.14)",
};

/** Series colors of multi-series charts (per GPU, per run), in order. */
export const SERIES_COLORS: string[] = [
  "#2f6fde",
  "#e8710a",
  "#1a9e55",
  "#c2185b",
  "#7b5cd6",
  "#00838f",
  "#9e7700",
  "#5d6b7e",
];

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

/** Step index tick label: 950, 12k, 1.2M. */
export function formatStepTick(v: number | null | undefined): string {
  if (typeof v !== "number" || !Number.isFinite(v)) return "";
  const a = Math.abs(v);
  const trim = (s: string) => (s.includes(".") ? s.replace(/\.?0+$/, "") : s);
  if (a >= 1e6) return `${trim((v / 1e6).toFixed(2))}M`;
  if (a >= 1e4) return `${trim((v / 1e3).toFixed(1))}k`;
  return String(Math.round(v));
}

/** Indices of the optional series for a shape (null when absent). */
export function seriesLayout(shape: SeriesShape): { wait: number | null; min: number | null; max: number | null; count: number } {
  let next = 2;
  const wait = shape.wait ? next++ : null;
  const min = shape.band ? next++ : null;
  const max = shape.band ? next++ : null;
  return { wait, min, max, count: next };
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

export interface StepTimeOptionsArgs {
  width: number;
  height: number;
  shape: SeriesShape;
  palette: ChartPalette;
  title?: string;
  /** Scale the y axis to the bulk of the data, not to rare outliers (default true). */
  clipOutliers?: boolean;
}

const msValue = (_u: uPlot, v: number | null) => (v == null ? MISSING : formatMs(v));

export function stepTimeOptions(args: StepTimeOptionsArgs): uPlot.Options {
  const { width, height, shape, palette: p } = args;
  const layout = seriesLayout(shape);

  const series: uPlot.Series[] = [
    { label: "step", value: (_u, v) => (v == null ? MISSING : formatCount(v)) },
    {
      label: shape.band ? "step time (mean)" : "step time",
      scale: "ms",
      stroke: p.step,
      width: 1.5,
      spanGaps: false,
      value: msValue,
    },
  ];
  if (layout.wait !== null) {
    series.push({
      label: "input wait",
      scale: "ms",
      stroke: p.wait,
      fill: withAlpha(p.wait, 0.18),
      width: 1.25,
      spanGaps: false,
      value: msValue,
    });
  }
  const bands: uPlot.Band[] = [];
  if (layout.min !== null && layout.max !== null) {
    series.push(
      { label: "step min", scale: "ms", stroke: p.bandEdge, width: 0.5, points: { show: false }, value: msValue },
      { label: "step max", scale: "ms", stroke: p.bandEdge, width: 0.5, points: { show: false }, value: msValue },
    );
    bands.push({ series: [layout.max, layout.min], fill: p.band });
  }

  const axis = (extra: Partial<uPlot.Axis>): uPlot.Axis => ({
    stroke: p.text,
    font: p.font,
    labelFont: p.font,
    grid: { stroke: p.grid, width: 1 },
    ticks: { stroke: p.axis, width: 1, size: 4 },
    ...extra,
  });

  const opts: uPlot.Options = {
    width: Math.max(1, Math.floor(width)),
    height: Math.max(1, Math.floor(height)),
    pxAlign: 0,
    scales: {
      x: { time: false },
      ms: { auto: true, range: args.clipOutliers === false ? durationRange : outlierAwareRange([1]) },
    },
    series,
    axes: [
      axis({
        label: "step",
        labelSize: 18,
        incrs: STEP_INCRS,
        values: (_u, splits) => splits.map(formatStepTick),
      }),
      axis({
        scale: "ms",
        label: "ms",
        labelSize: 18,
        size: 52,
        values: (_u, splits) => splits.map(formatMsTick),
      }),
    ],
    cursor: {
      drag: { x: true, y: false, setScale: true },
      focus: { prox: 24 },
    },
    focus: { alpha: 0.35 },
    legend: { live: true },
  };
  if (bands.length > 0) opts.bands = bands;
  if (args.title) opts.title = args.title;
  return opts;
}

/** CSS custom properties a chart palette is read from. */
export const PALETTE_VARS: Record<keyof ChartPalette, string> = {
  text: "--chart-text",
  axis: "--chart-axis",
  grid: "--chart-grid",
  step: "--chart-step",
  wait: "--chart-wait",
  band: "--chart-band",
  bandEdge: "--chart-band-edge",
  font: "--chart-font",
  shade: "--chart-shade",
};

/** Series colors from `--chart-series-1` .. `--chart-series-8`, falling back to SERIES_COLORS. */
export function seriesColorsFromVars(get: (name: string) => string): string[] {
  return SERIES_COLORS.map((c, i) => get(`--chart-series-${i + 1}`).trim() || c);
}

// ---- generic line charts (throughput, metrics, telemetry, compare overlays) ----

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

export interface LineSpec {
  label: string;
  scale: string;
  color: string;
  width?: number;
  dash?: number[];
  fill?: string;
  /** Legend value text. */
  format?: (v: number) => string;
  /** Draw across nulls (joined series of different clocks). */
  spanGaps?: boolean;
  show?: boolean;
  /** Mark each point (sparse series such as epochs). */
  points?: boolean;
}

export interface LineChartArgs {
  width: number;
  height: number;
  palette: ChartPalette;
  /** x is wall-clock unix seconds (true) or a number such as a step (false). */
  time: boolean;
  xLabel: string;
  xFormat?: (v: number) => string;
  /** Tick increments of a numeric x axis (default: STEP_INCRS for "step"). */
  xIncrs?: number[];
  /** Range of the x scale (default: the data's first to last x). */
  xRange?: uPlot.Scale.Range;
  axes: AxisSpec[];
  lines: LineSpec[];
  /** Pairs of series indices (1-based, as uPlot counts) drawn as a band: [upper, lower]. */
  bands?: { series: [number, number]; fill: string }[];
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

export function lineChartOptions(args: LineChartArgs): uPlot.Options {
  const { palette: p } = args;
  const axisBase = (extra: Partial<uPlot.Axis>): uPlot.Axis => ({
    stroke: p.text,
    font: p.font,
    labelFont: p.font,
    grid: { stroke: p.grid, width: 1 },
    ticks: { stroke: p.axis, width: 1, size: 4 },
    ...extra,
  });
  const scales: uPlot.Scales = { x: args.xRange ? { time: args.time, range: args.xRange } : { time: args.time } };
  const axes: uPlot.Axis[] = [
    axisBase(
      args.time
        ? { label: args.xLabel, labelSize: 18 }
        : {
            label: args.xLabel,
            labelSize: 18,
            ...(args.xIncrs ? { incrs: args.xIncrs } : args.xLabel === "step" ? { incrs: STEP_INCRS } : {}),
            values: (_u, splits) => splits.map(args.xFormat ?? formatStepTick),
          },
    ),
  ];
  let rightCount = 0;
  for (const a of args.axes) {
    scales[a.scale] = { auto: true, range: a.clipOutliersOf ? outlierAwareRange(a.clipOutliersOf) : rangeFor(a) };
    if (a.hidden) continue;
    const right = a.side === "right";
    axes.push(
      axisBase({
        scale: a.scale,
        label: a.label,
        labelSize: 18,
        size: a.size ?? 56,
        side: right ? 1 : 3,
        ...(right || rightCount > 0 ? { grid: { show: false } } : {}),
        ...(a.incrs ? { incrs: a.incrs } : {}),
        values: a.labels
          ? (_u, splits, _axis, _space, incr) => a.labels!(splits, incr)
          : (_u, splits) => splits.map((v) => (v == null ? "" : a.format(v))),
      }),
    );
    if (right) rightCount++;
  }
  const fmtOf = new Map(args.axes.map((a) => [a.scale, a.format]));
  const series: uPlot.Series[] = [
    {
      label: args.xLabel,
      value: args.time
        ? (_u, v) => (v == null ? MISSING : new Date(v * 1000).toLocaleTimeString())
        : (_u, v) => (v == null ? MISSING : (args.xFormat ?? formatCount)(v)),
    },
  ];
  for (const l of args.lines) {
    const fmt = l.format ?? fmtOf.get(l.scale) ?? ((v: number) => String(v));
    const s: uPlot.Series = {
      label: l.label,
      scale: l.scale,
      stroke: l.color,
      width: l.width ?? 1.5,
      spanGaps: l.spanGaps ?? false,
      points: l.points ? { show: true, size: 6 } : { show: false },
      value: (_u, v) => (v == null ? MISSING : fmt(v)),
    };
    if (l.dash) s.dash = l.dash;
    if (l.fill) s.fill = l.fill;
    if (l.show === false) s.show = false;
    series.push(s);
  }
  const opts: uPlot.Options = {
    width: Math.max(1, Math.floor(args.width)),
    height: Math.max(1, Math.floor(args.height)),
    pxAlign: 0,
    scales,
    series,
    axes,
    cursor: { drag: { x: true, y: false, setScale: true }, focus: { prox: 24 } },
    focus: { alpha: 0.35 },
    legend: { live: true },
  };
  if (args.bands && args.bands.length > 0) opts.bands = args.bands;
  return opts;
}

/** `rgba()` of a hex color at an alpha, for fills derived from a series color. */
export function withAlpha(color: string, alpha: number): string {
  const m = /^#([0-9a-f]{6})$/i.exec(color.trim());
  if (!m) return color;
  const v = parseInt(m[1]!, 16);
  return `rgba(${(v >> 16) & 255},${(v >> 8) & 255},${v & 255},${alpha})`;
}

/** A palette from CSS custom properties, with `fallback` for any left unset. */
export function paletteFromVars(get: (name: string) => string, fallback: ChartPalette = LIGHT_PALETTE): ChartPalette {
  const out = { ...fallback };
  for (const key of Object.keys(PALETTE_VARS) as (keyof ChartPalette)[]) {
    const v = get(PALETTE_VARS[key]).trim();
    if (v) out[key] = v;
  }
  return out;
}
