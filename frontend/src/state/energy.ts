// GPU energy: a run's joules or kWh, how much of it was burned while the steps
// waited for input, and its price where the server sets one (STOKER_ENERGY_PRICE_KWH).
// Also the run's GPM figures (what the SMs really did) beside its utilization.

import type { components } from "../api/api.gen";
import { MISSING, formatPercent, formatPercentValue } from "../app/format";
import { uiSettings, type InputBound } from "./cost";
import type { SummaryFigure } from "./runs";

type Schemas = components["schemas"];
export type RunEnergy = Schemas["RunEnergy"];
type Summary = Partial<
  Pick<Schemas["RunSummary"], "sm_util_mean" | "sm_occupancy_mean" | "tensor_util_mean" | "dram_bw_util_mean" | "gpu_util_mean">
>;

function finite(v: unknown): v is number {
  return typeof v === "number" && Number.isFinite(v);
}

/** Joules as people read them: "850 J", "12.4 kJ", "3.20 MJ"; kWh from 0.1 kWh on ("1.25 kWh"). */
export function formatEnergy(joules: number | null | undefined): string {
  if (!finite(joules) || joules < 0) return MISSING;
  const kwh = joules / 3.6e6;
  if (kwh >= 0.1) return `${kwh < 10 ? kwh.toFixed(2) : kwh.toFixed(1)} kWh`;
  if (joules >= 1e6) return `${(joules / 1e6).toFixed(2)} MJ`;
  if (joules >= 1e3) return `${(joules / 1e3).toFixed(1)} kJ`;
  return `${joules.toFixed(0)} J`;
}

/** "$0.42", or null without a price. */
export function formatEnergyCost(cost: number | null | undefined, currency: string): string | null {
  if (!finite(cost)) return null;
  const text = cost >= 1000 ? Math.round(cost).toLocaleString("en-US") : cost >= 0.01 || cost === 0 ? cost.toFixed(2) : cost.toPrecision(2);
  return `${currency}${text}`;
}

/**
 * The run's energy figures: total, and burned while starved (with its share and price; its
 * tone by the server's input-bound thresholds, `bound`, once read).
 */
export function energyFigures(energy: RunEnergy | null | undefined, bound: InputBound | null = uiSettings().input_bound): SummaryFigure[] {
  if (!energy || !finite(energy.total_j)) return [];
  const currency = energy.currency ?? "$";
  const totalCost = formatEnergyCost(energy.total_cost, currency);
  const starvedCost = formatEnergyCost(energy.starved_cost, currency);
  const share = finite(energy.starved_j) && energy.total_j > 0 ? energy.starved_j / energy.total_j : null;
  const how = energy.integrated
    ? "Integrated from power readings: this driver has no energy counter."
    : "From NVML's energy counter (nvmlDeviceGetTotalEnergyConsumption).";
  return [
    {
      key: "energy",
      label: "GPU energy",
      value: totalCost ? `${formatEnergy(energy.total_j)} · ${totalCost}` : formatEnergy(energy.total_j),
      title: `Energy the run's GPUs drew, all GPUs. ${how}`,
    },
    {
      key: "energy_starved",
      label: "Burned while starved",
      value:
        formatEnergy(energy.starved_j) +
        (share !== null ? ` (${formatPercent(share, 0)})` : "") +
        (starvedCost ? ` · ${starvedCost}` : ""),
      title:
        "GPU energy drawn while steps waited for their input: each reading's energy shared out by how much of its window the steps spent waiting " +
        `(computing: ${formatEnergy(energy.computing_j)}; no step running: ${formatEnergy(energy.other_j)}).`,
      tone:
        share === null || bound === null
          ? undefined
          : share >= bound.highly_input_bound
            ? "wait-high"
            : share >= bound.moderately_input_bound
              ? "wait-moderate"
              : undefined,
    },
  ];
}

/** What the SMs really did (NVML GPM means), only for runs whose GPUs report GPM. */
export function gpmFigures(summary: Summary | null | undefined): SummaryFigure[] {
  const s = summary ?? {};
  const figures: SummaryFigure[] = [];
  if (finite(s.sm_util_mean)) {
    figures.push({
      key: "sm_util",
      label: "SM active (mean)",
      value: formatPercentValue(s.sm_util_mean),
      title:
        "Share of the GPU's streaming multiprocessors busy (NVML GPM). GPU utilization only says some kernel ran; " +
        (finite(s.sm_occupancy_mean) ? `SM occupancy ${formatPercentValue(s.sm_occupancy_mean)}.` : ""),
    });
  }
  if (finite(s.tensor_util_mean)) {
    figures.push({ key: "tensor_util", label: "Tensor active (mean)", value: formatPercentValue(s.tensor_util_mean), title: "Share of time any tensor pipe was active (NVML GPM)." });
  }
  if (finite(s.dram_bw_util_mean)) {
    figures.push({ key: "dram_bw_util", label: "DRAM bandwidth (mean)", value: formatPercentValue(s.dram_bw_util_mean), title: "DRAM bandwidth used against its peak (NVML GPM)." });
  }
  return figures;
}

/** The runs list's energy cell: the run's GPU energy, and what of it was burned while starved. */
export interface EnergyCell {
  /** "1.25 kWh", with its price when the server prices a kWh ("1.25 kWh · €0.38"). */
  text: string;
  /** "starved 0.39 kWh (31%) · €0.12" once the split is read, else "". */
  starved: string;
  title: string;
}

/**
 * `totalJ` is the run's summary energy (all GPUs); `split` its `/runs/{id}/energy` answer,
 * when read. A run without energy readings (no GPU, or neither an energy counter nor power)
 * shows a dash and says why in its title.
 */
export function energyCell(totalJ: number | null | undefined, split: RunEnergy | null | undefined): EnergyCell {
  const total = finite(split?.total_j) ? split.total_j : totalJ;
  if (!finite(total)) {
    return { text: MISSING, starved: "", title: "No GPU energy readings for this run (no GPU, or a driver with neither an energy counter nor power readings)." };
  }
  const currency = split?.currency ?? "$";
  const totalCost = split ? formatEnergyCost(split.total_cost, currency) : null;
  const text = totalCost ? `${formatEnergy(total)} · ${totalCost}` : formatEnergy(total);
  if (!split || !finite(split.starved_j)) {
    return { text, starved: "", title: `GPU energy the run drew, all GPUs: ${formatEnergy(total)}.` };
  }
  const share = total > 0 ? split.starved_j / total : null;
  const starvedCost = formatEnergyCost(split.starved_cost, currency);
  const starved =
    `starved ${formatEnergy(split.starved_j)}` + (share !== null ? ` (${formatPercent(share, 0)})` : "") + (starvedCost ? ` · ${starvedCost}` : "");
  const how = split.integrated ? " Integrated from power readings: the driver has no energy counter." : "";
  return {
    text,
    starved,
    title:
      `GPU energy the run drew, all GPUs: ${text}. Burned while steps waited for input: ${starved.slice("starved ".length)}; ` +
      `computing: ${formatEnergy(split.computing_j)}; no step running: ${formatEnergy(split.other_j)}.${how}`,
  };
}
