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
  /** Highest NVML memory used on any device, bytes. */
  peak_memory_bytes?: number | null;
  /** Highest TensorFlow allocator peak on any device, bytes. */
  peak_tf_memory_bytes?: number | null;
  /** Wall-clock duration, seconds (newer servers). */
  duration_s?: number | null;
  /** Rows the agent dropped (ring buffer full). */
  dropped_rows?: number;
  /** Metric values that were NaN or Inf (a diverging loss). */
  nonfinite_metrics?: number;
  /** Steps an ended run's agent still holds in its spool; they arrive later (newer servers). */
  steps_to_upload?: number;
  /** Latest verdict, when the server keeps it with the summary. */
  verdict?: Verdict | null;
  /** Per epoch metric (`val_loss`, …): its last and best value (newer servers). */
  epoch_metrics?: Record<string, EpochMetricSummary>;
  /** Every worker (rank) of the job; `steps` above is the job's (newer servers). */
  workers?: WorkerSummary[];
}

/** One worker of a (distributed) run: where it runs, how it ended, its own steps. */
export interface WorkerSummary {
  rank: number;
  host: string;
  pid: number;
  status: RunStatus;
  steps: number;
  step_time_ms_median: number | null;
  input_wait_share: number | null;
  samples_per_s: number | null;
}

export interface EpochMetricSummary {
  last: number | null;
  last_epoch: number | null;
  best: number | null;
  best_epoch: number | null;
  /** Whether lower (`min`) or higher (`max`) is better. */
  goal: "min" | "max";
  /** Epochs recorded. */
  epochs: number;
}

export interface Run {
  id: number;
  name: string;
  project: string;
  tags: string[];
  /** Free-text notes (editable; newer servers). */
  notes?: string;
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
  | { type: "steps"; run_id: number; data: StepColumns; rank?: number }
  | { type: "notice"; message: string }
  | { type: "verdict"; run_id: number; diagnosis: Diagnosis }
  | { type: "alert"; alert: Alert }
  | { type: "event"; event: RunEvent }
  | { type: "run_deleted"; run_id: number };

// ---- diagnosis (`GET /runs/{id}/diagnosis`, live `verdict`) ----

export type Verdict =
  | "highly_input_bound"
  | "moderately_input_bound"
  | "not_input_bound"
  | "stalled"
  | "insufficient_data";

export interface Evidence {
  key: string;
  value: number | string | boolean | null;
  text: string;
}

export interface Diagnosis {
  run_id?: number;
  verdict: Verdict;
  input_wait_share: number | null;
  source: "measured" | "fallback";
  window_s?: number;
  steps_in_window?: number;
  /** Strings, or `{key, value, text}` objects (the diagnosis branch sends objects). */
  evidence: (Evidence | string)[];
  advice: string[];
}

// ---- samples (`GET /runs/{id}/samples`, `/runs/{id}/metrics`) ----

/** One timed track (one GPU of one rank, or one host), columnar, `t` in unix seconds. */
export interface SampleTrack {
  rank: number;
  /** GPU index; absent for host tracks. */
  gpu?: number;
  t: number[];
  /** Field name → values; downsampled tracks also carry `<field>_min` / `<field>_max`. */
  cols: Record<string, (number | null)[]>;
  downsampled: boolean;
  total: number | null;
}

export interface SamplesData {
  device: SampleTrack[];
  host: SampleTrack[];
}

/**
 * What a step metric's values are: Keras `fit` logs the running mean over the
 * epoch so far, a custom loop the value it logged.
 */
export type MetricAggregation = "running_mean_over_epoch" | "value";

/** One logged scalar by step. */
export interface MetricTrack {
  name: string;
  aggregation?: MetricAggregation;
  step: number[];
  value: (number | null)[];
  min: (number | null)[] | null;
  max: (number | null)[] | null;
}

// ---- compare (`GET /compare?runs=1,2`) ----

export interface CompareRun {
  id: number;
  name: string;
  project?: string;
  status?: RunStatus;
  tags?: string[];
  started_at?: string;
  ended_at?: string | null;
  summary: RunSummary;
}

export interface CompareResponse {
  runs: CompareRun[];
  /** Every epoch metric any of the runs recorded (newer servers). */
  epoch_metrics?: string[];
  /** Flattened dotted key → one value per run (in `runs` order), only keys that differ. */
  differences: {
    config: Record<string, unknown[]>;
    environment: Record<string, unknown[]>;
  };
}

// ---- alerts (`/alert-rules`, `/alerts`) ----

export type AlertMetric =
  | "gpu_util"
  | "input_wait_share"
  | "step_time"
  | "samples_per_s"
  | "memory_share"
  | "temperature"
  | "no_data"
  | "stalled"
  | "straggler_ratio";

export type Comparison = "<" | "<=" | ">" | ">=";
export type AlertScope = "all" | "project" | "run";
export type AlertState = "pending" | "firing" | "resolved";

export type AlertChannel = { type: "browser" } | { type: "webhook"; url: string; format?: "json" | "slack" };

export interface AlertRuleInput {
  name: string;
  metric: AlertMetric;
  comparison: Comparison;
  threshold: number;
  for_s: number;
  keep_firing_for_s?: number;
  only_while_stepping?: boolean;
  scope: AlertScope;
  project?: string | null;
  run_id?: number | null;
  channels?: AlertChannel[];
  enabled: boolean;
}

export interface AlertRule extends AlertRuleInput {
  id: number;
  builtin?: string | null;
  created_at?: string;
  updated_at?: string;
}

export interface Alert {
  id: number;
  rule_id: number | null;
  run_id: number;
  rule_name: string;
  state: AlertState;
  value: number | null;
  message: string;
  started_at: string;
  fired_at: string | null;
  resolved_at: string | null;
}

export interface RunEvent {
  id: number;
  run_id: number;
  at: string;
  kind: string;
  message: string;
  data?: Record<string, unknown>;
}

export interface ListPage<T> {
  data: T[];
  count: number;
}

/** Messages the browser sends on `/api/v1/live`. */
export type ClientMessage =
  | { type: "subscribe"; run_id: number }
  | { type: "unsubscribe"; run_id: number };

/** `GET /runs/{id}/starvation`: stretches of steps whose input wait reached the threshold. */
export interface StarvationResponse {
  run_id: number;
  threshold: number;
  measured_steps: number;
  starved_steps: number;
  ranges: { start: number; end: number; t_start: number; t_end: number; steps: number; wait_share: number | null }[];
}
