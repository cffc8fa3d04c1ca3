// The diagnosis verdict: tones, headlines and defensive parsing. Pure, unit-tested.
// The verdict's words are the server's (levels.VERDICT_WORDS), sent beside every verdict:
// `verdict_label` of a diagnosis and of a run summary. The UI writes no copy of them
// (tests/unit/test_one_source.py fails on one).

import type { Diagnosis, Evidence, GpuFinding, Run, Verdict } from "../api/types";

export const VERDICTS: readonly Verdict[] = [
  "highly_input_bound",
  "moderately_input_bound",
  "not_input_bound",
  "stalled",
  "insufficient_data",
];

export function isVerdict(v: unknown): v is Verdict {
  return typeof v === "string" && (VERDICTS as readonly string[]).includes(v);
}

export type VerdictTone = "bad" | "warn" | "ok" | "info";

export function verdictTone(v: Verdict | null | undefined): VerdictTone {
  switch (v) {
    case "highly_input_bound":
    case "stalled":
      return "bad";
    case "moderately_input_bound":
      return "warn";
    case "not_input_bound":
      return "ok";
    default:
      return "info";
  }
}

/** A verdict's words as the server sent them, or a dash when it sent none. */
export function verdictWords(label: string | null | undefined): string {
  return typeof label === "string" && label ? label : "—";
}

/**
 * Whether a run trains on a GPU (the environment lists one, or utilization was sampled):
 * runs without one speak of the "device".
 */
export function deviceWord(
  run: { environment?: unknown; summary?: { gpu_util_mean?: number | null } | null } | null | undefined,
): "GPU" | "device" {
  const env = (run?.environment ?? {}) as Record<string, unknown>;
  const listed = ["gpus", "tf_gpus"].some((k) => Array.isArray(env[k]) && (env[k] as unknown[]).length > 0);
  const sampled = typeof run?.summary?.gpu_util_mean === "number";
  return listed || sampled ? "GPU" : "device";
}

/** What each verdict means for the run, after its words in the banner's headline. */
function meaning(v: Verdict, device: "GPU" | "device"): string {
  switch (v) {
    case "highly_input_bound":
      return `the ${device} waits for data`;
    case "moderately_input_bound":
      return "the input pipeline sometimes lags";
    case "not_input_bound":
      return `the ${device} is being fed`;
    case "stalled":
      return "steps stopped while the process is alive";
    case "insufficient_data":
      return "no verdict yet";
  }
}

/** Headline of the verdict banner: the server's words for the verdict, then what it means. */
export function verdictHeadline(v: Verdict, label: string | null | undefined, device: "GPU" | "device" = "GPU"): string {
  const words = verdictWords(label);
  return `${words.charAt(0).toUpperCase()}${words.slice(1)}: ${meaning(v, device)}`;
}

/** The `gpu_findings` of a diagnosis from the wire: well-formed ones only. */
export function parseGpuFindings(raw: unknown): GpuFinding[] {
  if (typeof raw !== "object" || raw === null) return [];
  const list = (raw as Record<string, unknown>).gpu_findings;
  if (!Array.isArray(list)) return [];
  return list.filter(
    (f): f is GpuFinding =>
      typeof f === "object" && f !== null && typeof f.key === "string" && typeof f.title === "string" && Array.isArray(f.evidence) && Array.isArray(f.advice),
  );
}

/** A diagnosis from the wire, or null when it is not one. */
export function parseDiagnosis(raw: unknown): Diagnosis | null {
  if (typeof raw !== "object" || raw === null) return null;
  const r = raw as Record<string, unknown>;
  if (!isVerdict(r.verdict)) return null;
  const share = typeof r.input_wait_share === "number" && Number.isFinite(r.input_wait_share) ? r.input_wait_share : null;
  const evidence = Array.isArray(r.evidence)
    ? r.evidence.filter((e): e is Evidence | string => typeof e === "string" || (typeof e === "object" && e !== null))
    : [];
  const advice = Array.isArray(r.advice) ? r.advice.map((a) => String(a)) : [];
  const d: Diagnosis = {
    verdict: r.verdict,
    verdict_label: typeof r.verdict_label === "string" ? r.verdict_label : "",
    input_wait_share: share,
    source: r.source === "fallback" ? "fallback" : "measured",
    evidence,
    advice,
  };
  if (typeof r.run_id === "number") d.run_id = r.run_id;
  if (typeof r.window_s === "number") d.window_s = r.window_s;
  if (typeof r.window_label === "string" && r.window_label) d.window_label = r.window_label;
  if (typeof r.steps_in_window === "number") d.steps_in_window = r.steps_in_window;
  return d;
}

/** One line of evidence as text. */
export function evidenceText(e: Evidence | string): string {
  if (typeof e === "string") return e;
  if (typeof e.text === "string" && e.text) return e.text;
  return `${e.key}: ${String(e.value)}`;
}

/** A verdict the server pushed for a run (live `verdict` messages), with its words. */
export interface KnownVerdict {
  verdict: Verdict;
  label: string;
}

/**
 * The verdict to badge a run with in the list and compare: the level of the whole run's
 * input-wait share as the server judged it (the summary's verdict and its words, beside the
 * summary's figure: one window for both; null when the wait is not measured). A running run
 * the server found stalled (live message or a diagnosis read) is badged stalled: that is a
 * state of the run now, not an input-wait level.
 */
export function runVerdict(run: Run, known: KnownVerdict | undefined): { verdict: Verdict | null; label: string; derived: boolean } {
  if (known?.verdict === "stalled" && run.status === "running") return { verdict: known.verdict, label: known.label, derived: false };
  const v = run.summary?.verdict;
  return isVerdict(v) ? { verdict: v, label: verdictWords(run.summary?.verdict_label), derived: true } : { verdict: null, label: verdictWords(null), derived: true };
}

export type InputWaitLevel = "high" | "moderate" | "low" | "unknown";

/** The input-wait level a run summary's verdict (the server's) stands for. */
export function inputWaitLevel(v: Verdict | null | undefined): InputWaitLevel {
  switch (v) {
    case "highly_input_bound":
      return "high";
    case "moderately_input_bound":
      return "moderate";
    case "not_input_bound":
      return "low";
    default:
      return "unknown";
  }
}

/** What a run summary's input-wait figure means: its verdict's words (the server's). */
export function inputWaitLabel(summary: { verdict?: Verdict | null; verdict_label?: string | null } | null | undefined): string {
  return isVerdict(summary?.verdict) && summary?.verdict_label ? summary.verdict_label : "input wait not measured";
}

/** What a run's summary figures cover: "whole run", "whole run so far" while it runs. */
export function summaryWindow(run: Pick<Run, "status">): string {
  return run.status === "running" ? "whole run so far" : "whole run";
}

/**
 * Orders verdicts from two sources: live `verdict` messages and REST
 * `/diagnosis` answers. A REST request captures the generation when it starts;
 * every live verdict applied bumps it, so an answer to a request that started
 * before the latest live verdict is stale and must be dropped (it would
 * otherwise put an older verdict back on the page).
 */
export class VerdictGeneration {
  private gen = 0;

  /** The token of a REST request starting now. */
  begin(): number {
    return this.gen;
  }

  /** A live verdict was applied. */
  live(): void {
    this.gen++;
  }

  /** Whether the answer to the request started with `token` may still be applied. */
  accepts(token: number): boolean {
    return token === this.gen;
  }
}
