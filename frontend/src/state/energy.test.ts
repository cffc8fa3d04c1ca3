import { describe, expect, it } from "vitest";
import { energyCell, energyFigures, formatEnergy, formatEnergyCost, gpmFigures, type RunEnergy } from "./energy";

const ENERGY: RunEnergy = {
  run_id: 1,
  total_j: 7.2e6,
  starved_j: 3.6e6,
  computing_j: 3.0e6,
  other_j: 0.6e6,
  total_kwh: 2,
  starved_kwh: 1,
  integrated: false,
  price_per_kwh: 0.3,
  currency: "€",
  total_cost: 0.6,
  starved_cost: 0.3,
  gpus: [],
};

describe("formatEnergy", () => {
  it("writes joules, kilo- and megajoules, then kWh", () => {
    expect(formatEnergy(850)).toBe("850 J");
    expect(formatEnergy(12_400)).toBe("12.4 kJ");
    expect(formatEnergy(300_000)).toBe("300.0 kJ");
    expect(formatEnergy(7.2e6)).toBe("2.00 kWh");
    expect(formatEnergy(3.6e8)).toBe("100.0 kWh");
    expect(formatEnergy(null)).toBe("—");
  });
  it("prices small amounts without rounding them to zero", () => {
    expect(formatEnergyCost(0.3, "€")).toBe("€0.30");
    expect(formatEnergyCost(0.0042, "$")).toBe("$0.0042");
    expect(formatEnergyCost(null, "$")).toBeNull();
  });
});

describe("energyFigures", () => {
  it("shows the total and the starved share with money", () => {
    // The tone's thresholds are the server's (GET /settings/ui), never the UI's own.
    const bound = { highly_input_bound: 0.6, moderately_input_bound: 0.3 };
    const [total, starved] = energyFigures(ENERGY, bound);
    expect(total!.value).toBe("2.00 kWh · €0.60");
    expect(starved!.label).toBe("Burned while starved");
    expect(starved!.value).toBe("1.00 kWh (50 %) · €0.30");
    expect(starved!.tone).toBe("wait-moderate");
    expect(energyFigures(ENERGY, { ...bound, highly_input_bound: 0.5 })[1]!.tone).toBe("wait-high");
    expect(energyFigures(ENERGY, null)[1]!.tone).toBeUndefined(); // not read yet: no level
  });
  it("says when energy was integrated from power, and nothing without energy", () => {
    expect(energyFigures({ ...ENERGY, integrated: true, total_cost: null, starved_cost: null })[0]!.title).toContain("Integrated from power");
    expect(energyFigures({ ...ENERGY, total_j: null })).toEqual([]);
    expect(energyFigures(null)).toEqual([]);
  });
});

describe("gpmFigures", () => {
  it("shows GPM means only where the GPU reported them (null is absent, not 0 %)", () => {
    expect(gpmFigures({ gpu_util_mean: 98, sm_util_mean: null, tensor_util_mean: null })).toEqual([]);
    const figures = gpmFigures({ sm_util_mean: 23.4, sm_occupancy_mean: 11, tensor_util_mean: 0 });
    expect(figures.map((f) => [f.key, f.value])).toEqual([
      ["sm_util", "23 %"],
      ["tensor_util", "0 %"],
    ]);
  });
});

describe("energyCell", () => {
  it("shows the summary's total until the split is read, then the starved part and money", () => {
    expect(energyCell(7.2e6, null)).toMatchObject({ text: "2.00 kWh", starved: "" });
    const cell = energyCell(7.0e6, ENERGY);
    expect(cell.text).toBe("2.00 kWh · €0.60");
    expect(cell.starved).toBe("starved 1.00 kWh (50 %) · €0.30");
    expect(cell.title).toContain("computing: 0.83 kWh");
  });
  it("leaves money out where the server sets no price, and says an integrated figure", () => {
    const cell = energyCell(7.2e6, { ...ENERGY, price_per_kwh: null, total_cost: null, starved_cost: null, integrated: true });
    expect(cell.text).toBe("2.00 kWh");
    expect(cell.starved).toBe("starved 1.00 kWh (50 %)");
    expect(cell.title).toContain("Integrated from power readings");
  });
  it("is a dash with its reason for a run without energy readings, never 0", () => {
    const cell = energyCell(null, null);
    expect(cell.text).toBe("—");
    expect(cell.starved).toBe("");
    expect(cell.title).toMatch(/No GPU energy readings/);
  });
});
