import { describe, expect, it } from "vitest";
import { bestIndices, compareDuration, compareHref, compareMetrics, compareRows, DIAGNOSIS_METRICS, diffFromServer, overlayColumns, parseRunIds } from "./compare";
import { epochCompareMetrics } from "./epochs";
import { energyCell, type RunEnergy } from "./energy";
import { seriesFromColumns } from "./series";
import { makeCompareRun, makeRun } from "./testing";

describe("parseRunIds", () => {
  it("keeps positive integer ids once, in order", () => {
    expect(parseRunIds("3,1,3, 2,x,-1,0")).toEqual([3, 1, 2]);
    expect(parseRunIds(null)).toEqual([]);
  });
  it("round-trips with compareHref", () => {
    expect(compareHref([1, 2])).toBe("#/compare?runs=1,2");
  });
});

describe("bestIndices", () => {
  it("marks the lowest or highest value", () => {
    expect([...bestIndices([30, 10, 20], "lower")]).toEqual([1]);
    expect([...bestIndices([30, 10, 20], "higher")]).toEqual([0]);
  });
  it("marks every tie for best and ignores missing values", () => {
    expect([...bestIndices([10, null, 10, 20], "lower")].sort()).toEqual([0, 2]);
  });
  it("tells values apart exactly when they read differently", () => {
    // val_loss 0.8318 against 0.8301: 0.2 % apart, shown apart, so one is best (issue 38).
    expect([...bestIndices([0.8318, 0.8301], "lower", ["0.8318", "0.8301"])]).toEqual([1]);
    // 16.0 GiB and 16.0 GiB read the same: neither is best.
    expect(bestIndices([17179076116, 17179529099], "lower", ["16.0 GiB", "16.0 GiB"]).size).toBe(0);
    expect([...bestIndices([100, 100.2, 150], "lower", ["100 ms", "100 ms", "150 ms"])]).toEqual([0, 1]);
  });
  it("marks nothing with fewer than two values or when all are equal", () => {
    expect(bestIndices([5, null], "lower").size).toBe(0);
    expect(bestIndices([5, 5], "lower").size).toBe(0);
  });
});

describe("compareRows", () => {
  const epochs = (valLoss: number, lr: number, steps: number) => ({
    ...makeRun().summary,
    steps,
    epoch_metrics: {
      val_loss: { last: valLoss, last_epoch: 2, best: valLoss, best_epoch: 2, goal: "min" as const, directed: true, epochs: 3 },
      learning_rate: { last: lr, last_epoch: 2, best: lr, best_epoch: 0, goal: "max" as const, directed: false, epochs: 3 },
    },
  });
  it("stars only the metrics with a direction, the figures never", () => {
    const a = makeCompareRun({ id: 1, summary: { ...epochs(0.8318, 0.001, 2070), step_time_ms_median: 40, gpu_util_mean: 90 } });
    const b = makeCompareRun({ id: 2, summary: { ...epochs(0.8301, 0.01, 128), step_time_ms_median: 50, gpu_util_mean: 60 } });
    const rows = compareRows([a, b], [...DIAGNOSIS_METRICS, ...compareMetrics(), ...epochCompareMetrics([a, b])]);
    const row = (key: string) => rows.find((r) => r.key === key)!;
    expect(row("median").cells.map((c) => [c.text, c.best])).toEqual([
      ["40.0 ms", false],
      ["50.0 ms", false],
    ]);
    for (const key of ["gpu", "steps", "wait", "lost_gpu", "verdict", "epoch:learning_rate"]) {
      expect(row(key).better).toBeNull();
      expect(row(key).cells.some((c) => c.best)).toBe(false);
    }
    expect(row("steps").cells.map((c) => c.text)).toEqual(["2,070", "128"]);
    expect(row("epoch:learning_rate").label).toBe("Last learning_rate");
    expect(row("epoch:val_loss").label).toBe("Best val_loss");
    expect(row("epoch:val_loss").better).toBe("lower");
    expect(row("epoch:val_loss").cells.map((c) => [c.text, c.best])).toEqual([
      ["0.8318", false],
      ["0.8301", true],
    ]);
  });
  it("puts the diagnosis figures first, in the words of every other surface", () => {
    expect(DIAGNOSIS_METRICS.map((m) => m.label)).toEqual([
      "Verdict · whole run",
      "Input wait · whole run",
      "Lost device time",
      "Step time median",
      "Step time p95",
      "Steps",
    ]);
    const run = makeCompareRun({ summary: { ...makeRun().summary, verdict_label: "the server's words" } });
    expect(compareRows([run], DIAGNOSIS_METRICS)[0]!.cells[0]!.text).toBe("the server's words");
  });
  it("derives duration from timestamps when the summary has none", () => {
    const r = makeCompareRun({ started_at: "2024-05-01T12:00:00Z", ended_at: "2024-05-01T12:01:30Z" });
    expect(compareDuration(r)).toBe(90);
  });
});

describe("diffFromServer", () => {
  it("reads the server's differences as rows, keys sorted", () => {
    expect(diffFromServer({ b: [1, 2], a: ["x", null] }, 2)).toEqual([
      { key: "a", values: ["x", "null"] },
      { key: "b", values: ["1", "2"] },
    ]);
    expect(diffFromServer({ a: [1] }, 2)).toEqual([{ key: "a", values: ["1", "(absent)"] }]);
    expect(diffFromServer({}, 2)).toEqual([]);
  });
});

describe("overlayColumns", () => {
  const a = seriesFromColumns({ step: [1, 2], t: [100, 101], dur: [0.1, 0.2], wait: [null, null] });
  const b = seriesFromColumns({ step: [2, 3], t: [500, 502], dur: [0.3, 0.4], wait: [null, 0.1] });
  it("aligns by step on the union of steps", () => {
    expect(overlayColumns([a, b], "step")).toEqual([
      [1, 2, 3],
      [100, 200, null],
      [null, 300, 400],
    ]);
  });
  it("aligns by seconds since each run's first step", () => {
    expect(overlayColumns([a, b], "elapsed")).toEqual([
      [0, 1, 2],
      [100, 200, null],
      [300, null, 400],
    ]);
  });
});

describe("compare stars", () => {
  it("awards no star between values that read the same", () => {
    const runs = [makeCompareRun({ id: 1 }), makeCompareRun({ id: 2 })];
    runs[0]!.summary = { ...runs[0]!.summary, lost_gpu_s: 2.01, input_wait_share: 0.051 };
    runs[1]!.summary = { ...runs[1]!.summary, lost_gpu_s: 2.04, input_wait_share: 0.0512 };
    const rows = compareRows(runs, DIAGNOSIS_METRICS);
    const lost = rows.find((r) => r.key === "lost_gpu")!;
    expect(lost.cells.map((c) => c.text)).toEqual(["2.0 s", "2.0 s"]);
    expect(lost.cells.some((c) => c.best)).toBe(false);
    const wait = rows.find((r) => r.key === "wait")!;
    expect(wait.cells.map((c) => c.text)).toEqual(["5.1 %", "5.1 %"]);
    expect(wait.cells.some((c) => c.best)).toBe(false);
  });
});

describe("compare energy rows", () => {
  const split = (runId: number, total: number, starved: number, cost: number | null): RunEnergy => ({
    run_id: runId,
    total_j: total,
    starved_j: starved,
    computing_j: total - starved,
    other_j: 0,
    total_kwh: total / 3.6e6,
    starved_kwh: starved / 3.6e6,
    integrated: false,
    price_per_kwh: cost === null ? null : 0.3,
    currency: "€",
    total_cost: cost === null ? null : (total / 3.6e6) * 0.3,
    starved_cost: cost === null ? null : (starved / 3.6e6) * 0.3,
    gpus: [],
  });
  const runs = [1, 2, 3].map((id) => makeCompareRun({ id, summary: { ...makeRun().summary, energy_j: 7.2e6 } }));
  runs[2]!.summary = { ...runs[2]!.summary, energy_j: null };

  it("shows each run's energy and what was burned while starved as the runs list does, priced", () => {
    const energies = new Map([
      [1, split(1, 7.2e6, 3.6e6, 0.6)],
      [2, split(2, 7.2e6, 0.72e6, 0.6)],
    ]);
    const rows = compareRows(runs, compareMetrics(energies));
    const energy = rows.find((r) => r.key === "energy")!;
    const starved = rows.find((r) => r.key === "energy_starved")!;
    expect(starved.label).toBe("Burned while starved");
    expect(energy.cells.map((c) => c.text)).toEqual([
      energyCell(7.2e6, energies.get(1)).text,
      energyCell(7.2e6, energies.get(2)).text,
      "—",
    ]);
    expect(energy.cells[0]!.text).toBe("2.00 kWh · €0.60");
    expect(starved.cells.map((c) => [c.text, c.best])).toEqual([
      ["1.00 kWh (50 %) · €0.30", false],
      ["0.20 kWh (10 %) · €0.06", false],
      ["—", false],
    ]);
    expect(starved.cells[0]!.title).toContain("computing: 1.00 kWh");
    expect(energy.cells[0]!.title).toMatch(/^GPU energy the run drew/);
  });

  it("leaves money out without a price, and shows the summary's total before the split is read", () => {
    const rows = compareRows(runs, compareMetrics(new Map([[1, split(1, 7.2e6, 3.6e6, null)]])));
    expect(rows.find((r) => r.key === "energy")!.cells.map((c) => c.text)).toEqual(["2.00 kWh", "2.00 kWh", "—"]);
    expect(rows.find((r) => r.key === "energy_starved")!.cells.map((c) => c.text)).toEqual(["1.00 kWh (50 %)", "—", "—"]);
    expect(compareRows(runs).map((r) => r.key)).toEqual([...DIAGNOSIS_METRICS, ...compareMetrics()].map((m) => m.key));
  });
});
