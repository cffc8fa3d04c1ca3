import { describe, expect, it } from "vitest";
import {
  formatBytes,
  joinTracks,
  lastMetricStep,
  lastSampleTime,
  mergeMetrics,
  mergeSamples,
  normalizeMetrics,
  normalizeSamples,
  telemetryColumns,
  throttleNames,
  throttleRanges,
} from "./samples";

describe("normalizeSamples", () => {
  it("reads the device and host answers' tracks", () => {
    const d = normalizeSamples(
      { series: [{ rank: 0, gpu: 1, total: 2, downsampled: false, t: [2, 1], util: [20, 10] }, { rank: 0, gpu: 0, total: 1, downsampled: false, t: [1], util: [5] }] },
      { series: [{ rank: 0, total: 2, downsampled: false, t: [1, 2], proc_cpu: [50, "x"] }] },
    );
    expect(d.device.map((t) => t.gpu)).toEqual([0, 1]);
    // rows sorted by time, values kept with their rows
    expect(d.device[1]!.t).toEqual([1, 2]);
    expect(d.device[1]!.cols.util).toEqual([10, 20]);
    expect(d.device[1]!.total).toBe(2);
    expect(d.host[0]!.cols.proc_cpu).toEqual([50, null]);
    expect(d.host[0]!.gpu).toBeUndefined();
  });

  it("marks tracks with _min/_max columns as downsampled", () => {
    const d = normalizeSamples({ series: [{ gpu: 0, t: [1], util: [1], util_min: [0], util_max: [2] }] }, null);
    expect(d.device[0]!.downsampled).toBe(true);
  });

  it("returns empty data for a failed or malformed answer", () => {
    expect(normalizeSamples(null, null)).toEqual({ device: [], host: [] });
    expect(normalizeSamples({ series: [3, { t: "x" }] }, undefined)).toEqual({ device: [], host: [] });
  });
});

describe("normalizeMetrics", () => {
  it("reads per-name series", () => {
    const m = normalizeMetrics({ series: [{ name: "loss", step: [2, 1], value: [0.5, 1], value_min: [0.4, 1], value_max: [0.6, 1] }] });
    expect(m[0]).toEqual({ name: "loss", step: [1, 2], value: [1, 0.5], min: [1, 0.4], max: [1, 0.6] });
  });
  it("reads nothing from a failed or malformed answer", () => {
    expect(normalizeMetrics(null)).toEqual([]);
    expect(normalizeMetrics({ series: [{ name: "loss" }] })).toEqual([]);
  });
});

describe("mergeSamples", () => {
  it("appends only rows newer than the last held per track and adds new tracks", () => {
    const held = normalizeSamples({ series: [{ gpu: 0, t: [1, 2], util: [1, 2] }] }, null);
    const inc = normalizeSamples({ series: [{ gpu: 0, t: [2, 3], util: [99, 3] }, { gpu: 1, t: [3], util: [7] }] }, null);
    const { data, added } = mergeSamples(held, inc);
    expect(added).toBe(2);
    expect(data.device[0]!.t).toEqual([1, 2, 3]);
    expect(data.device[0]!.cols.util).toEqual([1, 2, 3]);
    expect(data.device[1]!.cols.util).toEqual([7]);
    expect(lastSampleTime(data)).toBe(3);
  });
  it("extends the band of a downsampled track with raw rows' own values", () => {
    const held = normalizeSamples({ series: [{ gpu: 0, t: [1], util: [5], util_min: [1], util_max: [9], downsampled: true }] }, null);
    const inc = normalizeSamples({ series: [{ gpu: 0, t: [2], util: [7] }] }, null);
    const { data } = mergeSamples(held, inc);
    expect(data.device[0]!.cols.util_min).toEqual([1, 7]);
    expect(data.device[0]!.cols.util_max).toEqual([9, 7]);
  });
  it("pads columns that only one side has", () => {
    const held = normalizeSamples({ series: [{ gpu: 0, t: [1], util: [1] }] }, null);
    const inc = normalizeSamples({ series: [{ gpu: 0, t: [2], temp_c: [60] }] }, null);
    const { data } = mergeSamples(held, inc);
    expect(data.device[0]!.cols.util).toEqual([1, null]);
    expect(data.device[0]!.cols.temp_c).toEqual([null, 60]);
  });
});

describe("mergeMetrics", () => {
  it("appends newer steps per name without duplicates", () => {
    const held = normalizeMetrics({ series: [{ name: "loss", step: [1, 2], value: [3, 2] }] });
    const inc = normalizeMetrics({ series: [{ name: "loss", step: [2, 3], value: [9, 1] }, { name: "acc", step: [3], value: [0.5] }] });
    const { tracks, added } = mergeMetrics(held, inc);
    expect(added).toBe(2);
    expect(tracks.map((t) => t.name)).toEqual(["acc", "loss"]);
    expect(tracks[1]!.value).toEqual([3, 2, 1]);
    expect(lastMetricStep(tracks)).toBe(3);
  });
});

describe("joinTracks", () => {
  it("aligns tracks on the union of x with nulls where a track has no row", () => {
    expect(joinTracks([{ x: [1, 3], ys: [[10, 30]] }, { x: [2, 3], ys: [[20, 31]] }])).toEqual([
      [1, 2, 3],
      [10, null, 30],
      [null, 20, 31],
    ]);
  });
  it("passes a single sorted track through", () => {
    expect(joinTracks([{ x: [1, 2], ys: [[5, 6]] }])).toEqual([[1, 2], [5, 6]]);
  });
});

describe("telemetryColumns", () => {
  it("keeps only fields with values and labels them per GPU", () => {
    const d = normalizeSamples({ series: [{ gpu: 0, t: [1], util: [50], mem_util: [null] }, { gpu: 1, t: [1], util: [60] }] }, null);
    const c = telemetryColumns(d.device, [
      { field: "util", unit: "%", name: "util" },
      { field: "mem_util", unit: "%", name: "mem" },
    ]);
    expect(c.series.map((s) => s.label)).toEqual(["GPU 0 util", "GPU 1 util"]);
    expect(c.data).toEqual([[1], [50], [60]]);
  });
  it("adds band columns after all lines for downsampled fields", () => {
    const d = normalizeSamples({ series: [{ gpu: 0, t: [1, 2], util: [5, 6], util_min: [1, 2], util_max: [9, 9], downsampled: true }] }, null);
    const c = telemetryColumns(d.device, [{ field: "util", unit: "%", name: "util", band: true }]);
    expect(c.series[0]!.band).toEqual([2, 3]);
    expect(c.data).toEqual([[1, 2], [5, 6], [9, 9], [1, 2]]);
  });
});

describe("throttle", () => {
  it("names the slowing reasons and ignores idle", () => {
    expect(throttleNames(0x1)).toEqual([]);
    expect(throttleNames(0x4 | 0x40)).toEqual(["power cap", "HW thermal"]);
  });
  it("merges consecutive throttled samples into ranges ending at the next sample", () => {
    const d = normalizeSamples({ series: [{ gpu: 0, t: [0, 1, 2, 3, 4], throttle: [0, 4, 4, 0, 32] }] }, null);
    expect(throttleRanges(d.device)).toEqual([
      { from: 1, to: 3, label: "GPU 0: power cap" },
      { from: 4, to: 4, label: "GPU 0: SW thermal" },
    ]);
  });
});

describe("formatBytes", () => {
  it("uses binary units", () => {
    expect(formatBytes(512 * 1024 ** 2)).toBe("512 MiB");
    expect(formatBytes(1.5 * 1024 ** 3)).toBe("1.50 GiB");
    expect(formatBytes(24 * 1024 ** 3)).toBe("24.0 GiB");
    expect(formatBytes(null)).toBe("—");
  });
});
