import { describe, expect, it } from "vitest";
import { batchSizeOf, throughputCaption, throughputColumns } from "./derive";
import { seriesFromColumns } from "./series";

const s = (dur: number[], wait: (number | null)[]) =>
  seriesFromColumns({ step: dur.map((_, i) => i * 10), t: dur.map((_, i) => i), dur, wait });

describe("throughput", () => {
  it("reads the batch size from the config", () => {
    expect(batchSizeOf({ batch_size: 256 })).toBe(256);
    expect(batchSizeOf({ batch_size: "64" })).toBe(64);
    expect(batchSizeOf({ batch_size: 0 })).toBeNull();
    expect(batchSizeOf(undefined)).toBeNull();
  });
  it("is samples/s with a batch size, steps/s without", () => {
    const series = s([0.1, 0.2], [null, null]);
    expect(throughputColumns(series, 32)).toEqual({ data: [[0, 10], [320, 160]], unit: "samples/s", band: false });
    expect(throughputColumns(series, null).unit).toBe("steps/s");
  });
  it("turns the step-time band into a rate band (slowest step = lowest rate)", () => {
    const ds = seriesFromColumns({ step: [0], t: [0], dur: [0.1], wait: [null], dur_min: [0.05], dur_max: [0.2] });
    const c = throughputColumns(ds, null);
    expect(c.band).toBe(true);
    expect(c.data).toEqual([[0], [10], [5], [20]]);
  });
});

import { rangesFromStarvation } from "./derive";

describe("rangesFromStarvation", () => {
  it("widens step ranges by half a step and keeps the wall-clock span", () => {
    const r = rangesFromStarvation({
      ranges: [
        { start: 5, end: 5, t_start: 100, t_end: 100.5, steps: 1, wait_share: 0.5 },
        { start: 10, end: 20, t_start: 110, t_end: 120, steps: 11, wait_share: null },
      ],
    });
    expect(r.steps).toEqual([
      { from: 4.5, to: 5.5, label: "starved: step 5 (50 % waiting)" },
      { from: 9.5, to: 20.5, label: "starved: steps 10–20" },
    ]);
    expect(r.time.map((t) => [t.from, t.to])).toEqual([
      [100, 100.5],
      [110, 120],
    ]);
    expect(rangesFromStarvation(null)).toEqual({ steps: [], time: [] });
  });
});

describe("throughputCaption", () => {
  it("says samples/s with the config's batch size", () => {
    const c = throughputCaption({ batch_size: 256 }, { samples_per_s: 6100 });
    expect(c.text).toBe("samples/s · batch size 256");
  });

  it("keeps steps/s without a batch size and quotes the summary's samples/s", () => {
    const c = throughputCaption({ lr: 0.1 }, { samples_per_s: 6100 });
    expect(c.text).toContain("steps/s");
    expect(c.text).toContain("6,100 samples/s");
    expect(c.text).toContain("no batch_size");
  });

  it("keeps steps/s when neither the config nor the summary knows samples", () => {
    for (const summary of [{ samples_per_s: null }, { samples_per_s: 0 }, {}, null, undefined]) {
      const c = throughputCaption({}, summary);
      expect(c.text).toBe("steps/s (no batch_size in config)");
      expect(c.text).not.toContain("samples/s");
    }
    expect(throughputCaption(null, { samples_per_s: Number.NaN }).text).toBe("steps/s (no batch_size in config)");
  });
});
