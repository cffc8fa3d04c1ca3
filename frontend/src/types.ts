// Shapes of the public Stoker API (`/api/v1`), as the backend serves them.

export type RunStatus = "running" | "finished" | "failed" | "interrupted";

export interface RunSummary {
  steps: number;
  step_time_ms_median: number | null;
  step_time_ms_p95: number | null;
  /** Share of step time spent waiting for input, 0..1. */
  input_wait_share: number | null;
  /** Mean device utilization, 0..100. */
  gpu_util_mean: number | null;
  samples_per_s: number | null;
}

export interface Run {
  id: number;
  name: string;
  project: string;
  tags: string[];
  status: RunStatus;
  started_at: string;
  ended_at: string | null;
  last_seen_at: string | null;
  config: Record<string, unknown>;
  environment: Record<string, unknown>;
  summary: RunSummary;
}

export interface RunsPage {
  data: Run[];
  count: number;
}

/** Columnar step data: times in seconds, as the wire carries them. */
export interface StepColumns {
  step: number[];
  t: number[];
  dur: number[];
  wait: (number | null)[];
  /** Bucket minimum of `dur` (present only when downsampled). */
  dur_min?: number[];
  /** Bucket maximum of `dur` (present only when downsampled). */
  dur_max?: number[];
}

export interface StepsResponse extends StepColumns {
  run_id: number;
  total: number;
  downsampled: boolean;
}

/** Messages the server sends on `/api/v1/live`. */
export type LiveMessage =
  | { type: "run"; run: Run }
  | { type: "steps"; run_id: number; data: StepColumns }
  | { type: "notice"; message: string };

/** Messages the browser sends on `/api/v1/live`. */
export type ClientMessage =
  | { type: "subscribe"; run_id: number }
  | { type: "unsubscribe"; run_id: number };
