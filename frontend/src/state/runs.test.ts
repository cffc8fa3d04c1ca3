import { describe, expect, it, vi } from "vitest";
import {
  nextSort,
  sortRuns,
  RunsStore,
  compareRunsNewestFirst,
  flattenEntries,
  isStaleUpdate,
  matchesFilter,
  runDurationSeconds,
  runEnded,
  runRowCells,
  runSummaryFigures,
} from "./runs";
import { makeRun } from "./testing";

const NOW = Date.UTC(2024, 4, 1, 12, 10);

describe("RunsStore", () => {
  it("lists runs newest first", () => {
    const store = new RunsStore();
    store.replaceAll([
      makeRun({ id: 1, started_at: "2024-05-01T10:00:00Z" }),
      makeRun({ id: 3, started_at: "2024-05-01T12:00:00Z" }),
      makeRun({ id: 2, started_at: "2024-05-01T11:00:00Z" }),
    ]);
    expect(store.list().map((r) => r.id)).toEqual([3, 2, 1]);
    expect(store.loaded).toBe(true);
  });

  it("adds a new run from a live message and tells listeners which one", () => {
    const store = new RunsStore();
    const seen = vi.fn();
    store.subscribe(seen);
    const run = makeRun({ id: 9 });
    expect(store.upsert(run)).toBe(true);
    expect(store.get(9)).toBe(run);
    expect(seen).toHaveBeenCalledWith(run);
  });

  it("replaces a run when a status or summary update arrives", () => {
    const store = new RunsStore();
    store.upsert(makeRun({ id: 1 }));
    const done = makeRun({ id: 1, status: "finished", summary: { ...makeRun().summary, steps: 500 } });
    store.upsert(done);
    expect(store.get(1)?.status).toBe("finished");
    expect(store.get(1)?.summary.steps).toBe(500);
  });

  it("keeps a newer live copy when an older REST list arrives afterwards", () => {
    const store = new RunsStore();
    store.upsert(makeRun({ id: 1, status: "finished", summary: { ...makeRun().summary, steps: 500 } }));
    store.replaceAll([makeRun({ id: 1, status: "running" })]);
    expect(store.get(1)?.status).toBe("finished");
  });

  it("keeps the config and environment a live message leaves out", () => {
    const store = new RunsStore();
    store.upsert(makeRun({ id: 1, config: { lr: 0.1 }, environment: { gpu: "H100" }, summary: { ...makeRun().summary, steps: 10 } }));
    const live = { ...makeRun({ id: 1, summary: { ...makeRun().summary, steps: 50 } }) } as Partial<ReturnType<typeof makeRun>>;
    delete live.config;
    delete live.environment;
    expect(store.upsert(live as ReturnType<typeof makeRun>)).toBe(true);
    expect(store.get(1)?.summary.steps).toBe(50);
    expect(store.get(1)?.config).toEqual({ lr: 0.1 });
    expect(store.get(1)?.environment).toEqual({ gpu: "H100" });
  });

  it("fills a live copy's config from an older REST answer without stepping back", () => {
    const store = new RunsStore();
    const live = { ...makeRun({ id: 1, summary: { ...makeRun().summary, steps: 50 } }) } as Partial<ReturnType<typeof makeRun>>;
    delete live.config;
    store.upsert(live as ReturnType<typeof makeRun>);
    expect(store.upsert(makeRun({ id: 1, config: { lr: 0.2 }, summary: { ...makeRun().summary, steps: 10 } }))).toBe(false);
    expect(store.get(1)?.summary.steps).toBe(50);
    expect(store.get(1)?.config).toEqual({ lr: 0.2 });
  });

  it("ignores malformed live payloads", () => {
    const store = new RunsStore();
    expect(store.upsert({ nope: true } as never)).toBe(false);
    expect(store.size).toBe(0);
  });

  it("unsubscribes listeners", () => {
    const store = new RunsStore();
    const seen = vi.fn();
    const off = store.subscribe(seen);
    off();
    store.upsert(makeRun());
    expect(seen).not.toHaveBeenCalled();
  });

  it("records and clears a load error", () => {
    const store = new RunsStore();
    store.setError("HTTP 500");
    expect(store.error).toBe("HTTP 500");
    store.replaceAll([]);
    expect(store.error).toBeNull();
  });
});

describe("isStaleUpdate", () => {
  it("treats a running copy of a finished run as stale", () => {
    expect(isStaleUpdate(makeRun({ status: "failed" }), makeRun({ status: "running" }))).toBe(true);
  });
  it("treats an earlier last_seen_at as stale", () => {
    expect(
      isStaleUpdate(makeRun({ last_seen_at: "2024-05-01T12:05:00Z" }), makeRun({ last_seen_at: "2024-05-01T12:04:00Z" })),
    ).toBe(true);
  });
  it("accepts a later or equal state", () => {
    expect(isStaleUpdate(makeRun(), makeRun({ status: "finished" }))).toBe(false);
    expect(isStaleUpdate(makeRun(), makeRun())).toBe(false);
  });
});

describe("compareRunsNewestFirst", () => {
  it("breaks ties on start time by id", () => {
    const a = makeRun({ id: 1 });
    const b = makeRun({ id: 2 });
    expect([a, b].sort(compareRunsNewestFirst).map((r) => r.id)).toEqual([2, 1]);
  });
});

describe("runDurationSeconds", () => {
  it("runs to now while running and to ended_at once ended", () => {
    expect(runDurationSeconds(makeRun(), NOW)).toBe(600);
    expect(runDurationSeconds(makeRun({ status: "finished", ended_at: "2024-05-01T12:01:00Z" }), NOW)).toBe(60);
  });
  it("uses last_seen_at for an ended run without ended_at", () => {
    expect(runDurationSeconds(makeRun({ status: "interrupted", ended_at: null }), NOW)).toBe(300);
  });
  it("uses the training's own duration for a run uploaded after it ended", () => {
    const uploaded = makeRun({
      status: "finished",
      started_at: "2024-05-01T12:05:00Z",
      ended_at: "2024-05-01T12:05:01Z",
      last_seen_at: "2024-05-01T12:05:01Z",
    });
    uploaded.summary = { ...uploaded.summary, duration_s: 3600 };
    expect(runDurationSeconds(uploaded, NOW)).toBe(3600);
    const live = makeRun({ status: "finished", ended_at: "2024-05-01T12:01:00Z" });
    live.summary = { ...live.summary, duration_s: 42 };
    expect(runDurationSeconds(live, NOW)).toBe(60);
  });
});

describe("runRowCells", () => {
  it("formats the summary for the runs table", () => {
    const c = runRowCells(makeRun(), NOW);
    expect(c).toMatchObject({
      name: "bs256-prefetch",
      project: "cifar10",
      tags: ["baseline"],
      status: "running",
      started: "10 min ago",
      duration: "10m 00s",
      steps: "100",
      median: "42.1 ms",
      p95: "80.5 ms",
      inputWait: "25.0 %",
      inputWaitLevel: "high",
    });
  });
  it("shows em dashes for a run that has no summary figures yet", () => {
    const c = runRowCells(
      makeRun({
        summary: {
          steps: 0,
          step_time_ms_median: null,
          step_time_ms_p95: null,
          input_wait_share: null,
          gpu_util_mean: null,
          samples_per_s: null,
          verdict: null,
          verdict_label: null,
        },
      }),
      NOW,
    );
    expect([c.median, c.p95, c.inputWait]).toEqual(["—", "—", "—"]);
    expect(c.inputWaitLevel).toBe("unknown");
  });
  it("shows the device time lost to input wait, priced when a price is set", () => {
    const run = makeRun({ summary: { ...makeRun().summary, input_wait_s: 900, lost_gpu_s: 3600 } });
    expect(runRowCells(run, NOW, undefined, { gpu_hour_price: null, currency: "$" }).lostTime).toBe("1.00 h");
    expect(runRowCells(run, NOW, undefined, { gpu_hour_price: 3, currency: "$" }).lostTime).toBe("1.00 h · $3.00");
  });
  it("sorts by lost device time, costliest first on the first click", () => {
    const runs = [10, 7200, 300].map((lost, i) => makeRun({ id: i + 1, summary: { ...makeRun().summary, lost_gpu_s: lost } }));
    const sort = nextSort({ key: "started", desc: true }, "lost");
    expect(sort).toEqual({ key: "lost", desc: true });
    expect(sortRuns(runs, sort, NOW).map((r) => r.id)).toEqual([2, 3, 1]);
  });
  it("shows the lost device time of a run without a GPU too: its host is the device", () => {
    // The list once showed a dash here while the run page showed 1.5 min (issue 38).
    const noGpu = makeRun({ id: 2, summary: { ...makeRun().summary, gpu_util_mean: null, input_wait_s: 90, lost_gpu_s: 90 } });
    const c = runRowCells(noGpu, NOW, undefined, { gpu_hour_price: null, currency: "$" });
    expect(c.lostTime).toBe("1.5 min");
    expect(c.lostTimeTitle).toMatch(/^Device time lost to input starvation.*Its steps waited 1m 30s \(no GPU seen: the device is the host\)\.$/);
    const onGpu = makeRun({ id: 1, environment: { gpus: [{ name: "H100" }] }, summary: { ...makeRun().summary, lost_gpu_s: 10 } });
    expect(runRowCells(onGpu, NOW).lostTimeTitle).not.toMatch(/no GPU seen/);
    expect(sortRuns([onGpu, noGpu], { key: "lost", desc: true }, NOW).map((r) => r.id)).toEqual([2, 1]);
  });
  it("shows the run's GPU energy and what was burned while starved, sorted most first", () => {
    const split = {
      run_id: 1, total_j: 7.2e6, starved_j: 1.8e6, computing_j: 5.0e6, other_j: 0.4e6, total_kwh: 2, starved_kwh: 0.5,
      integrated: false, price_per_kwh: 0.5, currency: "€", total_cost: 1, starved_cost: 0.25, gpus: [],
    };
    const run = makeRun({ summary: { ...makeRun().summary, energy_j: 7.2e6 } });
    const c = runRowCells(run, NOW, undefined, undefined, split);
    expect([c.energy, c.energyStarved]).toEqual(["2.00 kWh · €1.00", "starved 0.50 kWh (25 %) · €0.25"]);
    expect(runRowCells(run, NOW).energy).toBe("2.00 kWh");
    expect(runRowCells(makeRun(), NOW).energy).toBe("—");
    const runs = [3.6e6, null, 7.2e6].map((j, i) => makeRun({ id: i + 1, summary: { ...makeRun().summary, energy_j: j } }));
    const sort = nextSort({ key: "started", desc: true }, "energy");
    expect(sort).toEqual({ key: "energy", desc: true });
    expect(sortRuns(runs, sort, NOW).map((r) => r.id)).toEqual([3, 1, 2]);
  });
  it("names an unnamed run by its id", () => {
    expect(runRowCells(makeRun({ id: 5, name: "" }), NOW).name).toBe("run 5");
  });
});

describe("runSummaryFigures", () => {
  it("lists the run page figures in order", () => {
    const figs = runSummaryFigures(makeRun(), NOW);
    expect(figs.map((f) => f.key)).toEqual(["steps", "median", "p95", "wait", "lost_gpu", "gpu", "throughput", "duration", "last_seen"]);
    expect(figs.find((f) => f.key === "wait")?.tone).toBe("wait-high");
    // The figure is time blocked on input; the tooltip says feeding the step can save more.
    expect(figs.find((f) => f.key === "wait")?.title).toMatch(/blocked waiting.*somewhat more/);
    expect(figs.find((f) => f.key === "gpu")?.value).toBe("64 %");
    expect(figs.find((f) => f.key === "throughput")?.value).toBe("6,100");
  });
});

describe("matchesFilter", () => {
  const run = makeRun({ id: 12, name: "ResNet-50 bs256", project: "imagenet", tags: ["amp", "xla"] });
  it("matches every term against name, project, tags, status and id", () => {
    expect(matchesFilter(run, "")).toBe(true);
    expect(matchesFilter(run, "resnet")).toBe(true);
    expect(matchesFilter(run, "imagenet xla")).toBe(true);
    expect(matchesFilter(run, "running")).toBe(true);
    expect(matchesFilter(run, "12")).toBe(true);
    expect(matchesFilter(run, "resnet cifar")).toBe(false);
  });
});

describe("flattenEntries", () => {
  it("flattens nested objects into sorted dotted keys", () => {
    expect(
      flattenEntries({ optimizer: { name: "adam", lr: 0.001 }, batch_size: 256, layers: [64, 64], empty: {} }),
    ).toEqual([
      ["batch_size", "256"],
      ["empty", "{}"],
      ["layers", "[64,64]"],
      ["optimizer.lr", "0.001"],
      ["optimizer.name", "adam"],
    ]);
  });
  it("returns nothing for a non-object", () => {
    expect(flattenEntries(null)).toEqual([]);
    expect(flattenEntries([1, 2])).toEqual([]);
  });
  it("stops at the depth limit and shows deeper values as JSON", () => {
    expect(flattenEntries({ a: { b: { c: 1 } } }, 2)).toEqual([["a.b", JSON.stringify({ c: 1 })]]);
  });
});


describe("sortRuns", () => {
  const now = Date.parse("2024-05-01T13:00:00Z");
  const a = makeRun({ id: 1, name: "b", summary: { ...makeRun().summary, gpu_util_mean: 50, input_wait_share: 0.3 } });
  const b = makeRun({ id: 2, name: "a", summary: { ...makeRun().summary, gpu_util_mean: null, input_wait_share: 0.01, verdict: "not_input_bound" } });
  const c = makeRun({ id: 3, name: "c", summary: { ...makeRun().summary, gpu_util_mean: 90, input_wait_share: null, verdict: null } });
  it("sorts by a column in either direction with missing values last", () => {
    expect(sortRuns([a, b, c], { key: "gpu", desc: true }, now).map((r) => r.id)).toEqual([3, 1, 2]);
    expect(sortRuns([a, b, c], { key: "gpu", desc: false }, now).map((r) => r.id)).toEqual([1, 3, 2]);
    expect(sortRuns([a, b, c], { key: "name", desc: false }, now).map((r) => r.id)).toEqual([2, 1, 3]);
  });
  it("sorts verdicts worst first, using pushed verdicts", () => {
    expect(sortRuns([b, a, c], { key: "verdict", desc: false }, now).map((r) => r.id)).toEqual([1, 2, 3]);
    expect(sortRuns([b, a, c], { key: "verdict", desc: false }, now, (id) => (id === 2 ? { verdict: "stalled", label: "stalled" } : undefined)).map((r) => r.id)).toEqual([2, 1, 3]);
  });
  it("flips the direction on the same column and starts numbers descending", () => {
    expect(nextSort({ key: "name", desc: false }, "name")).toEqual({ key: "name", desc: true });
    expect(nextSort({ key: "name", desc: false }, "gpu")).toEqual({ key: "gpu", desc: true });
    expect(nextSort({ key: "gpu", desc: true }, "project")).toEqual({ key: "project", desc: false });
  });
});

describe("runRowCells verdict and GPU", () => {
  it("shows mean GPU utilization and a derived verdict", () => {
    const c = runRowCells(makeRun(), Date.parse("2024-05-01T13:00:00Z"));
    expect(c.gpu).toBe("64 %");
    expect(c.verdict).toBe("highly_input_bound");
    expect(c.verdictTitle).toMatch(/whole run/);
    expect(c.verdictText).toBe("highly input-bound");
    // One figure, one word: a pushed window verdict does not replace the whole run's beside
    // the whole run's figure; only a running run's "stalled" does.
    expect(runRowCells(makeRun(), 0, { verdict: "not_input_bound", label: "not input-bound" }).verdictText).toBe("highly input-bound");
    expect(runRowCells(makeRun({ status: "running" }), 0, { verdict: "stalled", label: "stalled" }).verdictText).toBe("stalled");
  });
});

describe("RunsStore verdicts", () => {
  it("keeps pushed verdicts and tells listeners about the run", () => {
    const store = new RunsStore();
    store.replaceAll([makeRun({ id: 4 })]);
    const seen: (number | null)[] = [];
    store.subscribe((r) => seen.push(r ? r.id : null));
    store.setVerdict(4, { verdict: "stalled", label: "stalled" });
    store.setVerdict(4, { verdict: "stalled", label: "stalled" });
    expect(store.verdictOf(4)).toEqual({ verdict: "stalled", label: "stalled" });
    expect(seen).toEqual([4]);
  });
});

import { parseTags, validateRunEdit } from "./runs";

describe("run edits", () => {
  it("splits tags on commas and spaces, once each", () => {
    expect(parseTags(" a, b  c,a ,, ")).toEqual(["a", "b", "c"]);
  });
  it("validates name, tags and notes", () => {
    expect(validateRunEdit({ name: " x ", tags: "t1 t2", notes: "n" })).toEqual({ patch: { name: "x", tags: ["t1", "t2"], notes: "n" }, errors: {} });
    const bad = validateRunEdit({ name: " ", tags: "y".repeat(101), notes: "" });
    expect(bad.patch).toBeNull();
    expect(Object.keys(bad.errors).sort()).toEqual(["name", "tags"]);
  });
});

describe("runEnded", () => {
  it("is true only when a running run stops", () => {
    expect(runEnded("running", "finished")).toBe(true);
    expect(runEnded("running", "failed")).toBe(true);
    expect(runEnded("running", "interrupted")).toBe(true);
    expect(runEnded("running", "running")).toBe(false);
    expect(runEnded("finished", "finished")).toBe(false);
    // A page opened on a finished run loads everything anyway: no transition.
    expect(runEnded(null, "finished")).toBe(false);
    expect(runEnded(undefined, "finished")).toBe(false);
    expect(runEnded("running", undefined)).toBe(false);
  });
});
