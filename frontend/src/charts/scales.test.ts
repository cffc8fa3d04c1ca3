import { describe, expect, it } from "vitest";
import { isFullRange, outlierAwareRange, robustMax } from "./scales";

describe("isFullRange", () => {
  it("is true when the scale covers all data (following live)", () => {
    expect(isFullRange(1, 100, 1, 100)).toBe(true);
    expect(isFullRange(0, 101, 1, 100)).toBe(true);
  });
  it("is false when the user zoomed into part of the data", () => {
    expect(isFullRange(10, 50, 1, 100)).toBe(false);
    expect(isFullRange(1, 99, 1, 100)).toBe(false);
  });
  it("treats missing scales or data as following", () => {
    expect(isFullRange(null, null, 1, 2)).toBe(true);
    expect(isFullRange(1, 2, null, null)).toBe(true);
  });
});

describe("robustMax", () => {
  it("ignores a lone huge value (the compiling first step)", () => {
    const vals = [1500, ...Array.from({ length: 99 }, (_, i) => 40 + (i % 5))];
    expect(robustMax(vals)).toBeCloseTo(44 * 1.25);
  });
  it("keeps the maximum when the data has no outliers or few points", () => {
    expect(robustMax(Array.from({ length: 50 }, (_, i) => i))).toBe(49);
    expect(robustMax([1, 100])).toBe(100);
    expect(robustMax([null, undefined])).toBeNull();
  });
  it("looks only at the visible index window", () => {
    const vals = [1000, ...Array.from({ length: 30 }, () => 10)];
    expect(robustMax(vals, 1, 30)).toBe(10);
  });
  it("caps the step-time range at the robust maximum", () => {
    const data = [Array.from({ length: 100 }, (_, i) => i), [2000, ...Array.from({ length: 99 }, () => 50)]];
    const range = outlierAwareRange([1]) as (u: unknown, min: number, max: number) => [number, number];
    const [lo, hi] = range({ data, series: [{}, { idxs: [0, 99] }] }, 50, 2000);
    expect(lo).toBe(0);
    expect(hi).toBeCloseTo(50 * 1.25 * 1.08);
  });
});
