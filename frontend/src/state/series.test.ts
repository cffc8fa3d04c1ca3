import { describe, expect, it } from "vitest";
import {
  appendNewer,
  chartColumns,
  compactSeries,
  emptySeries,
  lastStep,
  secondsToMs,
  seriesFromColumns,
  seriesShape,
} from "./series";
import type { StepColumns } from "../api/types";

function cols(steps: number[], opts: { dur?: number; wait?: number | null } = {}): StepColumns {
  return {
    step: steps,
    t: steps.map((s) => 1_700_000_000 + s),
    dur: steps.map(() => opts.dur ?? 0.1),
    wait: steps.map(() => (opts.wait === undefined ? 0.01 : opts.wait)),
  };
}

describe("secondsToMs", () => {
  it("converts finite seconds to milliseconds", () => {
    expect(secondsToMs(0.25)).toBe(250);
    expect(secondsToMs(0)).toBe(0);
  });
  it("turns null, NaN and non-numbers into null", () => {
    expect(secondsToMs(null)).toBeNull();
    expect(secondsToMs(Number.NaN)).toBeNull();
    expect(secondsToMs("1")).toBeNull();
    expect(secondsToMs(undefined)).toBeNull();
  });
});

describe("appendNewer", () => {
  it("appends rows to an empty series converting seconds to ms", () => {
    const s = emptySeries();
    expect(appendNewer(s, cols([1, 2, 3], { dur: 0.2, wait: 0.05 }))).toBe(3);
    expect(s.step).toEqual([1, 2, 3]);
    expect(s.durMs).toEqual([200, 200, 200]);
    expect(s.waitMs).toEqual([50, 50, 50]);
    expect(s.hasWait).toBe(true);
    expect(lastStep(s)).toBe(3);
  });

  it("drops steps at or below the last held step, so overlaps never duplicate", () => {
    const s = seriesFromColumns(cols([1, 2, 3, 4, 5]));
    expect(appendNewer(s, cols([4, 5, 6, 7]))).toBe(2);
    expect(s.step).toEqual([1, 2, 3, 4, 5, 6, 7]);
  });

  it("ignores a chunk entirely older than what is held", () => {
    const s = seriesFromColumns(cols([10, 11]));
    expect(appendNewer(s, cols([1, 2, 3]))).toBe(0);
    expect(s.step).toEqual([10, 11]);
  });

  it("sorts an out-of-order chunk and drops duplicates inside it", () => {
    const s = emptySeries();
    appendNewer(s, cols([3, 1, 2, 2, 4]));
    expect(s.step).toEqual([1, 2, 3, 4]);
  });

  it("keeps null waits as gaps and reports no wait when none is measured", () => {
    const s = seriesFromColumns(cols([1, 2], { wait: null }));
    expect(s.waitMs).toEqual([null, null]);
    expect(s.hasWait).toBe(false);
    expect(seriesShape(s)).toEqual({ wait: false, band: false });
  });

  it("tolerates a chunk without wait or t columns", () => {
    const s = emptySeries();
    appendNewer(s, { step: [1, 2], dur: [0.1, 0.3] } as unknown as StepColumns);
    expect(s.durMs).toEqual([100, 300]);
    expect(s.waitMs).toEqual([null, null]);
    expect(s.t).toEqual([null, null]);
  });

  it("uses only rows present in both step and dur when lengths differ", () => {
    const s = emptySeries();
    appendNewer(s, { step: [1, 2, 3], t: [0, 0, 0], dur: [0.1, 0.2], wait: [] });
    expect(s.step).toEqual([1, 2]);
  });

  it("keeps the min/max band of downsampled data and extends it with raw points", () => {
    const s = emptySeries();
    appendNewer(s, { ...cols([10, 20]), dur: [0.1, 0.2], dur_min: [0.05, 0.1], dur_max: [0.5, 0.9] });
    expect(s.downsampled).toBe(true);
    expect(s.minMs).toEqual([50, 100]);
    expect(s.maxMs).toEqual([500, 900]);
    appendNewer(s, { ...cols([21]), dur: [0.3] });
    expect(s.minMs).toEqual([50, 100, 300]);
    expect(s.maxMs).toEqual([500, 900, 300]);
    expect(seriesShape(s).band).toBe(true);
  });

  it("back-fills the band for raw points held before downsampled data arrives", () => {
    const s = seriesFromColumns({ ...cols([1, 2]), dur: [0.1, 0.2] });
    appendNewer(s, { ...cols([100]), dur: [0.3], dur_min: [0.1], dur_max: [0.7] });
    expect(s.minMs).toEqual([100, 200, 100]);
    expect(s.maxMs).toEqual([100, 200, 700]);
  });
});

describe("chartColumns", () => {
  it("orders columns as step, step time, input wait, min, max", () => {
    const s = emptySeries();
    appendNewer(s, { ...cols([1]), dur: [0.1], wait: [0.02], dur_min: [0.05], dur_max: [0.2] });
    expect(chartColumns(s, seriesShape(s))).toEqual([[1], [100], [20], [50], [200]]);
  });
  it("leaves out optional columns the shape does not ask for", () => {
    const s = seriesFromColumns(cols([1, 2], { wait: null }));
    expect(chartColumns(s, seriesShape(s))).toHaveLength(2);
  });
});

describe("compactSeries", () => {
  it("folds old rows into buckets keeping the band and the recent rows exactly", () => {
    const steps = Array.from({ length: 1000 }, (_, i) => i + 1);
    const s = seriesFromColumns({
      step: steps,
      t: steps,
      dur: steps.map((i) => (i === 500 ? 5 : 0.1)),
      wait: steps.map(() => 0.01),
    });
    const c = compactSeries(s, 10, 100);
    expect(c.step.length).toBe(110);
    expect(lastStep(c)).toBe(1000);
    expect(c.step.slice(-100)).toEqual(steps.slice(-100));
    expect(c.downsampled).toBe(true);
    // The spike at step 500 survives in the band even though the mean hides it.
    expect(Math.max(...(c.maxMs as number[]))).toBe(5000);
    expect(c.minMs!.every((v) => v !== null && v >= 100 - 1e-9)).toBe(true);
    // Steps stay strictly increasing.
    for (let i = 1; i < c.step.length; i++) expect(c.step[i]!).toBeGreaterThan(c.step[i - 1]!);
  });

  it("returns the series unchanged when it is already small", () => {
    const s = seriesFromColumns(cols([1, 2, 3]));
    expect(compactSeries(s, 10, 1)).toBe(s);
  });
});
