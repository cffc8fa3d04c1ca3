import { describe, expect, it } from "vitest";
import { BYTE_INCRS, DECIMAL_INCRS, STEP_INCRS, axisSplits, formatBytesTick, pickIncr, formatStepTick, incrDecimals, tickLabels } from "./axes";
import { durationRange, rangeFor, singleXRange } from "./scales";

describe("axis helpers", () => {
  it("labels step ticks compactly", () => {
    expect(formatStepTick(950)).toBe("950");
    expect(formatStepTick(12_000)).toBe("12k");
    expect(formatStepTick(1_250_000)).toBe("1.25M");
  });
  it("offers only integer step increments", () => {
    expect(STEP_INCRS.every((v) => Number.isInteger(v))).toBe(true);
    expect(STEP_INCRS[0]).toBe(1);
  });
  it("anchors duration ranges at zero with headroom", () => {
    expect(durationRange(null, 80, 100)).toEqual([0, 108]);
    expect(durationRange(null, null, null)).toEqual([0, 1]);
  });
});

describe("byte axis increments", () => {
  const MiB = 1024 ** 2;
  const GiB = 1024 ** 3;

  it("are ascending powers of two covering MiB and GiB", () => {
    for (let i = 0; i < BYTE_INCRS.length; i++) {
      const v = BYTE_INCRS[i]!;
      expect(Math.log2(v)).toBe(Math.round(Math.log2(v)));
      if (i > 0) expect(v).toBe(2 * BYTE_INCRS[i - 1]!);
    }
    for (const v of [256 * MiB, 512 * MiB, GiB, 2 * GiB, 4 * GiB, 8 * GiB, 16 * GiB, 32 * GiB, 64 * GiB]) expect(BYTE_INCRS).toContain(v);
    // No decimal steps: 10 GB would be labelled 9.31 GiB.
    expect(BYTE_INCRS).not.toContain(1e9);
    expect(BYTE_INCRS).not.toContain(1e10);
    expect(BYTE_INCRS).not.toContain(2e10);
  });

  it("label binary values in round binary units", () => {
    expect(formatBytesTick(0)).toBe("0");
    expect(formatBytesTick(16 * GiB)).toBe("16 GiB");
    expect(formatBytesTick(32 * GiB)).toBe("32 GiB");
    expect(formatBytesTick(512 * MiB)).toBe("512 MiB");
    expect(formatBytesTick(1.5 * GiB)).toBe("1.5 GiB");
    expect(formatBytesTick(1.25 * GiB)).toBe("1.25 GiB");
    expect(formatBytesTick(1024 * GiB)).toBe("1 TiB");
    expect(formatBytesTick(null)).toBe("");
  });

  it("give ticks such as 16 GiB, 32 GiB on a GPU-sized range", () => {
    // An 80 GB card (80e9 bytes ≈ 74.5 GiB) with the range's 8 % headroom, 200 px tall, ≥ 30 px between ticks.
    const max = 80e9 * 1.08;
    const incr = pickIncr(BYTE_INCRS, 0, max, 200, 30);
    expect(incr).toBe(16 * GiB);
    expect(axisSplits(0, max, incr).map(formatBytesTick)).toEqual(["0", "16 GiB", "32 GiB", "48 GiB", "64 GiB", "80 GiB"]);
  });

  it("never produce decimal-GB labels over a wide spread of ranges", () => {
    for (const gb of [0.3, 1, 2.5, 6, 11, 16, 24, 40, 48, 80, 141, 192]) {
      for (const px of [120, 200, 320]) {
        const max = gb * 1e9 * 1.08;
        const incr = pickIncr(BYTE_INCRS, 0, max, px, 30);
        for (const label of axisSplits(0, max, incr).map(formatBytesTick)) {
          // Whole numbers, or halves/quarters at most (1.5 GiB, 1.25 GiB) — never 18.6 GiB.
          expect(label).toMatch(/^(0|\d+(\.(5|25|75))? (B|KiB|MiB|GiB|TiB))$/);
        }
      }
    }
  });
});

describe("epoch axes with a single epoch", () => {
  // uPlot's y axes want ≥ 30 px between ticks; the epoch charts are about 170 px tall inside.
  const yTicks = (values: number[]) => {
    const range = rangeFor({ scale: "value", label: "", format: String }) as (u: unknown, min: number, max: number) => [number, number];
    const [lo, hi] = range(null, Math.min(...values), Math.max(...values));
    const incr = pickIncr(DECIMAL_INCRS, lo, hi, 170, 30);
    return tickLabels(axisSplits(lo, hi, incr), incr);
  };

  it("puts one epoch in the middle of a one-epoch span (uPlot would draw 0..100)", () => {
    expect(singleXRange({ data: [[0], [0.82]] }, 0, 100)).toEqual([-0.5, 0.5]);
    expect(singleXRange({ data: [[4], [0.82], [0.83]] }, 4, 104)).toEqual([3.5, 4.5]);
    // More epochs, or none: the range passes through.
    expect(singleXRange({ data: [[0, 1, 2], [1, 2, 3]] }, 0, 2)).toEqual([0, 2]);
    expect(singleXRange({ data: [[]] }, null, null)).toEqual([null, null]);
    // Whole-epoch ticks over that span: the epoch alone.
    expect(axisSplits(-0.5, 0.5, pickIncr(STEP_INCRS, -0.5, 0.5, 600, 50)).map(String)).toEqual(["0"]);
  });

  it("labels close values of one epoch each differently (no repeated 0.82)", () => {
    for (const values of [[0.8212, 0.8208], [0.8234, 0.8241], [0.8231, 0.8244], [0.8, 0.81], [0.82], [0.82, 0.82], [0], [1e-5, 1.2e-5], [12_345, 12_400], [2.5e6]]) {
      const labels = yTicks(values);
      expect(labels.length, `${values}`).toBeGreaterThan(1);
      expect(new Set(labels).size, `${values}: ${labels.join(" ")}`).toBe(labels.length);
    }
    expect(yTicks([0.8212, 0.8208])).toEqual(["0.8208", "0.8209", "0.8210", "0.8211", "0.8212"]);
  });

  it("writes as many decimals as the increment needs", () => {
    expect(incrDecimals(5)).toBe(0);
    expect(incrDecimals(0.02)).toBe(2);
    expect(incrDecimals(0.025)).toBe(3);
    expect(incrDecimals(1e-4)).toBe(4);
    expect(tickLabels([0.8, 0.82, 0.84], 0.02)).toEqual(["0.80", "0.82", "0.84"]);
    expect(tickLabels([-0.02, -1e-17, 0.02], 0.02)).toEqual(["-0.02", "0.00", "0.02"]);
    expect(tickLabels([10_000, 12_000, 14_000], 2000)).toEqual(["10k", "12k", "14k"]);
    expect(tickLabels([1.1e-5, 1.2e-5, 0], 1e-6)).toEqual(["1.1e-5", "1.2e-5", "0"]);
    expect(tickLabels([null, 1], 1)).toEqual(["", "1"]);
  });
});
