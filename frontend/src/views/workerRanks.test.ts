import { describe, expect, it } from "vitest";
import type { WorkerSummary } from "../api/types";
import { slowestRank, workerLabel } from "./workerRanks";

function worker(rank: number, wait: number | null, median: number | null, host = `host-${rank}`): WorkerSummary {
  return { rank, host, pid: 100 + rank, status: "running", steps: 10, step_time_ms_median: median, input_wait_share: wait, samples_per_s: null };
}

describe("slowestRank", () => {
  it("names the worker waiting longest on input (synchronous steps are alike)", () => {
    expect(slowestRank([worker(0, 0.02, 50), worker(1, 0.41, 50), worker(2, 0.03, 50)])).toBe(1);
  });
  it("falls back to the longest median step without input wait", () => {
    expect(slowestRank([worker(0, null, 40), worker(1, null, 90), worker(2, 0, 60)])).toBe(1);
  });
  it("names nobody for a single worker", () => {
    expect(slowestRank([worker(0, 0.5, 50)])).toBeNull();
    expect(slowestRank([])).toBeNull();
  });
});

describe("workerLabel", () => {
  it("says rank, host and whether it is the slowest", () => {
    expect(workerLabel(worker(3, 0.4, 50, "host-b"), 3)).toBe("worker 3 (host-b) · slowest");
    expect(workerLabel(worker(0, 0, 50, ""), 3)).toBe("worker 0");
  });
});
