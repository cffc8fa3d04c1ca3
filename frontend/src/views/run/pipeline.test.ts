import { describe, expect, it } from "vitest";
import {
  addedBy,
  bufferFill,
  capacityBarPct,
  capacityRatio,
  capacityText,
  formatRate,
  laterIdle,
  parsePipeline,
  pipelineLegend,
  stageLabel,
  writtenAt,
} from "./pipeline";

const stage = {
  position: 1, kind: "parallel_map", name: "ParallelMapV2", function: "decode", parallelism: 2,
  ms_per_element: 3, elements: 320, buffered: 1, buffer_size: 4, bytes_per_element: 16,
};

describe("pipeline view figures", () => {
  it("parses an answer and refuses other shapes", () => {
    expect(parsePipeline({ run_id: 1, t: null, source: "unavailable", stages: [], bottleneck: null })?.source).toBe("unavailable");
    expect(parsePipeline({ source: "guess", stages: [] })).toBeNull();
    expect(parsePipeline({ source: "autotune_model" })).toBeNull();
    expect(parsePipeline(null)).toBeNull();
  });

  it("labels stages by kind and function", () => {
    expect(stageLabel(stage)).toBe("parallel map 'decode'");
    expect(stageLabel({ kind: "prefetch", function: null })).toBe("prefetch");
  });

  it("shows the stages Stoker or tf.data added as theirs, not the user's", () => {
    const stokers = { ...stage, kind: "prefetch", name: "stoker:Prefetch", function: null };
    expect(addedBy(stokers)).toBe("Stoker");
    expect(stageLabel(stokers)).toBe("prefetch (added by Stoker, not in your pipeline)");
    expect(stageLabel({ ...stokers, name: "tf.data:Prefetch" })).toBe(
      "prefetch (added by tf.data, not in your pipeline)",
    );
    expect(addedBy(stage)).toBeNull();
    expect(stageLabel({ ...stage, name: "ParallelMapV2 (autotune)" })).toBe("parallel map 'decode'");
  });

  it("fills buffers between 0 and 1, none without a buffer", () => {
    expect(bufferFill(stage)).toBe(0.25);
    expect(bufferFill({ ...stage, buffered: 9 })).toBe(1);
    expect(bufferFill({ ...stage, buffer_size: null })).toBeNull();
  });

  it("compares capacity with demand on a log bar", () => {
    expect(capacityRatio(10, 50)).toBe(0.2);
    expect(capacityRatio(null, 50)).toBeNull();
    expect(capacityRatio(10, 0)).toBeNull();
    expect(capacityBarPct(1)).toBeCloseTo(100 / 3);
    expect(capacityBarPct(100)).toBe(100);
    expect(capacityBarPct(0.001)).toBe(2);
    expect(capacityBarPct(null)).toBe(0);
  });

  it("formats rates", () => {
    expect(formatRate(10.4)).toBe("10.4 steps/s");
    expect(formatRate(250)).toBe("250 steps/s");
    expect(formatRate(1500)).toBe("1.5k steps/s");
    expect(formatRate(null)).toBe("—");
  });

  it("says where a stage's functions are written", () => {
    const functions = [
      { name: "fast_normalize", file: "/src/train.py", line: 10, calls_python: false },
      { name: "slow_decode", file: "C:\\src\\train.py", line: 14, calls_python: true },
      { name: "<lambda>", file: null, line: null },
    ];
    expect(writtenAt({ functions })).toBe("fast_normalize at train.py:10, slow_decode at train.py:14 (calls Python)");
    expect(writtenAt({})).toBe("");
  });
});

describe("what the pipeline view says when it has no figure", () => {
  it("says a stage with no element yet is not timed, and one before it not known, rather than a dash", () => {
    expect(capacityText({ elements: 0, ms_per_element: null }, null)).toBe("not timed yet");
    expect(capacityText({ elements: 854, ms_per_element: 0.003 }, null, true)).toBe("not known yet");
    expect(capacityText({ elements: 854, ms_per_element: 0.003 }, null)).toBe("—");
    expect(capacityText({ elements: 854, ms_per_element: 0.003 }, 12.5, true)).toBe("12.5 steps/s");
    const stages = [{ position: 0, elements: 856 }, { position: 1, elements: 0 }];
    expect(laterIdle(stages, 0)).toBe(true);
    expect(laterIdle(stages, 1)).toBe(false);
  });

  it("explains the bars, or their absence when the steps' pace is unknown", () => {
    expect(pipelineLegend(null)).toMatch(/^No bars for this read: it came before enough steps/);
    expect(pipelineLegend(599)).toMatch(/against the 599 steps\/s the steps would take when fed \(the mark\)/);
    expect(pipelineLegend(599, true)).toMatch(/Stages still filling \(a shuffle buffer, a cache\) and those after them get their figures from a later read/);
    expect(pipelineLegend(599)).not.toMatch(/still filling/);
  });
});
