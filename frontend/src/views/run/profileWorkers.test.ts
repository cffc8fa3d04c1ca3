import { describe, expect, it } from "vitest";
import {
  formatCapturedSteps,
  formatOverhead,
  formatShareDifference,
  formatTraceBytes,
  keepWorkerShares,
  type ProfileWorker,
  starvingWorker,
  waitingForWorkerShares,
  workerProblem,
  workerRows,
  workerStatusText,
} from "./profileWorkers";

function worker(rank: number, more: Partial<ProfileWorker> = {}): ProfileWorker {
  return {
    rank,
    status: "ready",
    error: null,
    first_step: 10,
    last_step: 29,
    overhead: { ratio: 1.04, step_s_before: 0.012, step_s_during: 0.0125, start_s: 0.2, stop_s: 0.9 },
    trace_bytes: 600 * 1024,
    received_bytes: 600 * 1024,
    lost: false,
    analysis: { available: true, step_range: [11, 28] },
    input_share_profiler: 0.2,
    input_share_stoker: 0.18,
    ...more,
  };
}

describe("the worker that starves the job", () => {
  it("is the one with the highest profiler input share", () => {
    const ws = [worker(0, { input_share_profiler: 0.1 }), worker(1, { input_share_profiler: 0.9, input_share_stoker: 0.05 }), worker(2)];
    expect(starvingWorker(ws)).toEqual({ rank: 1, share: 0.9, source: "profiler" });
  });

  it("is picked on Stoker's shares when a worker has no profiler share", () => {
    const ws = [worker(0, { input_share_profiler: null, input_share_stoker: 0.3 }), worker(1, { input_share_profiler: 0.9, input_share_stoker: 0.1 })];
    expect(starvingWorker(ws)).toEqual({ rank: 0, share: 0.3, source: "stoker" });
  });

  it("leaves out failed and in-progress workers", () => {
    const ws = [worker(0, { input_share_profiler: 0.1 }), worker(1, { status: "failed", input_share_profiler: 0.9 }), worker(2, { input_share_profiler: 0.3 })];
    expect(starvingWorker(ws)?.rank).toBe(2);
    expect(starvingWorker([worker(0), worker(1, { status: "uploading" })])).toBeNull();
  });

  it("is nobody with a tie, a single worker or no shares at all", () => {
    expect(starvingWorker([worker(0), worker(1)])).toBeNull(); // both 20 %
    expect(starvingWorker([worker(0)])).toBeNull();
    expect(starvingWorker([worker(0, { input_share_profiler: null, input_share_stoker: null }), worker(1)])).toBeNull();
  });
});

describe("a worker's figures", () => {
  it("signs the difference of the shares in points", () => {
    expect(formatShareDifference(0.2, 0.18)).toBe("+2.0 pts");
    expect(formatShareDifference(0.1, 0.125)).toBe("−2.5 pts");
    expect(formatShareDifference(0.5, 0.50001)).toBe("0.0 pts");
    expect(formatShareDifference(null, 0.1)).toBe("—");
  });

  it("sizes a trace in B, KiB and MiB", () => {
    expect(formatTraceBytes(812)).toBe("812 B");
    expect(formatTraceBytes(600 * 1024)).toBe("600 KiB");
    expect(formatTraceBytes(3.4 * 1024 * 1024)).toBe("3.4 MiB");
    expect(formatTraceBytes(null)).toBe("—");
  });

  it("shows the overhead on the median step, signed, with its details", () => {
    const o = formatOverhead({ ratio: 1.042, step_s_before: 0.012, step_s_during: 0.0125, start_s: 0.2, stop_s: 0.9 });
    expect(o.text).toBe("+4.2%");
    expect(o.title).toBe("median step 12.5 ms during vs 12.0 ms before; profiler start 200 ms, stop 900 ms");
    expect(formatOverhead({ ratio: 0.97 }).text).toBe("−3.0%");
    expect(formatOverhead({}).text).toBe("—");
    expect(formatOverhead(undefined)).toEqual({ text: "—", title: "" });
  });

  it("counts the captured steps, with xprof's analysed range in the title", () => {
    expect(formatCapturedSteps(worker(0))).toEqual({ text: "20 (10–29)", title: "xprof analysed steps 11–28" });
    expect(formatCapturedSteps(worker(0, { first_step: null, analysis: {} }))).toEqual({ text: "—", title: "" });
  });

  it("names a lost worker and its upload progress", () => {
    expect(workerStatusText(worker(0, { status: "failed", lost: true }))).toBe("lost");
    expect(workerStatusText(worker(0, { status: "failed" }))).toBe("failed");
    expect(workerStatusText(worker(0, { status: "uploading", trace_bytes: 1000, received_bytes: 455 }))).toBe("uploading 45%");
    expect(workerStatusText(worker(0, { status: "capturing" }))).toBe("capturing");
  });

  it("gives a failed or lost worker's message", () => {
    expect(workerProblem(worker(0))).toBeNull();
    expect(workerProblem(worker(0, { status: "failed", error: "profile failed: no profiler" }))).toBe("profile failed: no profiler");
    expect(workerProblem(worker(0, { status: "failed", lost: true, error: null }))).toMatch(/presumed gone/);
  });
});

describe("the workers table", () => {
  it("lists the workers by rank, marks the starving one, offers ready traces", () => {
    const ws = [
      worker(2, { status: "failed", error: "<b>boom</b>", trace_bytes: null }),
      worker(1, { input_share_profiler: 0.6, input_share_stoker: 0.55 }),
      worker(0, { input_share_stoker: null }),
    ];
    const rows = workerRows(ws, false);
    expect(rows.map((r) => r.rank)).toEqual([0, 1, 2]);
    expect(rows.map((r) => r.starving)).toEqual([false, true, false]);
    expect(rows.map((r) => r.downloadable)).toEqual([true, true, false]);
    expect(rows[0]!.stokerShare).toBe("waiting…");
    expect(rows[1]).toMatchObject({ profilerShare: "60.0 %", stokerShare: "55.0 %", difference: "+5.0 pts", trace: "600 KiB" });
    expect(rows[2]!.problem).toBe("<b>boom</b>");
    expect(workerRows(ws, true).some((r) => r.downloadable)).toBe(false);
  });

  it("waits for Stoker's share of a ready worker only", () => {
    expect(waitingForWorkerShares([worker(0), worker(1, { input_share_stoker: null })])).toBe(true);
    expect(waitingForWorkerShares([worker(0), worker(1, { status: "failed", input_share_stoker: null })])).toBe(false);
  });

  it("keeps Stoker's shares held when a live status change has none", () => {
    const held = [worker(0, { input_share_stoker: 0.3 }), worker(1, { input_share_stoker: 0.4 })];
    const fresh = [worker(0, { input_share_stoker: null }), worker(1, { input_share_stoker: 0.45 }), worker(2, { input_share_stoker: null })];
    expect(keepWorkerShares(fresh, held).map((w) => w.input_share_stoker)).toEqual([0.3, 0.45, null]);
  });
});
