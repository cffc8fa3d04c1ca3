import { describe, expect, it } from "vitest";
import { Backoff } from "../api/backoff";
import { StepSync, type RetryTimers, type StepQuery } from "./stepSync";
import type { StepColumns, StepsResponse } from "../api/types";

interface Pending {
  query: StepQuery;
  resolve: (r: StepsResponse) => void;
  reject: (e: unknown) => void;
}

function cols(steps: number[]): StepColumns {
  return { step: steps, t: steps.map((s) => s * 0.1), dur: steps.map(() => 0.05), wait: steps.map(() => 0.001) };
}

function resp(steps: number[], extra: Partial<StepsResponse> = {}): StepsResponse {
  return { run_id: 1, total: steps.length, downsampled: false, ...cols(steps), ...extra };
}

const range = (a: number, b: number) => Array.from({ length: b - a + 1 }, (_, i) => a + i);

/** Let promise callbacks run. */
const settle = () => new Promise<void>((r) => setTimeout(r, 0));

function setup(opts: { onError?: (e: unknown) => boolean | void; compactAt?: number; maxPoints?: number } = {}) {
  const fetches: Pending[] = [];
  const retries: { fn: () => void; ms: number }[] = [];
  const timers: RetryTimers = {
    setTimeout: (fn, ms) => retries.push({ fn, ms }),
    clearTimeout: () => {},
  };
  let changes = 0;
  const sync = new StepSync({
    fetchSteps: (query) =>
      new Promise<StepsResponse>((resolve, reject) => fetches.push({ query, resolve, reject })),
    maxPoints: () => opts.maxPoints ?? 1600,
    onChange: () => changes++,
    timers,
    retryBackoff: new Backoff({ baseMs: 1000, jitter: 0 }),
    ...(opts.onError ? { onError: opts.onError } : {}),
    ...(opts.compactAt ? { compactAt: opts.compactAt } : {}),
  });
  return { sync, fetches, retries, changes: () => changes };
}

describe("StepSync catch-up", () => {
  it("fetches the whole run downsampled to max_points first", () => {
    const { sync, fetches } = setup({ maxPoints: 1234 });
    sync.sync();
    expect(fetches.map((f) => f.query)).toEqual([{ maxPoints: 1234 }]);
    expect(sync.phase).toBe("syncing");
  });

  it("buffers live steps during the fetch and merges only steps after the last held", async () => {
    const { sync, fetches } = setup();
    sync.sync();
    sync.onLive(cols([99, 100, 101])); // arrived while fetching; overlaps the answer
    sync.onLive(cols([102, 103]));
    fetches[0]!.resolve(resp(range(1, 100)));
    await settle();
    expect(sync.phase).toBe("live");
    expect(sync.series.step).toEqual(range(1, 103));
    expect(sync.total).toBe(103);
  });

  it("appends live steps directly once live, without duplicates", async () => {
    const { sync, fetches, changes } = setup();
    sync.sync();
    fetches[0]!.resolve(resp(range(1, 10)));
    await settle();
    const before = changes();
    sync.onLive(cols([10, 11, 12]));
    sync.onLive(cols([12]));
    expect(sync.series.step).toEqual(range(1, 12));
    expect(changes()).toBe(before + 1);
  });

  it("fills the gap after a reconnect with after_step=<last held>", async () => {
    const { sync, fetches } = setup();
    sync.sync();
    fetches[0]!.resolve(resp(range(1, 50)));
    await settle();
    // Connection lost; steps 51..60 were missed; on reconnect:
    sync.sync();
    expect(fetches[1]!.query).toEqual({ afterStep: 50 });
    sync.onLive(cols([61, 62])); // new live data after resubscribing
    fetches[1]!.resolve(resp(range(51, 61), { total: 61 }));
    await settle();
    expect(sync.series.step).toEqual(range(1, 62));
    expect(sync.phase).toBe("live");
  });

  it("keeps rows of a superseded fetch and goes live only with the newest one", async () => {
    const { sync, fetches } = setup();
    sync.sync();
    sync.sync(); // e.g. the socket opened while the first fetch was in flight
    expect(fetches.map((f) => f.query)).toEqual([{ maxPoints: 1600 }, { maxPoints: 1600 }]);
    sync.onLive(cols([21, 22]));
    fetches[0]!.resolve(resp(range(1, 19)));
    await settle();
    expect(sync.phase).toBe("syncing");
    expect(sync.series.step).toEqual(range(1, 19));
    fetches[1]!.resolve(resp(range(1, 20)));
    await settle();
    expect(sync.phase).toBe("live");
    expect(sync.series.step).toEqual(range(1, 22));
  });

  it("refetches the whole run when the first answer held no steps", async () => {
    const { sync, fetches } = setup();
    sync.sync();
    fetches[0]!.resolve(resp([]));
    await settle();
    sync.sync();
    expect(fetches[1]!.query).toEqual({ maxPoints: 1600 });
  });

  it("keeps the band of a downsampled answer and reports the server total", async () => {
    const { sync, fetches } = setup();
    sync.sync();
    fetches[0]!.resolve(
      resp([10, 20, 30], { total: 30, downsampled: true, dur_min: [0.01, 0.01, 0.01], dur_max: [0.5, 0.5, 0.5] }),
    );
    await settle();
    expect(sync.series.downsampled).toBe(true);
    expect(sync.series.maxMs).toEqual([500, 500, 500]);
    expect(sync.total).toBe(30);
    sync.onLive(cols([31]));
    expect(sync.total).toBe(31);
  });

  it("retries a failed fetch with backoff, still buffering live steps", async () => {
    const { sync, fetches, retries } = setup();
    sync.sync();
    sync.onLive(cols([5]));
    fetches[0]!.reject(new Error("network down"));
    await settle();
    expect(retries.map((r) => r.ms)).toEqual([1000]);
    expect(sync.phase).toBe("syncing");
    retries[0]!.fn();
    expect(fetches.length).toBe(2);
    fetches[1]!.resolve(resp(range(1, 4)));
    await settle();
    expect(sync.series.step).toEqual(range(1, 5));
  });

  it("stops retrying when onError says so", async () => {
    const { sync, fetches, retries } = setup({ onError: () => false });
    sync.sync();
    fetches[0]!.reject(new Error("404"));
    await settle();
    expect(retries).toEqual([]);
  });

  it("ignores answers and live data after stop", async () => {
    const { sync, fetches } = setup();
    sync.sync();
    sync.stop();
    fetches[0]!.resolve(resp(range(1, 5)));
    sync.onLive(cols([6]));
    await settle();
    expect(sync.series.step).toEqual([]);
    expect(sync.phase).toBe("stopped");
  });

  it("compacts a series that grew past the limit, keeping the last step", async () => {
    const { sync, fetches } = setup({ compactAt: 1000, maxPoints: 100 });
    sync.sync();
    fetches[0]!.resolve(resp(range(1, 900)));
    await settle();
    sync.onLive(cols(range(901, 1200)));
    expect(sync.series.step.length).toBe(200);
    expect(sync.series.step[sync.series.step.length - 1]).toBe(1200);
    sync.onLive(cols([1201]));
    expect(sync.series.step[sync.series.step.length - 1]).toBe(1201);
  });
});
