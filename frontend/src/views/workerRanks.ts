// The workers of a distributed run: which one is slowest, and how each one is
// labelled. Pure, unit-tested; drawn by views/workerCharts.

import type { WorkerSummary } from "../api/types";

/**
 * The rank of the worker that holds the job back: in a synchronous job every
 * worker takes the same step time, so the one waiting longest on input is the
 * slow one; without input wait, the one with the longest median step.
 */
export function slowestRank(workers: WorkerSummary[]): number | null {
  if (workers.length < 2) return null;
  const key = (w: WorkerSummary): [number, number] => [w.input_wait_share ?? 0, w.step_time_ms_median ?? 0];
  let slowest = workers[0]!;
  for (const w of workers.slice(1)) {
    const [a, b] = [key(w), key(slowest)];
    if (a[0] > b[0] || (a[0] === b[0] && a[1] > b[1])) slowest = w;
  }
  return slowest.rank;
}

export function workerLabel(w: WorkerSummary, slowest: number | null): string {
  const host = w.host ? ` (${w.host})` : "";
  return `worker ${w.rank}${host}${w.rank === slowest ? " · slowest" : ""}`;
}
