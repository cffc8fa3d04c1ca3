import { describe, expect, it } from "vitest";
import type { ZoomRange } from "../charts/liveChart";
import { SeriesResource, type SeriesSource } from "./seriesResource";

// A series of numbers standing for x positions; the "server" holds 0..99.
type Xs = number[];
const ALL: Xs = Array.from({ length: 100 }, (_, i) => i);

function source(calls: string[], fail = false): SeriesSource<Xs> {
  return {
    fetchOverview: async (width) => {
      calls.push(`overview ${width}`);
      if (fail) throw new Error("down");
      return ALL.filter((x) => x % 10 === 0);
    },
    fetchNewer: (held) => {
      const last = held[held.length - 1];
      if (last === undefined) return null;
      calls.push(`after ${last}`);
      return Promise.resolve([last + 1, last + 2]);
    },
    merge: (held, newer) => [...held, ...newer],
    wantsDetail: (held, r) => held.filter((x) => x >= r.min && x <= r.max).length < 5,
    fetchDetail: async (r) => {
      calls.push(`detail ${r.min}-${r.max}`);
      return ALL.filter((x) => x >= r.min && x <= r.max);
    },
    splice: (base, detail, r) => [...base.filter((x) => x < r.min), ...detail, ...base.filter((x) => x > r.max)],
  };
}

function resource(calls: string[], fail = false) {
  let changes = 0;
  const ctrl = new AbortController();
  const r = new SeriesResource(source(calls, fail), { widthPx: () => 640, signal: ctrl.signal, onChange: () => changes++ });
  return { r, ctrl, changes: () => changes };
}

describe("SeriesResource", () => {
  it("loads the overview at the chart's width, then only what is newer", async () => {
    const calls: string[] = [];
    const { r, changes } = resource(calls);
    await r.load(true);
    expect(r.state).toBe("ok");
    expect(r.data).toEqual([0, 10, 20, 30, 40, 50, 60, 70, 80, 90]);
    await r.load(false);
    expect(calls).toEqual(["overview 640", "after 90"]);
    expect(r.held!.slice(-3)).toEqual([90, 91, 92]);
    expect(changes()).toBe(2);
  });

  it("refines a zoom into sparse data and drops the detail on reset", async () => {
    const calls: string[] = [];
    const { r } = resource(calls);
    await r.load(true);
    const zoom: ZoomRange = { min: 20, max: 30 };
    r.setZoom(zoom);
    await r.refine();
    expect(r.refined).toBe(zoom);
    expect(r.data).toEqual([0, 10, ...ALL.slice(20, 31), 40, 50, 60, 70, 80, 90]);
    expect(r.held).toHaveLength(10);
    r.setZoom(null);
    await r.refine();
    expect(r.refined).toBeNull();
    expect(r.data).toHaveLength(10);
    // A range the overview already shows in detail is not fetched again.
    r.setZoom({ min: 0, max: 90 });
    await r.refine();
    expect(calls.filter((c) => c.startsWith("detail"))).toEqual(["detail 20-30"]);
  });

  it("drops a detail answer for a zoom that has changed meanwhile", async () => {
    const calls: string[] = [];
    const { r } = resource(calls);
    await r.load(true);
    r.setZoom({ min: 20, max: 30 });
    const pending = r.refine();
    r.setZoom({ min: 50, max: 60 });
    await pending;
    expect(r.refined).toBeNull();
  });

  it("reports a failed load as an error and ignores answers after abort", async () => {
    const calls: string[] = [];
    const failing = resource(calls, true);
    await failing.r.load(true);
    expect(failing.r.state).toBe("error");
    expect(failing.changes()).toBe(1);
    const aborted = resource(calls);
    aborted.ctrl.abort();
    await aborted.r.load(true);
    expect(aborted.r.state).toBe("loading");
    expect(aborted.changes()).toBe(0);
  });
});
