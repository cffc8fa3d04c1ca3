// Test helpers shared by the unit tests (not part of the app bundle).

import type { CompareRun, Run } from "../api/types";

/** A run as `GET /compare` lists it (the summary and identity of a Run). */
export function makeCompareRun(overrides: Partial<Run> = {}): CompareRun {
  const { id, name, project, status, tags, started_at, ended_at, summary } = makeRun(overrides);
  return { id, name, project: project ?? "", status, tags: tags ?? [], started_at, ended_at, summary };
}

export function makeRun(overrides: Partial<Run> = {}): Run {
  return {
    id: 1,
    name: "bs256-prefetch",
    project: "cifar10",
    tags: ["baseline"],
    status: "running",
    started_at: "2024-05-01T12:00:00Z",
    ended_at: null,
    last_seen_at: "2024-05-01T12:05:00Z",
    config: { batch_size: 256 },
    environment: {},
    summary: {
      steps: 100,
      step_time_ms_median: 42.1,
      step_time_ms_p95: 80.5,
      input_wait_share: 0.25,
      gpu_util_mean: 64,
      samples_per_s: 6100,
      verdict: "highly_input_bound",
      verdict_label: "highly input-bound",
    },
    ...overrides,
  };
}
