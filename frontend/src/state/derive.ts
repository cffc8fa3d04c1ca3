// Series derived from the step series (throughput), and the server's starved
// stretches as shaded ranges. Pure, unit-tested.

import { formatRate } from "../app/format";
import type { ShadeRange } from "./samples";
import type { StepSeries } from "./series";

/** Batch size from the run config (`batch_size`), if it is a positive number. */
export function batchSizeOf(config: Record<string, unknown> | null | undefined): number | null {
  const v = config?.batch_size;
  const n = typeof v === "number" ? v : typeof v === "string" ? Number(v) : NaN;
  return Number.isFinite(n) && n > 0 ? n : null;
}

/**
 * The throughput chart's caption. With a batch size in the config the chart is
 * in samples/s; without one it stays in steps/s (per-step sample counts are
 * unknown), and the run summary's measured samples/s, when the server has it,
 * is quoted instead so the chart is not mistaken for samples/s.
 */
export function throughputCaption(
  config: Record<string, unknown> | null | undefined,
  summary: { samples_per_s?: number | null } | null | undefined,
): { text: string; title: string } {
  const batch = batchSizeOf(config);
  if (batch !== null) {
    return { text: `samples/s · batch size ${batch}`, title: `Samples per second: steps per second × batch_size ${batch} from the run config.` };
  }
  const sps = summary?.samples_per_s;
  if (typeof sps === "number" && Number.isFinite(sps) && sps > 0) {
    return {
      text: `steps/s (no batch_size in config) · run summary: ${formatRate(sps)} samples/s`,
      title:
        "The config has no batch_size, so the chart shows steps per second. The run summary's samples/s is the agent's own measure over the whole run.",
    };
  }
  return {
    text: "steps/s (no batch_size in config)",
    title: "The config has no batch_size, so the chart shows steps per second. Pass config={'batch_size': ...} to StokerCallback for samples/s.",
  };
}

/**
 * Throughput columns by step: samples/s when the batch size is known, else steps/s.
 * `[step, mean, min?, max?]` where a bucket's slowest step gives the minimum rate.
 */
export function throughputColumns(s: StepSeries, batchSize: number | null): { data: (number | null)[][]; unit: string; band: boolean } {
  const k = batchSize ?? 1;
  const rate = (ms: number | null | undefined) => (typeof ms === "number" && ms > 0 ? (1000 * k) / ms : null);
  const mean = s.durMs.map(rate);
  const data: (number | null)[][] = [s.step, mean];
  const band = s.minMs !== null && s.maxMs !== null && s.downsampled;
  if (band) {
    data.push(s.maxMs!.map(rate)); // slowest step → lowest rate
    data.push(s.minMs!.map(rate));
  }
  return { data, unit: batchSize ? "samples/s" : "steps/s", band };
}

/**
 * Shaded ranges from the server's starvation answer: by step (each range
 * widened by half a step on both sides, so a lone step has a width) and by
 * wall-clock time (for the GPU charts).
 */
export function rangesFromStarvation(resp: {
  ranges?: { start: number; end: number; t_start?: number; t_end?: number; steps?: number; wait_share?: number | null }[];
} | null): { steps: ShadeRange[]; time: ShadeRange[] } {
  const steps: ShadeRange[] = [];
  const time: ShadeRange[] = [];
  for (const r of resp?.ranges ?? []) {
    if (typeof r.start !== "number" || typeof r.end !== "number") continue;
    const share = typeof r.wait_share === "number" ? ` (${Math.round(r.wait_share * 100)} % waiting)` : "";
    const label = r.start === r.end ? `starved: step ${r.start}${share}` : `starved: steps ${r.start}–${r.end}${share}`;
    steps.push({ from: r.start - 0.5, to: r.end + 0.5, label });
    if (typeof r.t_start === "number" && typeof r.t_end === "number") time.push({ from: r.t_start, to: r.t_end, label });
  }
  return { steps, time };
}
