// Hand-written shapes the OpenAPI schema does not describe: the live WebSocket's
// messages, and the UI's normalized form of the sample and metric series
// (the wire answers themselves are DeviceSeries, HostSeries and MetricSeries in api.gen.ts).

import type { Alert, Diagnosis, Run, RunEvent, StepsResponse } from "./types";

/** Columnar step data as the live `steps` message carries it (times in seconds). */
export type StepColumns = Pick<StepsResponse, "step" | "t" | "dur" | "wait"> & {
  /** Bucket minimum of `dur` (present only when downsampled). */
  dur_min?: number[] | null;
  /** Bucket maximum of `dur` (present only when downsampled). */
  dur_max?: number[] | null;
};

/** Messages the server sends on `/api/v1/live`. */
export type LiveMessage =
  | { type: "run"; run: Run }
  | { type: "steps"; run_id: number; data: StepColumns; rank?: number }
  | { type: "notice"; message: string }
  | { type: "verdict"; run_id: number; diagnosis: Diagnosis }
  | { type: "alert"; alert: Alert }
  | { type: "event"; event: RunEvent }
  | { type: "run_deleted"; run_id: number }
  /** A profiler capture changed status; `profile` as GET /runs/{id}/profiles/{pid}. */
  | { type: "profile"; run_id: number; profile: Record<string, unknown> };

/** Messages the browser sends on `/api/v1/live`. */
export type ClientMessage = { type: "subscribe"; run_id: number } | { type: "unsubscribe"; run_id: number };

// ---- the answers of `GET /runs/{id}/samples`, `/host`, `/metrics` as state/samples.ts normalizes them ----

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
