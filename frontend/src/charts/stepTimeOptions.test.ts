import { describe, expect, it } from "vitest";
import { LIGHT_PALETTE } from "./palette";
import { seriesLayout } from "./lines";
import { stepTimeOptions } from "./stepTimeOptions";
import { appendNewer, chartColumns, emptySeries, seriesShape } from "../state/series";

const base = { width: 800, height: 300, palette: LIGHT_PALETTE };

describe("stepTimeOptions", () => {
  it("builds a step-indexed chart of step time alone", () => {
    const o = stepTimeOptions({ ...base, shape: { wait: false, band: false } });
    expect(o.series.map((s) => s.label)).toEqual(["step", "step time"]);
    expect(o.scales?.x?.time).toBe(false);
    expect(o.bands).toBeUndefined();
    expect(o.width).toBe(800);
    expect(o.height).toBe(300);
  });

  it("adds input wait as a second series when measured", () => {
    const o = stepTimeOptions({ ...base, shape: { wait: true, band: false } });
    expect(o.series.map((s) => s.label)).toEqual(["step", "step time", "input wait"]);
    expect(o.series[2]!.stroke).toBe(LIGHT_PALETTE.wait);
  });

  it("draws the min/max of downsampled buckets as a band", () => {
    const o = stepTimeOptions({ ...base, shape: { wait: true, band: true } });
    expect(o.series).toHaveLength(5);
    expect(o.bands).toEqual([{ series: [4, 3], fill: LIGHT_PALETTE.band }]);
  });

  it("has one series per data column for every shape", () => {
    for (const wait of [false, true]) {
      for (const band of [false, true]) {
        const s = emptySeries();
        appendNewer(s, {
          step: [1],
          t: [0],
          dur: [0.1],
          wait: [wait ? 0.01 : null],
          ...(band ? { dur_min: [0.05], dur_max: [0.2] } : {}),
        });
        const shape = seriesShape(s);
        expect(shape).toEqual({ wait, band });
        const o = stepTimeOptions({ ...base, shape });
        expect(o.series.length).toBe(chartColumns(s, shape).length);
        expect(seriesLayout(shape).count).toBe(o.series.length);
      }
    }
  });

  it("zooms by dragging along x only", () => {
    const o = stepTimeOptions({ ...base, shape: { wait: false, band: false } });
    expect(o.cursor?.drag).toEqual({ x: true, y: false, setScale: true });
  });

  it("clamps sizes to at least one pixel", () => {
    const o = stepTimeOptions({ ...base, width: 0, height: -5, shape: { wait: false, band: false } });
    expect(o.width).toBe(1);
    expect(o.height).toBe(1);
  });
});
