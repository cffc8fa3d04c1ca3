import { describe, expect, it } from "vitest";
import { epochSpec, metricLabel } from "../charts/chartSpecs";
import { compareRows } from "./compare";
import {
  baseMetric,
  bestEpochValue,
  defaultEpochMetric,
  epochCell,
  epochColumns,
  epochCompareMetrics,
  epochGoal,
  epochMetricNames,
  epochSignature,
  formatEpochValue,
  normalizeEpochMetrics,
  overlayEpochChart,
  runEpochCharts,
} from "./epochs";
import { nextEpochSort, parseEpochColumnPref, serverEpochSort, sortRuns } from "./runs";
import { normalizeMetrics } from "./samples";
import { makeCompareRun, makeRun } from "./testing";
import type { CompareRun, EpochMetricSummary, Run } from "../api/types";

const entry = (best: number | null, goal: "min" | "max", last = best): EpochMetricSummary => ({
  best, best_epoch: 1, last, last_epoch: 2, goal, epochs: 3,
});

const response = {
  run_id: 1,
  names: ["loss"],
  epoch_names: ["loss", "val_loss"],
  series: [
    { name: "loss", axis: "step", aggregation: "running_mean_over_epoch", total: 2, downsampled: false, step: [0, 1], value: [1, 0.9] },
    { name: "loss", axis: "epoch", total: 3, downsampled: false, epoch: [2, 0, 1], step: [30, 10, 20], value: [0.5, 0.9, 0.7] },
    { name: "val_loss", axis: "epoch", total: 3, downsampled: false, epoch: [0, 1, 2], step: [10, 20, 30], value: [1.0, null, 0.8] },
  ],
};

describe("normalizeEpochMetrics", () => {
  it("keeps only epoch series, in epoch order, nulls kept", () => {
    const tracks = normalizeEpochMetrics(response);
    expect(tracks.map((t) => t.name)).toEqual(["loss", "val_loss"]);
    expect(tracks[0]).toEqual({ name: "loss", epoch: [0, 1, 2], step: [10, 20, 30], value: [0.9, 0.7, 0.5] });
    expect(tracks[1]!.value).toEqual([1.0, null, 0.8]);
    expect(normalizeEpochMetrics({ series: "nope" })).toEqual([]);
    expect(normalizeEpochMetrics(null)).toEqual([]);
  });
  it("leaves epoch series off the step metrics and labels Keras's running means", () => {
    const steps = normalizeMetrics(response);
    expect(steps.map((t) => t.name)).toEqual(["loss"]);
    expect(steps[0]!.aggregation).toBe("running_mean_over_epoch");
    expect(metricLabel(steps[0]!)).toBe("loss (running mean over the epoch)");
    expect(metricLabel({ name: "loss", aggregation: "value", step: [], value: [], min: null, max: null })).toBe("loss");
  });
});

describe("runEpochCharts", () => {
  it("puts train and val of one metric on one chart, loss first, learning rate last", () => {
    const t = (name: string) => ({ name, epoch: [0], step: [10], value: [1] });
    const charts = runEpochCharts([t("val_accuracy"), t("learning_rate"), t("accuracy"), t("val_loss"), t("loss"), t("evaluate_loss")]);
    expect(charts.map((c) => c.key)).toEqual(["loss", "accuracy", "learning_rate"]);
    expect(charts[0]!.lines.map((l) => [l.label, l.dashed])).toEqual([["loss", false], ["val_loss", true], ["evaluate_loss", true]]);
    expect(charts[1]!.title).toBe("accuracy · val_accuracy");
  });
  it("strips only Keras's prefixes", () => {
    expect(baseMetric("val_loss")).toBe("loss");
    expect(baseMetric("evaluate_accuracy")).toBe("accuracy");
    expect(baseMetric("val_")).toBe("val_");
    expect(baseMetric("validity")).toBe("validity");
  });
});

describe("epoch chart columns", () => {
  it("joins runs on the epoch axis; a run without the metric draws nothing", () => {
    const chart = overlayEpochChart("val_loss", [
      { label: "a", track: { name: "val_loss", epoch: [0, 1, 2], step: [1, 2, 3], value: [0.9, 0.8, 0.7] } },
      { label: "b", track: { name: "val_loss", epoch: [0, 1], step: [1, 2], value: [0.95, 0.6] } },
      { label: "c", track: null },
    ]);
    expect(epochColumns(chart)).toEqual([[0, 1, 2], [0.9, 0.8, 0.7], [0.95, 0.6, null], [null, null, null]]);
  });
  it("builds uPlot options with an epoch x axis and one series per line", () => {
    const chart = runEpochCharts(normalizeEpochMetrics(response))[0]!;
    const palette = { text: "#000", grid: "#eee", axis: "#999", font: "12px sans-serif" } as never;
    const opts = epochSpec().options(chart, { width: 400, height: 200 }, { palette, colors: ["#111111", "#222222"] });
    expect(opts.series.map((s) => s.label)).toEqual(["epoch", "loss", "val_loss"]);
    expect(opts.series[2]!.dash).toEqual([6, 3]);
  });
});

describe("epoch summaries", () => {
  const runs: CompareRun[] = [
    makeCompareRun({ id: 1, name: "a", summary: { ...makeRun({ id: 1 }).summary, epoch_metrics: { val_loss: entry(0.4, "min"), val_accuracy: entry(0.8, "max") } } }),
    makeCompareRun({ id: 2, name: "b", summary: { ...makeRun({ id: 2 }).summary, epoch_metrics: { val_loss: entry(0.3, "min"), val_accuracy: entry(0.7, "max"), loss: entry(0.2, "min") } } }),
  ];
  it("lists validation metrics first and starts overlays at val_loss", () => {
    const names = epochMetricNames(runs.map((r) => r.summary));
    expect(names).toEqual(["val_loss", "val_accuracy", "loss"]);
    expect(defaultEpochMetric(names)).toBe("val_loss");
    expect(defaultEpochMetric(["accuracy"])).toBe("accuracy");
    expect(defaultEpochMetric([])).toBeNull();
  });
  it("marks the best run of each epoch metric in the compare table", () => {
    const rows = compareRows(runs, epochCompareMetrics(runs));
    const byKey = Object.fromEntries(rows.map((r) => [r.key, r]));
    expect(byKey["epoch:val_loss"]!.better).toBe("lower");
    expect(byKey["epoch:val_loss"]!.cells.map((c) => c.best)).toEqual([false, true]);
    expect(byKey["epoch:val_accuracy"]!.cells.map((c) => c.best)).toEqual([true, false]);
    expect(byKey["epoch:loss"]!.cells.map((c) => c.text)).toEqual(["—", "0.2"]);
  });
  it("follows the server's goal, else the loss/error rule", () => {
    expect(epochGoal("val_loss", { goal: "max" })).toBe("max");
    expect(epochGoal("val_mean_squared_error")).toBe("min");
    expect(epochGoal("val_auc", null)).toBe("max");
  });
  it("changes its signature when an epoch arrives", () => {
    const before = epochSignature(runs[0]!.summary);
    const after = epochSignature({ epoch_metrics: { ...runs[0]!.summary.epoch_metrics, val_loss: { ...entry(0.4, "min"), epochs: 4 } } });
    expect(after).not.toBe(before);
    expect(epochSignature({})).toBe("");
  });
  it("formats values compactly", () => {
    expect(formatEpochValue(0.123456)).toBe("0.1235");
    expect(formatEpochValue(0.00001234)).toBe("1.23e-5");
    expect(formatEpochValue(null)).toBe("—");
  });
});

describe("runs list by an epoch metric", () => {
  const run = (id: number, best: number | null): Run => {
    const r = makeRun({ id });
    return best === null ? r : { ...r, summary: { ...r.summary, epoch_metrics: { val_accuracy: entry(best, "max") } } };
  };
  it("sorts by the best value, runs without it last in both directions", () => {
    const runs = [run(1, 0.5), run(2, null), run(3, 0.9), run(4, 0.7)];
    const desc = nextEpochSort({ key: "started", desc: true }, "val_accuracy", "max");
    expect(desc).toEqual({ key: "epoch", metric: "val_accuracy", desc: true });
    expect(sortRuns(runs, desc, 0).map((r) => r.id)).toEqual([3, 4, 1, 2]);
    const asc = nextEpochSort(desc, "val_accuracy", "max");
    expect(sortRuns(runs, asc, 0).map((r) => r.id)).toEqual([1, 4, 3, 2]);
    expect(nextEpochSort(asc, "val_loss", "min")).toEqual({ key: "epoch", metric: "val_loss", desc: false });
  });
  it("asks the server for the same order", () => {
    expect(serverEpochSort({ key: "epoch", metric: "val_accuracy", desc: true })).toBe("-best:val_accuracy");
    expect(serverEpochSort({ key: "epoch", metric: "val_loss", desc: false })).toBe("best:val_loss");
    expect(serverEpochSort({ key: "started", desc: true })).toBeNull();
  });
  it("shows the best value with when it was reached", () => {
    expect(epochCell(run(1, 0.5), "val_accuracy")).toEqual({
      text: "0.5",
      title: "best val_accuracy (highest) 0.5 at epoch 1; last 0.5 at epoch 2",
    });
    expect(epochCell(run(2, null), "val_accuracy").text).toBe("—");
    expect(bestEpochValue(run(3, 0.9), "val_accuracy")).toBe(0.9);
  });
  it("reads the remembered column back, refusing garbage", () => {
    const sort = { key: "epoch", metric: "val_accuracy", desc: true };
    expect(parseEpochColumnPref(JSON.stringify({ metric: "val_accuracy", sort }))).toEqual({ metric: "val_accuracy", sort });
    expect(parseEpochColumnPref(JSON.stringify({ metric: "val_loss", sort }))).toEqual({ metric: "val_loss", sort: null });
    expect(parseEpochColumnPref("{")).toBeNull();
    expect(parseEpochColumnPref(JSON.stringify({ metric: 3 }))).toBeNull();
    expect(parseEpochColumnPref(null)).toBeNull();
  });
});
