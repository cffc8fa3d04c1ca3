// The workers of a profiler capture (a distributed run): each worker's row of the
// run page's Profiler panel, and which worker starves the job. Pure, unit-tested; drawn by
// views/run/profilePanel.ts.

import type { components } from "../../api/api.gen";
import { formatInputWait, formatMs, MISSING } from "../../app/format";

/** `ProfilePublic.workers[]` (backend/stoker_server/core/models.py ProfileWorker). */
export type ProfileWorker = components["schemas"]["ProfileWorker"];

/** Whose input share picked the starving worker: the profiler's, else Stoker's. */
export type ShareSource = "profiler" | "stoker";

export interface StarvingWorker {
  rank: number;
  share: number;
  source: ShareSource;
}

function finite(v: unknown): v is number {
  return typeof v === "number" && Number.isFinite(v);
}

function shareOf(w: ProfileWorker, source: ShareSource): number | null {
  const v = source === "profiler" ? w.input_share_profiler : w.input_share_stoker;
  return finite(v) ? v : null;
}

/**
 * The worker with the highest input share: in a synchronous job the others wait for it, so
 * it is the one that starves the job. Compared on the profiler's shares when every worker
 * that delivered a trace has one, else on Stoker's; null with fewer than two such workers or
 * when no single worker is highest (a tie says nothing about which one starves).
 */
export function starvingWorker(workers: readonly ProfileWorker[]): StarvingWorker | null {
  const ready = workers.filter((w) => w.status === "ready");
  if (ready.length < 2) return null;
  for (const source of ["profiler", "stoker"] as const) {
    const shares = ready.map((w) => shareOf(w, source));
    if (shares.some((s) => s === null)) continue;
    const values = shares as number[];
    const top = Math.max(...values);
    const at = values.filter((s) => s === top);
    if (at.length !== 1) return null;
    return { rank: ready[values.indexOf(top)]!.rank, share: top, source };
  }
  return null;
}

/** The profiler's share minus Stoker's, signed, in percentage points: "+2.1 pts". */
export function formatShareDifference(profiler: number | null | undefined, stoker: number | null | undefined): string {
  if (!finite(profiler) || !finite(stoker)) return MISSING;
  const points = (profiler - stoker) * 100;
  const text = Math.abs(points).toFixed(1);
  if (text === "0.0") return "0.0 pts";
  return `${points > 0 ? "+" : "−"}${text} pts`;
}

/** A trace's size: "812 B", "512 KiB", "3.4 MiB". */
export function formatTraceBytes(bytes: number | null | undefined): string {
  if (!finite(bytes) || bytes < 0) return MISSING;
  if (bytes < 1024) return `${bytes} B`;
  if (bytes < 1024 * 1024) return `${Math.round(bytes / 1024)} KiB`;
  return `${(bytes / (1024 * 1024)).toFixed(1)} MiB`;
}

/** The capture's overhead on a worker's median step, signed ("+4.2%"), with its details. */
export function formatOverhead(overhead: Record<string, unknown> | undefined): { text: string; title: string } {
  const o = overhead ?? {};
  const ms = (key: string) => (finite(o[key]) ? (o[key] as number) * 1000 : null);
  const parts: string[] = [];
  if (ms("step_s_during") !== null || ms("step_s_before") !== null) {
    parts.push(`median step ${formatMs(ms("step_s_during"))} during vs ${formatMs(ms("step_s_before"))} before`);
  }
  if (ms("start_s") !== null || ms("stop_s") !== null) parts.push(`profiler start ${formatMs(ms("start_s"))}, stop ${formatMs(ms("stop_s"))}`);
  if (!finite(o.ratio)) return { text: MISSING, title: parts.join("; ") };
  const pct = (o.ratio - 1) * 100;
  const digits = Math.abs(pct).toFixed(1);
  const text = digits === "0.0" ? "0.0%" : `${pct > 0 ? "+" : "−"}${digits}%`;
  return { text, title: parts.join("; ") };
}

/** The steps a worker captured: "20 (steps 10–29)"; the ones xprof analysed in the title. */
export function formatCapturedSteps(w: ProfileWorker): { text: string; title: string } {
  const first = w.first_step;
  const last = w.last_step;
  const range = w.analysis?.step_range;
  const analysed =
    Array.isArray(range) && range.length === 2 && finite(range[0]) && finite(range[1]) ? `xprof analysed steps ${range[0]}–${range[1]}` : "";
  if (!finite(first) || !finite(last) || last < first) return { text: MISSING, title: analysed };
  return { text: `${last - first + 1} (${first}–${last})`, title: analysed };
}

/** A worker's status as shown: "lost" when the server presumed it gone, upload progress. */
export function workerStatusText(w: ProfileWorker): string {
  if (w.status === "failed") return w.lost ? "lost" : "failed";
  if (w.status === "uploading" && finite(w.trace_bytes) && w.trace_bytes > 0 && finite(w.received_bytes)) {
    return `uploading ${Math.min(100, Math.floor((w.received_bytes / w.trace_bytes) * 100))}%`;
  }
  return w.status;
}

/** The message a failed or lost worker shows (null for the others). */
export function workerProblem(w: ProfileWorker): string | null {
  if (w.status !== "failed") return null;
  if (w.error) return w.error;
  return w.lost ? "No word from this worker's agent: presumed gone (a late trace is still accepted)." : "The capture failed.";
}

/** One worker's figures as shown in the Profiler panel's workers table. */
export interface WorkerRow {
  rank: number;
  status: string;
  problem: string | null;
  steps: { text: string; title: string };
  profilerShare: string;
  stokerShare: string;
  difference: string;
  overhead: { text: string; title: string };
  trace: string;
  /** Whether its trace can be downloaded (ready and not evicted). */
  downloadable: boolean;
  starving: boolean;
}

export function workerRows(workers: readonly ProfileWorker[], traceEvicted: boolean): WorkerRow[] {
  const starving = starvingWorker(workers);
  return [...workers]
    .sort((a, b) => a.rank - b.rank)
    .map((w) => {
      const ready = w.status === "ready";
      const stoker = shareOf(w, "stoker");
      return {
        rank: w.rank,
        status: workerStatusText(w),
        problem: workerProblem(w),
        steps: formatCapturedSteps(w),
        profilerShare: formatInputWait(w.input_share_profiler),
        // Stoker's share is filled in once the captured steps of that rank are stored.
        stokerShare: ready && stoker === null && w.analysis?.available ? "waiting…" : formatInputWait(stoker),
        difference: formatShareDifference(w.input_share_profiler, w.input_share_stoker),
        overhead: formatOverhead(w.overhead),
        trace: formatTraceBytes(w.trace_bytes),
        downloadable: ready && !traceEvicted,
        starving: starving?.rank === w.rank,
      };
    });
}

/** Whether a worker is still waiting for Stoker's share of its captured steps. */
export function waitingForWorkerShares(workers: readonly ProfileWorker[]): boolean {
  return workers.some((w) => w.status === "ready" && w.analysis?.available === true && shareOf(w, "stoker") === null);
}

/**
 * A live status change carries no Stoker shares (they are filled in on read): keep the ones
 * already held for the same profile, by rank.
 */
export function keepWorkerShares(fresh: readonly ProfileWorker[], held: readonly ProfileWorker[]): ProfileWorker[] {
  const byRank = new Map(held.map((w) => [w.rank, w]));
  return fresh.map((w) => {
    const old = byRank.get(w.rank);
    return w.input_share_stoker == null && old?.input_share_stoker != null ? { ...w, input_share_stoker: old.input_share_stoker } : w;
  });
}
