// The diagnosis verdict: labels, tones and defensive parsing. Pure, unit-tested.

import type { Diagnosis, Evidence, Run, Verdict } from "./types";

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

/** Short badge text. */
export function verdictShort(v: Verdict | null | undefined): string {
  switch (v) {
    case "highly_input_bound":
      return "input-bound";
    case "moderately_input_bound":
      return "partly input-bound";
    case "not_input_bound":
      return "fed";
    case "stalled":
      return "stalled";
    case "insufficient_data":
      return "too early";
    default:
      return "—";
  }
}

/** Headline of the verdict banner. */
export function verdictHeadline(v: Verdict): string {
  switch (v) {
    case "highly_input_bound":
      return "Highly input-bound: the GPU waits for data";
    case "moderately_input_bound":
      return "Moderately input-bound: the input pipeline sometimes lags";
    case "not_input_bound":
      return "Not input-bound: the GPU is being fed";
    case "stalled":
      return "Stalled: steps stopped while the process is alive";
    case "insufficient_data":
      return "Not enough data for a verdict yet";
  }
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
    input_wait_share: share,
    source: r.source === "fallback" ? "fallback" : "measured",
    evidence,
    advice,
  };
  if (typeof r.run_id === "number") d.run_id = r.run_id;
  if (typeof r.window_s === "number") d.window_s = r.window_s;
  if (typeof r.steps_in_window === "number") d.steps_in_window = r.steps_in_window;
  return d;
}

/** One line of evidence as text. */
export function evidenceText(e: Evidence | string): string {
  if (typeof e === "string") return e;
  if (typeof e.text === "string" && e.text) return e.text;
  return `${e.key}: ${String(e.value)}`;
}

/**
 * The verdict to badge a run with in the list: a diagnosis the server sent
 * (live message or a diagnosis read) wins; otherwise the run summary's verdict,
 * the level of the whole run's input-wait share as the server judged it (marked
 * as derived; null when the wait is not measured).
 */
export function runVerdict(run: Run, known: Verdict | undefined): { verdict: Verdict | null; derived: boolean } {
  if (known) return { verdict: known, derived: false };
  const v = run.summary?.verdict;
  return { verdict: isVerdict(v) ? v : null, derived: true };
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

export function inputWaitLabel(level: InputWaitLevel): string {
  switch (level) {
    case "high":
      return "highly input-bound";
    case "moderate":
      return "moderately input-bound";
    case "low":
      return "not input-bound";
    case "unknown":
      return "input wait not measured";
  }
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
