// The browser's set of runs: loaded from `GET /runs`, kept current by `run`
// messages from the live socket. Pure (no DOM), so it is unit-tested.

import { energyCell, gpmFigures, type RunEnergy } from "./energy";
import {
  MISSING,
  formatCount,
  formatDuration,
  formatInputWait,
  formatMs,
  formatPercentValue,
  formatRate,
  formatRelativeTime,
  formatTimestamp,
  formatValue,
  parseIso,
} from "../app/format";
import { formatLostPriced, LOST_TIME, LOST_TIME_MEANS, uiSettings, type Price } from "./cost";
import { bestEpochValue, type Goal } from "./epochs";
import type { Run, RunStatus, Verdict } from "../api/types";
import {
  deviceWord,
  inputWaitLabel,
  inputWaitLevel,
  runVerdict,
  summaryWindow,
  verdictTone,
  type InputWaitLevel,
  type KnownVerdict,
  type VerdictTone,
} from "./verdict";

const TERMINAL: ReadonlySet<RunStatus> = new Set(["finished", "failed", "interrupted"]);

export function isTerminal(status: RunStatus): boolean {
  return TERMINAL.has(status);
}

/**
 * Whether a run shown as `prev` just stopped running (finished, failed,
 * interrupted): the run page then fetches everything one last time, since
 * polling stops with the run.
 */
export function runEnded(prev: RunStatus | null | undefined, next: RunStatus | null | undefined): boolean {
  return prev === "running" && typeof next === "string" && next !== "running";
}

/**
 * Whether `incoming` is older than the copy already held, so applying it would
 * step back in time (a REST answer that was in flight while the socket had
 * already delivered a newer state).
 */
export function isStaleUpdate(held: Run, incoming: Run): boolean {
  if (isTerminal(held.status) && !isTerminal(incoming.status)) return true;
  const heldSeen = parseIso(held.last_seen_at);
  const inSeen = parseIso(incoming.last_seen_at);
  if (heldSeen !== null && inSeen !== null && inSeen < heldSeen) return true;
  const heldSteps = held.summary?.steps ?? 0;
  const inSteps = incoming.summary?.steps ?? 0;
  return inSteps < heldSteps;
}

/** Newest first: by start time, then by id. */
export function compareRunsNewestFirst(a: Run, b: Run): number {
  const ta = parseIso(a.started_at) ?? 0;
  const tb = parseIso(b.started_at) ?? 0;
  if (ta !== tb) return tb - ta;
  return b.id - a.id;
}

export type RunsListener = (changed: Run | null) => void;

export class RunsStore {
  private readonly byId = new Map<number, Run>();
  private readonly listeners = new Set<RunsListener>();
  private readonly verdicts = new Map<number, KnownVerdict>();
  private loadedFlag = false;
  private errorValue: string | null = null;

  /** The latest verdict the server pushed for a run (live `verdict` messages), if any. */
  verdictOf(id: number): KnownVerdict | undefined {
    return this.verdicts.get(id);
  }

  setVerdict(id: number, verdict: KnownVerdict): void {
    const held = this.verdicts.get(id);
    if (held?.verdict === verdict.verdict && held.label === verdict.label) return;
    this.verdicts.set(id, verdict);
    const run = this.byId.get(id);
    if (run) this.emit(run);
  }

  /** Whether a full list has been received at least once. */
  get loaded(): boolean {
    return this.loadedFlag;
  }

  /** Why the last full load failed, or null. */
  get error(): string | null {
    return this.errorValue;
  }

  setError(message: string | null): void {
    if (message === this.errorValue) return;
    this.errorValue = message;
    this.emit(null);
  }

  get size(): number {
    return this.byId.size;
  }

  get(id: number): Run | undefined {
    return this.byId.get(id);
  }

  /** All runs, newest first. */
  list(): Run[] {
    return [...this.byId.values()].sort(compareRunsNewestFirst);
  }

  /**
   * Insert or replace one run; returns false when the update was stale. Live `run` messages
   * carry no config or environment (the server leaves them out): those held are kept, and a
   * stale copy from REST still fills them in.
   */
  upsert(run: Run): boolean {
    if (!isRun(run)) return false;
    const held = this.byId.get(run.id);
    if (held && isStaleUpdate(held, run)) {
      const filled = withSections(held, run);
      if (filled !== held) {
        this.byId.set(run.id, filled);
        this.emit(filled);
      }
      return false;
    }
    const next = held ? withSections(run, held) : run;
    this.byId.set(run.id, next);
    this.emit(next);
    return true;
  }

  /** Forget a deleted run. */
  remove(id: number): void {
    if (!this.byId.delete(id)) return;
    this.verdicts.delete(id);
    this.emit(null);
  }

  /** Merge a full list (from REST); newer copies already held are kept. */
  /** Runs the server holds (the list's `count`), when known. */
  total: number | null = null;

  replaceAll(runs: Run[], total?: number): void {
    if (typeof total === "number") this.total = total;
    for (const run of runs) {
      if (!isRun(run)) continue;
      const held = this.byId.get(run.id);
      if (!held || !isStaleUpdate(held, run)) this.byId.set(run.id, run);
    }
    this.loadedFlag = true;
    this.errorValue = null;
    this.emit(null);
  }

  subscribe(listener: RunsListener): () => void {
    this.listeners.add(listener);
    return () => this.listeners.delete(listener);
  }

  private emit(changed: Run | null): void {
    for (const l of [...this.listeners]) l(changed);
  }
}

/** `run` with the config and environment it lacks taken from `other` (the same run). */
export function withSections(run: Run, other: Run): Run {
  const config = run.config === undefined && other.config !== undefined;
  const environment = run.environment === undefined && other.environment !== undefined;
  if (!config && !environment) return run;
  return {
    ...run,
    ...(config ? { config: other.config } : {}),
    ...(environment ? { environment: other.environment } : {}),
  };
}

/** Minimal shape check for data that came over the wire. */
export function isRun(v: unknown): v is Run {
  if (typeof v !== "object" || v === null) return false;
  const r = v as Partial<Run>;
  return typeof r.id === "number" && typeof r.name === "string";
}

/** Seconds from start to end (or to now while running, or to the last sign of life). */
export function runDurationSeconds(run: Run, nowMs: number): number | null {
  const start = parseIso(run.started_at);
  if (start === null) return null;
  if (run.status === "running") return Math.max(0, (nowMs - start) / 1000);
  const end = parseIso(run.ended_at) ?? parseIso(run.last_seen_at) ?? nowMs;
  const wall = Math.max(0, (end - start) / 1000);
  // The agent's own first-step-to-last-step time: longer than the server's wall time when
  // the server saw the run only briefly (a run uploaded after an outage or offline).
  const trained = run.summary?.duration_s;
  return typeof trained === "number" && Number.isFinite(trained) ? Math.max(wall, trained) : wall;
}

/** Text and hints for one runs-table row; the DOM layer only places them. */
export interface RunRowCells {
  name: string;
  project: string;
  tags: string[];
  status: RunStatus;
  started: string;
  startedTitle: string;
  duration: string;
  steps: string;
  median: string;
  p95: string;
  inputWait: string;
  inputWaitLevel: InputWaitLevel;
  inputWaitTitle: string;
  /** Device time lost to input wait (priced when the server has a GPU-hour price). */
  lostTime: string;
  lostTimeTitle: string;
  /** The run's GPU energy (priced when the server prices a kWh), a dash without readings. */
  energy: string;
  /** What of it was burned while starved, once the split is read; "" before. */
  energyStarved: string;
  energyTitle: string;
  gpu: string;
  verdict: Verdict | null;
  verdictText: string;
  verdictTone: VerdictTone;
  verdictTitle: string;
}

export function runRowCells(
  run: Run,
  nowMs: number,
  knownVerdict?: KnownVerdict,
  settings: Price = uiSettings(),
  energy: RunEnergy | null = null,
): RunRowCells {
  const s = run.summary ?? ({} as Partial<Run["summary"]>);
  const level = inputWaitLevel(s.verdict);
  const v = runVerdict(run, knownVerdict);
  const e = energyCell(s.energy_j, energy);
  return {
    gpu: formatPercentValue(s.gpu_util_mean),
    verdict: v.verdict,
    verdictText: v.label,
    verdictTone: verdictTone(v.verdict),
    verdictTitle: v.verdict ? `${v.label}${v.derived ? ` (the ${summaryWindow(run)}'s input-wait share)` : " (now)"}` : "no verdict yet",
    name: run.name || `run ${run.id}`,
    project: run.project || MISSING,
    tags: Array.isArray(run.tags) ? run.tags.map(String) : [],
    status: run.status,
    started: formatRelativeTime(run.started_at, nowMs),
    startedTitle: formatTimestamp(run.started_at),
    duration: formatDuration(runDurationSeconds(run, nowMs)),
    steps: formatCount(s.steps),
    median: formatMs(s.step_time_ms_median),
    p95: formatMs(s.step_time_ms_p95),
    inputWait: formatInputWait(s.input_wait_share),
    inputWaitLevel: level,
    inputWaitTitle: `${summaryWindow(run)}: ${inputWaitLabel(s)}`,
    lostTime: formatLostPriced(s.lost_gpu_s, settings),
    lostTimeTitle: `${LOST_TIME_MEANS} Its steps waited ${formatDuration(s.input_wait_s)}${deviceWord(run) === "GPU" ? "" : " (no GPU seen: the device is the host)"}.`,
    energy: e.text,
    energyStarved: e.starved,
    energyTitle: e.title,
  };
}

/** Whether the run is on a GPU: GPUs listed in its environment, or GPU rows (utilization, or
 * device memory: a MIG device has no utilization of its own). */
export function hasGpuReadings(run: Run): boolean {
  const peak = run.summary?.peak_memory_bytes;
  return deviceWord(run) === "GPU" || (typeof peak === "number" && Number.isFinite(peak));
}

export type RunSortKey =
  | "name"
  | "project"
  | "status"
  | "started"
  | "duration"
  | "steps"
  | "median"
  | "p95"
  | "wait"
  | "lost"
  | "energy"
  | "gpu"
  | "verdict"
  /** The best value of the epoch metric `RunSort.metric`. */
  | "epoch";

export interface RunSort {
  key: RunSortKey;
  desc: boolean;
  /** The epoch metric sorted by (key "epoch"). */
  metric?: string;
}

export const DEFAULT_SORT: RunSort = { key: "started", desc: true };

const VERDICT_RANK: Record<Verdict, number> = {
  stalled: 0,
  highly_input_bound: 1,
  moderately_input_bound: 2,
  not_input_bound: 3,
  insufficient_data: 4,
};

function sortValue(run: Run, key: RunSortKey, nowMs: number, verdict?: KnownVerdict, metric?: string): number | string | null {
  const s = run.summary ?? ({} as Partial<Run["summary"]>);
  const num = (v: number | null | undefined) => (typeof v === "number" && Number.isFinite(v) ? v : null);
  switch (key) {
    case "name":
      return (run.name || "").toLowerCase();
    case "project":
      return (run.project || "").toLowerCase();
    case "status":
      return run.status;
    case "started":
      return parseIso(run.started_at);
    case "duration":
      return runDurationSeconds(run, nowMs);
    case "steps":
      return num(s.steps);
    case "median":
      return num(s.step_time_ms_median);
    case "p95":
      return num(s.step_time_ms_p95);
    case "wait":
      return num(s.input_wait_share);
    case "lost":
      return num(s.lost_gpu_s);
    case "energy":
      return num(s.energy_j);
    case "gpu":
      return num(s.gpu_util_mean);
    case "verdict": {
      const v = runVerdict(run, verdict).verdict;
      return v ? VERDICT_RANK[v] : null;
    }
    case "epoch":
      return metric ? bestEpochValue(run, metric) : null;
  }
}

/**
 * Runs sorted by a column. Missing values always sort last, whatever the
 * direction; ties fall back to newest first.
 */
export function sortRuns(runs: Run[], sort: RunSort, nowMs: number, verdictOf: (id: number) => KnownVerdict | undefined = () => undefined): Run[] {
  const keyed = runs.map((r) => ({ r, v: sortValue(r, sort.key, nowMs, verdictOf(r.id), sort.metric) }));
  keyed.sort((a, b) => {
    if (a.v === null && b.v === null) return compareRunsNewestFirst(a.r, b.r);
    if (a.v === null) return 1;
    if (b.v === null) return -1;
    const c = a.v < b.v ? -1 : a.v > b.v ? 1 : 0;
    if (c !== 0) return sort.desc ? -c : c;
    return compareRunsNewestFirst(a.r, b.r);
  });
  return keyed.map((k) => k.r);
}

/** Clicking a column header: the same column flips direction, a new one starts in its natural order. */
export function nextSort(current: RunSort, key: RunSortKey): RunSort {
  if (current.key === key) return { ...current, desc: !current.desc };
  const descFirst: RunSortKey[] = ["started", "duration", "steps", "gpu", "wait", "lost", "energy", "median", "p95"];
  return { key, desc: descFirst.includes(key) };
}

/**
 * Clicking the epoch-metric column: the same metric flips direction, a new one
 * starts best first (highest accuracy, lowest loss).
 */
export function nextEpochSort(current: RunSort, metric: string, goal: Goal): RunSort {
  if (current.key === "epoch" && current.metric === metric) return { ...current, desc: !current.desc };
  return { key: "epoch", metric, desc: goal === "max" };
}

/** The server's `sort` for a runs-list sort by an epoch metric (`-best:val_accuracy`). */
export function serverEpochSort(sort: RunSort): string | null {
  if (sort.key !== "epoch" || !sort.metric) return null;
  return `${sort.desc ? "-" : ""}best:${sort.metric}`;
}

/** The remembered epoch-metric column and whether the list is sorted by it. */
export interface EpochColumnPref {
  metric: string;
  sort: RunSort | null;
}

export function parseEpochColumnPref(raw: string | null): EpochColumnPref | null {
  if (!raw) return null;
  try {
    const v = JSON.parse(raw) as Partial<EpochColumnPref>;
    if (typeof v?.metric !== "string" || v.metric === "") return null;
    const s = v.sort;
    const sort = s && s.key === "epoch" && s.metric === v.metric && typeof s.desc === "boolean" ? { key: "epoch" as const, metric: v.metric, desc: s.desc } : null;
    return { metric: v.metric, sort };
  } catch {
    return null;
  }
}

/**
 * Whether a run matches a free-text filter: every whitespace-separated term
 * must occur (case-insensitively) in the name, project, a tag, the status or
 * the id.
 */
export function matchesFilter(run: Run, query: string): boolean {
  const terms = query.toLowerCase().split(/\s+/).filter(Boolean);
  if (terms.length === 0) return true;
  const hay = [run.name, run.project, run.status, String(run.id), ...(run.tags ?? [])]
    .map((x) => String(x).toLowerCase());
  return terms.every((term) => hay.some((h) => h.includes(term)));
}

export interface SummaryFigure {
  key: string;
  label: string;
  value: string;
  /** Longer explanation (tooltip). */
  title?: string;
  /** Extra CSS class (input-wait level). */
  tone?: string;
}

/** The figures shown at the top of a run page. */
export function runSummaryFigures(run: Run, nowMs: number): SummaryFigure[] {
  const s = run.summary ?? ({} as Partial<Run["summary"]>);
  const level = inputWaitLevel(s.verdict);
  const covers = summaryWindow(run);
  return [
    { key: "steps", label: "Steps", value: formatCount(s.steps) },
    { key: "median", label: "Step time median", value: formatMs(s.step_time_ms_median) },
    { key: "p95", label: "Step time p95", value: formatMs(s.step_time_ms_p95) },
    {
      key: "wait",
      label: `Input wait · ${covers}`,
      value: formatInputWait(s.input_wait_share),
      title:
        `Share of step time spent blocked waiting for the next batch over the ${covers}: ${inputWaitLabel(s)}. ` +
        "A starved step also computes a little slower after the wait, so feeding it can save somewhat more.",
      tone: `wait-${level}`,
    },
    {
      key: "lost_gpu",
      label: LOST_TIME,
      value: formatLostPriced(s.lost_gpu_s, uiSettings()),
      title: `${LOST_TIME_MEANS} Its steps waited ${formatDuration(s.input_wait_s)} (all workers)${deviceWord(run) === "GPU" ? "" : "; no GPU was seen, so the device is the host"}.`,
    },
    { key: "gpu", label: "GPU util (mean)", value: formatPercentValue(s.gpu_util_mean) },
    ...gpmFigures(s),
    { key: "throughput", label: "Samples/s", value: formatRate(s.samples_per_s) },
    { key: "duration", label: "Duration", value: formatDuration(runDurationSeconds(run, nowMs)) },
    {
      key: "last_seen",
      label: "Last seen",
      value: formatRelativeTime(run.last_seen_at ?? run.ended_at, nowMs),
      title: formatTimestamp(run.last_seen_at ?? run.ended_at),
    },
  ];
}

/**
 * Flatten a config or environment object into sorted `[dotted.key, text]`
 * rows: nested plain objects become dotted keys (up to `maxDepth` levels),
 * arrays and deeper values are shown as JSON.
 */
export function flattenEntries(obj: unknown, maxDepth = 3): [string, string][] {
  const out: [string, string][] = [];
  const walk = (value: unknown, prefix: string, depth: number) => {
    if (isPlainObject(value) && depth < maxDepth && Object.keys(value).length > 0) {
      for (const [k, v] of Object.entries(value)) walk(v, prefix ? `${prefix}.${k}` : k, depth + 1);
      return;
    }
    if (prefix) out.push([prefix, formatValue(value)]);
  };
  if (isPlainObject(obj)) walk(obj, "", 0);
  return out.sort((a, b) => (a[0] < b[0] ? -1 : a[0] > b[0] ? 1 : 0));
}

function isPlainObject(v: unknown): v is Record<string, unknown> {
  return typeof v === "object" && v !== null && !Array.isArray(v);
}

/** Tags typed as "a, b c": split on commas and whitespace, trimmed, deduplicated, in order. */
export function parseTags(text: string): string[] {
  const out: string[] = [];
  for (const t of text.split(/[\s,]+/)) {
    const tag = t.trim();
    if (tag && !out.includes(tag)) out.push(tag);
  }
  return out;
}

/** Check a run edit before sending it (`PATCH /runs/{id}`): name 1..200 chars, ≤100 tags of ≤100 chars, notes ≤10,000. */
export function validateRunEdit(edit: { name: string; tags: string; notes: string }): {
  patch: { name: string; tags: string[]; notes: string } | null;
  errors: Partial<Record<"name" | "tags" | "notes", string>>;
} {
  const errors: Partial<Record<"name" | "tags" | "notes", string>> = {};
  const name = edit.name.trim();
  if (!name) errors.name = "A run needs a name.";
  else if (name.length > 200) errors.name = "At most 200 characters.";
  const tags = parseTags(edit.tags);
  if (tags.length > 100) errors.tags = "At most 100 tags.";
  else if (tags.some((t) => t.length > 100)) errors.tags = "A tag has at most 100 characters.";
  if (edit.notes.length > 10_000) errors.notes = "At most 10,000 characters.";
  return Object.keys(errors).length > 0 ? { patch: null, errors } : { patch: { name, tags, notes: edit.notes }, errors };
}
