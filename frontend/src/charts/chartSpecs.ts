// Chart specs (data → uPlot options and columns) for the run page's and the
// compare view's charts, built on the pure option builders in charts/.
// No DOM: unit-tested.

import type uPlot from "uplot";
import { BYTE_INCRS, DECIMAL_INCRS, STEP_INCRS, formatBytesTick, formatStepTick, tickLabels, type AxisSpec } from "./axes";
import { lineChartOptions } from "./lineChartOptions";
import type { LineSpec } from "./lines";
import { withAlpha } from "./palette";
import { singleXRange } from "./scales";
import { overlayColumns, type Align } from "../state/compare";
import { throughputColumns } from "../state/derive";
import { formatDuration, formatMs, formatMsTick, formatRate } from "../app/format";
import type { ChartSpec } from "./liveChart";
import { formatBytes, joinTracks, telemetryColumns, type TelemetryChart } from "../state/samples";
import type { StepSeries } from "../state/series";
import { epochColumns, formatEpochValue, type EpochChart } from "../state/epochs";
import type { MetricTrack, SamplesData } from "../api/types";

const pct = (v: number) => `${Math.round(v)}%`;

function compact(v: number): string {
  const a = Math.abs(v);
  if (a >= 1e6) return `${(v / 1e6).toFixed(1)}M`;
  if (a >= 1e4) return `${(v / 1e3).toFixed(0)}k`;
  if (a >= 1e3) return `${(v / 1e3).toFixed(1)}k`;
  if (a >= 10) return v.toFixed(0);
  if (a >= 1) return v.toFixed(1);
  return v.toPrecision(2);
}

// ---- step-indexed ----

export interface ThroughputData {
  series: StepSeries;
  batchSize: number | null;
}

export function throughputSpec(): ChartSpec<ThroughputData> {
  return {
    shapeKey: (d) => {
      const c = throughputColumns(d.series, d.batchSize);
      return `${c.unit}:${c.band}`;
    },
    columns: (d) => throughputColumns(d.series, d.batchSize).data as uPlot.AlignedData,
    options: (d, size, style) => {
      const c = throughputColumns(d.series, d.batchSize);
      const color = style.colors[2] ?? "#1a9e55";
      const lines: LineSpec[] = [{ label: c.band ? `${c.unit} (mean)` : c.unit, scale: "rate", color, format: formatRate }];
      if (c.band) {
        lines.push(
          { label: "slowest", scale: "rate", color: withAlpha(color, 0.35), width: 0.5, format: formatRate },
          { label: "fastest", scale: "rate", color: withAlpha(color, 0.35), width: 0.5, format: formatRate },
        );
      }
      return lineChartOptions({
        ...size,
        palette: style.palette,
        time: false,
        xLabel: "step",
        axes: [{ scale: "rate", label: c.unit, format: compact, fromZero: true }],
        lines,
        bands: c.band ? [{ series: [3, 2], fill: withAlpha(color, 0.15) }] : [],
      });
    },
  };
}

/** Metric names drawn on the right-hand 0..1 axis (accuracy-like). */
export function isRatioMetric(name: string): boolean {
  return /acc|auc|precision|recall|f1|iou/i.test(name);
}

/** A step metric's legend label: Keras's batch logs are running means over the epoch, and say so. */
export function metricLabel(t: MetricTrack): string {
  return t.aggregation === "running_mean_over_epoch" ? `${t.name} (running mean over the epoch)` : t.name;
}

export function metricsColumns(tracks: MetricTrack[]): (number | null)[][] {
  return joinTracks(tracks.map((t) => ({ x: t.step, ys: [t.value] })));
}

export function metricsSpec(): ChartSpec<MetricTrack[]> {
  return {
    shapeKey: (tracks) => tracks.map(metricLabel).join("|"),
    columns: (tracks) => metricsColumns(tracks) as uPlot.AlignedData,
    options: (tracks, size, style) => {
      const ratio = tracks.some((t) => isRatioMetric(t.name));
      const other = tracks.some((t) => !isRatioMetric(t.name));
      const axes: AxisSpec[] = [];
      if (other || !ratio) axes.push({ scale: "value", label: "value", format: compact });
      if (ratio) axes.push({ scale: "ratio", label: "ratio", format: (v) => v.toFixed(2), side: other ? "right" : "left" });
      return lineChartOptions({
        ...size,
        palette: style.palette,
        time: false,
        xLabel: "step",
        axes,
        lines: tracks.map((t, i) => ({
          label: metricLabel(t),
          scale: isRatioMetric(t.name) ? "ratio" : "value",
          color: style.colors[i % style.colors.length]!,
          spanGaps: true,
          format: (v: number) => v.toPrecision(4),
        })),
      });
    },
  };
}

// ---- epoch-indexed ----

/** An epoch chart: x = epoch (0-based, as Keras counts), one line per series, points marked. */
export function epochSpec(): ChartSpec<EpochChart> {
  return {
    shapeKey: (c) => c.lines.map((l) => `${l.label}:${l.dashed ? 1 : 0}`).join("|"),
    columns: (c) => epochColumns(c) as uPlot.AlignedData,
    options: (c, size, style) => {
      return lineChartOptions({
        ...size,
        palette: style.palette,
        time: false,
        xLabel: "epoch",
        xFormat: (v) => (Number.isInteger(v) ? String(v) : ""),
        xIncrs: STEP_INCRS, // whole epochs only
        xRange: singleXRange, // one epoch: a point at its epoch, not on 0..100
        // Labels as precise as the tick increment: close values (one epoch of several runs) never repeat a label.
        axes: [{ scale: "value", label: c.key, format: formatEpochValue, incrs: DECIMAL_INCRS, labels: tickLabels }],
        lines: c.lines.map((l, i) => {
          const line: LineSpec = {
            label: l.label,
            scale: "value",
            color: style.colors[i % style.colors.length]!,
            spanGaps: true,
            points: true,
            format: formatEpochValue,
          };
          if (l.dashed) line.dash = [6, 3];
          return line;
        }),
      });
    },
  };
}

// ---- wall clock ----

export type TelemetryKind = "gpu" | "memory" | "thermal" | "host";

interface FieldStyle {
  field: string;
  name: string;
  unit: string;
  scale: string;
  dash?: number[];
  width?: number;
  band?: boolean;
  alpha?: number;
}

export const TELEMETRY_FIELDS: Record<TelemetryKind, FieldStyle[]> = {
  gpu: [
    { field: "util", name: "util", unit: "%", scale: "pct", band: true },
    { field: "mem_util", name: "mem ctrl", unit: "%", scale: "pct", dash: [4, 3], width: 1 },
    // NVML GPM (Hopper and newer): what the SMs really did; absent on GPUs without GPM.
    { field: "sm_util", name: "SM active", unit: "%", scale: "pct", width: 2 },
    { field: "sm_occupancy", name: "SM occupancy", unit: "%", scale: "pct", dash: [2, 2], width: 1 },
    { field: "tensor_util", name: "tensor active", unit: "%", scale: "pct", dash: [6, 2], width: 1.5 },
    { field: "dram_bw_util", name: "DRAM bw", unit: "%", scale: "pct", dash: [1, 3], width: 1.5 },
  ],
  memory: [
    { field: "mem_used", name: "used (NVML)", unit: "B", scale: "bytes" },
    { field: "tf_mem_current", name: "TF current", unit: "B", scale: "bytes", dash: [5, 3] },
    { field: "tf_mem_peak", name: "TF peak", unit: "B", scale: "bytes", dash: [1, 3], width: 2 },
    { field: "mem_total", name: "total", unit: "B", scale: "bytes", width: 1, alpha: 0.45, dash: [8, 4] },
  ],
  thermal: [
    { field: "temp_c", name: "temp", unit: "°C", scale: "temp" },
    { field: "power_w", name: "power", unit: "W", scale: "power", dash: [5, 3] },
    { field: "power_limit_w", name: "power limit", unit: "W", scale: "power", width: 1, alpha: 0.45, dash: [8, 4] },
    { field: "sm_clock_mhz", name: "SM clock", unit: "MHz", scale: "mhz", dash: [1, 3], width: 1.5 },
  ],
  host: [
    { field: "proc_cpu", name: "process CPU", unit: "%", scale: "pct" },
    { field: "sys_cpu", name: "system CPU", unit: "%", scale: "pct", dash: [5, 3] },
    { field: "rss", name: "process RSS", unit: "B", scale: "bytes", width: 2 },
    { field: "mem_used", name: "host mem used", unit: "B", scale: "bytes", dash: [1, 3] },
    { field: "mem_total", name: "host mem total", unit: "B", scale: "bytes", width: 1, alpha: 0.45, dash: [8, 4] },
  ],
};

const AXES: Record<string, AxisSpec> = {
  pct: { scale: "pct", label: "%", format: pct, range: [0, 100] },
  // Binary increments: ticks at 16 GiB, 32 GiB…, not at decimal GB (18.6 GiB).
  bytes: { scale: "bytes", label: "memory", format: formatBytesTick, incrs: BYTE_INCRS, fromZero: true, size: 74 },
  temp: { scale: "temp", label: "°C", format: (v) => `${Math.round(v)}°` },
  power: { scale: "power", label: "W", format: (v) => `${Math.round(v)}W`, side: "right", fromZero: true },
  mhz: { scale: "mhz", label: "MHz", format: (v) => `${Math.round(v)}`, hidden: true },
};

function unitFormat(unit: string): (v: number) => string {
  switch (unit) {
    case "%":
      return (v) => `${v.toFixed(1)}%`;
    case "B":
      return formatBytes;
    case "°C":
      return (v) => `${v.toFixed(0)} °C`;
    case "W":
      return (v) => `${v.toFixed(0)} W`;
    case "MHz":
      return (v) => `${v.toFixed(0)} MHz`;
    default:
      return (v) => String(v);
  }
}

export function telemetryChart(kind: TelemetryKind, data: SamplesData): TelemetryChart {
  const tracks = kind === "host" ? data.host : data.device;
  return telemetryColumns(tracks, TELEMETRY_FIELDS[kind]);
}

export function telemetrySpec(kind: TelemetryKind): ChartSpec<SamplesData> {
  const fields = TELEMETRY_FIELDS[kind];
  return {
    shapeKey: (d) => telemetryChart(kind, d).series.map((s) => `${s.label}:${s.band ? 1 : 0}`).join("|"),
    columns: (d) => telemetryChart(kind, d).data as uPlot.AlignedData,
    options: (d, size, style) => {
      const chart = telemetryChart(kind, d);
      const used = new Set(chart.series.map((s) => fields.find((f) => f.field === s.field)!.scale));
      // Host memory goes on the right of host CPU.
      const axes = [...used].map((k) => (kind === "host" && k === "bytes" ? { ...AXES[k]!, side: "right" as const } : AXES[k]!));
      if (axes.length === 0) axes.push(AXES[fields[0]!.scale]!);
      const lines: LineSpec[] = [];
      const bands: { series: [number, number]; fill: string }[] = [];
      chart.series.forEach((s, i) => {
        const f = fields.find((x) => x.field === s.field)!;
        // Per device one color; on the host chart one color per field.
        const ci = kind === "host" ? i : s.track;
        const base = style.colors[ci % style.colors.length]!;
        const l: LineSpec = {
          label: s.label,
          scale: f.scale,
          color: f.alpha ? withAlpha(base, f.alpha) : base,
          width: f.width ?? 1.5,
          spanGaps: true,
          format: unitFormat(f.unit),
        };
        if (f.dash) l.dash = f.dash;
        lines.push(l);
      });
      chart.series.forEach((s) => {
        if (!s.band) return;
        const f = fields.find((x) => x.field === s.field)!;
        const base = style.colors[s.track % style.colors.length]!;
        for (const edge of ["max", "min"]) {
          lines.push({ label: `${s.label} ${edge}`, scale: f.scale, color: withAlpha(base, 0.3), width: 0.5, spanGaps: true, format: unitFormat(f.unit) });
        }
        bands.push({ series: s.band, fill: withAlpha(base, 0.14) });
      });
      return lineChartOptions({ ...size, palette: style.palette, time: true, xLabel: "time", axes, lines, bands });
    },
  };
}

// ---- compare overlay ----

export interface OverlayData {
  series: StepSeries[];
  names: string[];
  align: Align;
  field: "durMs" | "waitMs";
}

export function overlaySpec(): ChartSpec<OverlayData> {
  return {
    shapeKey: (d) => `${d.align}:${d.field}:${d.names.join("|")}`,
    columns: (d) => overlayColumns(d.series, d.align, d.field) as uPlot.AlignedData,
    options: (d, size, style) =>
      lineChartOptions({
        ...size,
        palette: style.palette,
        time: false,
        xLabel: d.align === "step" ? "step" : "elapsed",
        xFormat: d.align === "step" ? formatStepTick : (v) => formatDuration(v),
        axes: [{ scale: "ms", label: "ms", format: formatMsTick, fromZero: true, clipOutliersOf: d.names.map((_, i) => i + 1) }],
        lines: d.names.map((name, i) => ({
          label: name,
          scale: "ms",
          color: style.colors[i % style.colors.length]!,
          spanGaps: true,
          format: formatMs,
        })),
      }),
  };
}
