import { describe, expect, it } from "vitest";
import { metricsDownsampled, spliceMetrics } from "./refine";
import { normalizeMetrics } from "./samples";
import { clipSteps, lowerBound, shouldRefine, spliceSamples, spliceSteps, stepRangeQuery, upperBound, visibleCount } from "./refine";
import { normalizeSamples } from "./samples";
import { seriesFromColumns } from "./series";

const overview = () =>
  seriesFromColumns({
    step: [0, 100, 200, 300],
    t: [0, 1, 2, 3],
    dur: [0.01, 0.02, 0.03, 0.04],
    wait: [null, null, null, null],
    dur_min: [0.005, 0.01, 0.02, 0.03],
    dur_max: [0.02, 0.5, 0.04, 0.05],
  });

describe("bounds", () => {
  it("finds insertion points in sorted arrays", () => {
    expect(lowerBound([1, 2, 2, 3], 2)).toBe(1);
    expect(upperBound([1, 2, 2, 3], 2)).toBe(3);
    expect(visibleCount([1, 2, 3, 4, 5], 2, 4)).toBe(3);
  });
});

describe("shouldRefine", () => {
  it("refines a downsampled series that shows few points in the zoom", () => {
    expect(shouldRefine([0, 100, 200, 300], true, 90, 210, 800)).toBe(true);
  });
  it("does not refine raw data or an empty range", () => {
    expect(shouldRefine([0, 100, 200], false, 90, 210, 800)).toBe(false);
    expect(shouldRefine([0, 100, 200], true, 5, 5, 800)).toBe(false);
  });
});

describe("stepRangeQuery", () => {
  it("asks for the inclusive range at one point per pixel", () => {
    expect(stepRangeQuery(100.4, 199.6, 500)).toEqual({ afterStep: 99, beforeStep: 201, maxPoints: 500 });
  });
});

describe("spliceSteps", () => {
  it("replaces the zoomed range with detail rows and keeps the band", () => {
    const detail = seriesFromColumns({ step: [99, 150, 151, 201, 250], t: [0, 1, 1, 2, 2], dur: [1, 0.1, 0.2, 1, 1], wait: [null, 0.05, null, null, null] });
    const s = spliceSteps(overview(), detail, 100, 200);
    // overview rows 0 and 300, detail rows 150 and 151 (clipped: 99, 201, 250 are outside)
    expect(s.step).toEqual([0, 150, 151, 300]);
    expect(s.durMs).toEqual([10, 100, 200, 40]);
    expect(s.minMs).toEqual([5, 100, 200, 30]);
    expect(s.maxMs).toEqual([20, 100, 200, 50]);
    expect(s.hasWait).toBe(true);
    expect(s.downsampled).toBe(true);
  });
  it("clips a server answer that ignored the range", () => {
    const c = clipSteps(overview(), 100, 200);
    expect(c.step).toEqual([100, 200]);
    expect(c.maxMs).toEqual([500, 40]);
  });
});

describe("spliceSamples", () => {
  it("splices matching tracks and fills band columns of raw detail rows from the value", () => {
    const base = normalizeSamples({ series: [{ gpu: 0, t: [0, 10, 20], util: [1, 2, 3], util_min: [0, 0, 0], util_max: [5, 5, 5] }] }, null);
    const detail = normalizeSamples({ series: [{ gpu: 0, t: [9, 11, 12, 21], util: [7, 8, 9, 10] }] }, null);
    const out = spliceSamples(base, detail, 10, 20);
    expect(out.device[0]!.t).toEqual([0, 11, 12]);
    expect(out.device[0]!.cols.util).toEqual([1, 8, 9]);
    expect(out.device[0]!.cols.util_max).toEqual([5, 8, 9]);
  });
});

describe("spliceMetrics", () => {
  it("splices each named track and keeps bands for raw detail rows", () => {
    const base = normalizeMetrics({ series: [{ name: "loss", step: [0, 100, 200], value: [3, 2, 1], value_min: [2.5, 1.5, 0.5], value_max: [3.5, 2.5, 1.5] }] });
    const detail = normalizeMetrics({ series: [{ name: "loss", step: [90, 101, 102, 250], value: [9, 2.1, 2.0, 9] }, { name: "acc", step: [101], value: [0.5] }] });
    expect(metricsDownsampled(base)).toBe(true);
    const [loss] = spliceMetrics(base, detail, 100, 200);
    expect(loss!.step).toEqual([0, 101, 102]);
    expect(loss!.value).toEqual([3, 2.1, 2.0]);
    expect(loss!.max).toEqual([3.5, 2.1, 2.0]);
  });
});
