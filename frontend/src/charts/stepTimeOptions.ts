// uPlot options of the step-time chart: step time, input wait, and the min/max band of
// downsampled buckets (pure, unit-tested).

import type uPlot from "uplot";
import { MISSING, formatCount, formatMs, formatMsTick } from "../app/format";
import type { SeriesShape } from "../state/series";
import { axisStyle, formatStepTick, STEP_INCRS } from "./axes";
import { seriesLayout } from "./lines";
import { withAlpha, type ChartPalette } from "./palette";
import { durationRange, outlierAwareRange } from "./scales";

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

  const axis = (extra: Partial<uPlot.Axis>): uPlot.Axis => axisStyle(p, extra);

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
