// The browser's set of runs: loaded from `GET /runs`, kept current by `run`
// messages from the live socket. Pure (no DOM), so it is unit-tested.

import {
  MISSING,
  formatCount,
  formatDuration,
  formatMs,
  formatPercent,
  formatPercentValue,
  formatRate,
  formatRelativeTime,
  formatTimestamp,
  formatValue,
  inputWaitLabel,
  inputWaitLevel,
  parseIso,
  type InputWaitLevel,
} from "./format";
import type { Run, RunStatus } from "./types";

const TERMINAL: ReadonlySet<RunStatus> = new Set(["finished", "failed", "interrupted"]);

export function isTerminal(status: RunStatus): boolean {
  return TERMINAL.has(status);
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
  private loadedFlag = false;
  private errorValue: string | null = null;

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

  /** Insert or replace one run; returns false when the update was stale. */
  upsert(run: Run): boolean {
    if (!isRun(run)) return false;
    const held = this.byId.get(run.id);
    if (held && isStaleUpdate(held, run)) return false;
    this.byId.set(run.id, run);
    this.emit(run);
    return true;
  }

  /** Merge a full list (from REST); newer copies already held are kept. */
  replaceAll(runs: Run[]): void {
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
  let end = parseIso(run.ended_at);
  if (end === null) end = run.status === "running" ? nowMs : (parseIso(run.last_seen_at) ?? nowMs);
  return Math.max(0, (end - start) / 1000);
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
}

export function runRowCells(run: Run, nowMs: number): RunRowCells {
  const s = run.summary ?? ({} as Partial<Run["summary"]>);
  const level = inputWaitLevel(s.input_wait_share);
  return {
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
    inputWait: formatPercent(s.input_wait_share),
    inputWaitLevel: level,
    inputWaitTitle: inputWaitLabel(level),
  };
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
  const level = inputWaitLevel(s.input_wait_share);
  return [
    { key: "steps", label: "Steps", value: formatCount(s.steps) },
    { key: "median", label: "Step time median", value: formatMs(s.step_time_ms_median) },
    { key: "p95", label: "Step time p95", value: formatMs(s.step_time_ms_p95) },
    {
      key: "wait",
      label: "Input wait",
      value: formatPercent(s.input_wait_share),
      title: `Share of step time spent waiting for input: ${inputWaitLabel(level)}`,
      tone: `wait-${level}`,
    },
    { key: "gpu", label: "GPU util (mean)", value: formatPercentValue(s.gpu_util_mean) },
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
