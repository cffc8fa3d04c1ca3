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
};

/** Integer-friendly tick increments for step indices. */
export const STEP_INCRS: number[] = (() => {
  const out: number[] = [];
  for (let e = 0; e <= 10; e++) for (const m of [1, 2, 5]) out.push(m * 10 ** e);
  return out;
})();

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
      ms: { auto: true, range: durationRange },
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
};

/** A palette from CSS custom properties, with `fallback` for any left unset. */
export function paletteFromVars(get: (name: string) => string, fallback: ChartPalette = LIGHT_PALETTE): ChartPalette {
  const out = { ...fallback };
  for (const key of Object.keys(PALETTE_VARS) as (keyof ChartPalette)[]) {
    const v = get(PALETTE_VARS[key]).trim();
    if (v) out[key] = v;
  }
  return out;
}
