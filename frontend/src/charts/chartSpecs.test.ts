import { describe, expect, it } from "vitest";
import { BYTE_INCRS, TIME_INCRS } from "./axes";
import { lineChartOptions } from "./lineChartOptions";
import { LIGHT_PALETTE, SERIES_COLORS, withAlpha } from "./palette";
import { rangeFor } from "./scales";
import { isRatioMetric, metricsSpec, overlaySpec, telemetryChart, telemetrySpec, throughputSpec } from "./chartSpecs";
import { normalizeMetrics, normalizeSamples } from "../state/samples";
import { seriesFromColumns } from "../state/series";

const style = { palette: LIGHT_PALETTE, colors: SERIES_COLORS };
const size = { width: 600, height: 200 };

describe("lineChartOptions", () => {
  it("builds one uPlot series per line and one axis per visible scale", () => {
    const o = lineChartOptions({
      ...size,
      palette: LIGHT_PALETTE,
      time: true,
      xLabel: "time",
      axes: [
        { scale: "pct", label: "%", format: String, range: [0, 100] },
        { scale: "mhz", label: "MHz", format: String, hidden: true },
      ],
      lines: [
        { label: "a", scale: "pct", color: "#000000" },
        { label: "b", scale: "mhz", color: "#ffffff", dash: [2, 2] },
      ],
    });
    expect(o.series.map((s) => s.label)).toEqual(["time", "a", "b"]);
    expect(o.axes).toHaveLength(2);
    expect(o.scales?.x?.time).toBe(true);
    expect(o.series[2]!.dash).toEqual([2, 2]);
    // Ticks a second apart at the least: a run of 3 s reads ":39 :40 :41", not ":39.000 :39.500".
    expect(o.axes![0]!.incrs).toBe(TIME_INCRS);
    expect(Math.min(...TIME_INCRS)).toBe(1);
  });
  it("keeps a fixed range but widens it for outliers", () => {
    const r = rangeFor({ scale: "p", label: "", format: String, range: [0, 100] }) as (u: unknown, a: number, b: number) => [number, number];
    expect(r(null, 10, 50)).toEqual([0, 100]);
    expect(r(null, 10, 120)).toEqual([0, 120]);
  });
  it("derives translucent fills from hex colors", () => {
    expect(withAlpha("#ff0000", 0.5)).toBe("rgba(255,0,0,0.5)");
    expect(withAlpha("red", 0.5)).toBe("red");
  });
});

describe("chart specs", () => {
  it("throughput has a band only for downsampled steps", () => {
    const raw = seriesFromColumns({ step: [1, 2], t: [0, 1], dur: [0.1, 0.1], wait: [null, null] });
    const spec = throughputSpec();
    expect(spec.options({ series: raw, batchSize: null }, size, style).series).toHaveLength(2);
    expect(spec.columns({ series: raw, batchSize: 10 })).toEqual([[1, 2], [100, 100]]);
  });
  it("metrics put accuracy-like names on a second axis", () => {
    expect(isRatioMetric("val_accuracy")).toBe(true);
    expect(isRatioMetric("loss")).toBe(false);
    const tracks = normalizeMetrics({ series: [{ name: "accuracy", step: [1], value: [0.5] }, { name: "loss", step: [1, 2], value: [2, 1] }] });
    const o = metricsSpec().options(tracks, size, style);
    expect(o.series.map((s) => s.scale)).toEqual([undefined, "ratio", "value"]);
    expect(metricsSpec().columns(tracks)).toEqual([[1, 2], [0.5, null], [2, 1]]);
  });
  it("telemetry charts pick their fields and give each GPU one color", () => {
    const d = normalizeSamples(
      {
        series: [
          { gpu: 0, t: [1, 2], util: [10, 20], mem_used: [1, 2], mem_total: [8, 8], temp_c: [50, 51] },
          { gpu: 1, t: [1, 2], util: [30, 40] },
        ],
      },
      { series: [{ t: [1], proc_cpu: [100], rss: [1e9] }] },
    );
    expect(telemetryChart("gpu", d).series.map((s) => s.label)).toEqual(["GPU 0 util", "GPU 1 util"]);
    expect(telemetryChart("memory", d).series.map((s) => s.label)).toEqual(["GPU 0 used (NVML)", "GPU 0 total"]);
    expect(telemetryChart("host", d).series.map((s) => s.label)).toEqual(["process CPU", "process RSS"]);
    const o = telemetrySpec("gpu").options(d, size, style);
    expect(o.series.slice(1).map((s) => s.stroke)).toEqual([SERIES_COLORS[0], SERIES_COLORS[1]]);
    expect(telemetrySpec("thermal").shapeKey(d)).toBe("GPU 0 temp:0");
  });
  it("the compare overlay labels one line per run", () => {
    const a = seriesFromColumns({ step: [1], t: [0], dur: [0.1], wait: [null] });
    const o = overlaySpec().options({ series: [a, a], names: ["x", "y"], align: "elapsed", field: "durMs" }, size, style);
    expect(o.series.map((s) => s.label)).toEqual(["elapsed", "x", "y"]);
  });
});

describe("memory axes", () => {
  const d = normalizeSamples(
    { series: [{ gpu: 0, t: [1, 2], mem_used: [20 * 1024 ** 3, 21 * 1024 ** 3], mem_total: [40e9, 40e9] }] },
    { series: [{ t: [1], proc_cpu: [100], rss: [1e9] }] },
  );
  it("use binary increments and GiB labels on the GPU memory and host charts", () => {
    for (const kind of ["memory", "host"] as const) {
      const o = telemetrySpec(kind).options(d, size, style);
      const axis = o.axes!.find((a) => a.scale === "bytes")!;
      expect(axis.incrs).toBe(BYTE_INCRS);
      const values = axis.values as (u: unknown, splits: number[]) => string[];
      expect(values(null, [0, 16 * 1024 ** 3, 32 * 1024 ** 3])).toEqual(["0", "16 GiB", "32 GiB"]);
    }
  });
  it("other axes keep uPlot's default increments; the time axis, whole seconds", () => {
    const o = telemetrySpec("gpu").options(d, size, style);
    expect(o.axes![0]!.incrs).toBe(TIME_INCRS);
    expect(o.axes!.slice(1).every((a) => a.incrs === undefined)).toBe(true);
  });
});
