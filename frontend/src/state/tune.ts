// `stoker tune`, in the UI: the command a run's "Prove it" gives to paste, and how a tune
// group's table reads (its verdicts' tones, its trials' chart lines).

import type { Run, TuneGroup, TuneTrial } from "../api/types";

export type { TuneGroup, TuneRow, TuneTrial } from "../api/types";

export const TUNE_STEPS = 200;

/** A word for the shell as is, else in single quotes (a quote inside as '\''). */
export function shellQuote(word: string): string {
  if (word !== "" && /^[A-Za-z0-9_@%+=:,./-]+$/.test(word)) return word;
  return `'${word.replace(/'/g, `'\\''`)}'`;
}

export interface ProveIt {
  /** The command to paste: `stoker tune --steps 200 -- python train.py ...`. */
  command: string;
  /** Where to paste it (the run's working directory), when known. */
  cwd: string | null;
  /** Why the command holds a placeholder instead of the run's own, when it does. */
  note: string | null;
}

const PLACEHOLDER = ["python", "train.py"];

function stringList(value: unknown): string[] | null {
  return Array.isArray(value) && value.length > 0 && value.every((v) => typeof v === "string") ? (value as string[]) : null;
}

/** The `stoker tune` command that measures Stoker's advice on the run's own script, from the
 *  command line its agent recorded (`environment.command`, the interpreter's arguments). */
export function proveItCommand(run: Run | null, steps: number = TUNE_STEPS): ProveIt {
  const env = (run?.environment ?? {}) as Record<string, unknown>;
  const recorded = stringList(env.command);
  const cwd = typeof env.cwd === "string" && env.cwd !== "" ? env.cwd : null;
  let words = recorded ?? PLACEHOLDER;
  let note: string | null = null;
  if (recorded === null) {
    note = "This run's agent did not record how its script was started: put your own command after --.";
  } else if (recorded.some((w) => /ipykernel|jupyter|colab_kernel/.test(w))) {
    words = PLACEHOLDER;
    note = "This run came from a notebook: stoker tune runs a script, so move the training into one and put its command after --.";
  }
  return { command: `stoker tune --steps ${steps} -- ${words.map(shellQuote).join(" ")}`, cwd: note === null ? cwd : null, note };
}

/** The tune group key a trial run was streamed with (`config.tune.group`), or null. */
export function tuneGroupKey(run: Run | null): string | null {
  const tune = (run?.config as Record<string, unknown> | undefined)?.tune;
  if (tune === null || typeof tune !== "object") return null;
  const key = (tune as Record<string, unknown>).group;
  return typeof key === "string" && key !== "" ? key : null;
}

export type TuneTone = "good" | "neutral" | "bad" | "muted" | "base";

/** How a row's verdict reads: a speed-up is good; "no measurable gain" neutral; slower, failed
 *  or other elements bad; a change not tried muted. */
export function verdictTone(verdict: string): TuneTone {
  switch (verdict) {
    case "speed-up":
      return "good";
    case "no measurable gain":
      return "neutral";
    case "slower":
    case "failed":
    case "elements differ":
      return "bad";
    case "unchanged":
      return "base";
    default:
      return "muted";
  }
}

export function formatSpeedup(value: number | null | undefined): string {
  return typeof value === "number" && Number.isFinite(value) ? `${value.toFixed(2)}×` : "—";
}

export function formatRate(value: number | null | undefined): string {
  if (typeof value !== "number" || !Number.isFinite(value)) return "—";
  return value >= 100 ? value.toFixed(0) : value >= 10 ? value.toFixed(1) : value.toFixed(2);
}

/** A trial's line on the overlay: its label, and the run it streamed as (null: not here). */
export interface TrialLine {
  label: string;
  runId: number;
}

/** The trials that have a run to draw, in the order they ran. */
export function trialLines(group: TuneGroup): TrialLine[] {
  return group.trials
    .filter((t): t is TuneTrial & { run_id: number } => typeof t.run_id === "number")
    .map((t) => ({ label: t.label, runId: t.run_id }));
}

/** Whether the group may still change (its trials still run). */
export function tuneRunning(group: TuneGroup): boolean {
  return group.status === "running";
}
