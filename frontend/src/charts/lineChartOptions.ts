// uPlot options of the generic line charts (throughput, metrics, telemetry, compare
// overlays, epochs): axes, scales and series from their descriptions (pure, unit-tested).

import type uPlot from "uplot";
import { MISSING, formatCount } from "../app/format";
import { axisStyle, formatStepTick, STEP_INCRS, TIME_INCRS, type AxisSpec } from "./axes";
import type { LineSpec } from "./lines";
import type { ChartPalette } from "./palette";
import { outlierAwareRange, rangeFor } from "./scales";

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

export function lineChartOptions(args: LineChartArgs): uPlot.Options {
  const { palette: p } = args;
  const axisBase = (extra: Partial<uPlot.Axis>): uPlot.Axis => axisStyle(p, extra);
  const scales: uPlot.Scales = { x: args.xRange ? { time: args.time, range: args.xRange } : { time: args.time } };
  const axes: uPlot.Axis[] = [
    axisBase(
      args.time
        ? { label: args.xLabel, labelSize: 18, incrs: TIME_INCRS }
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
