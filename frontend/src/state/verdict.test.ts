import { describe, expect, it } from "vitest";
import { makeRun } from "./testing";
import {
  evidenceText,
  inputWaitLabel,
  inputWaitLevel,
  parseDiagnosis,
  parseGpuFindings,
  runVerdict,
  VerdictGeneration,
  verdictHeadline,
  verdictTone,
  verdictWords,
  deviceWord,
} from "./verdict";

describe("parseDiagnosis", () => {
  it("reads the diagnosis shape with object evidence", () => {
    const d = parseDiagnosis({
      run_id: 3,
      verdict: "highly_input_bound",
      input_wait_share: 0.63,
      source: "measured",
      window_s: 60,
      steps_in_window: 400,
      evidence: [{ key: "input_wait_share", value: 0.63, text: "63 % of step time waiting" }, "plain"],
      advice: ["prefetch"],
    });
    expect(d).toMatchObject({ verdict: "highly_input_bound", input_wait_share: 0.63, source: "measured", run_id: 3 });
    expect(d!.evidence.map(evidenceText)).toEqual(["63 % of step time waiting", "plain"]);
  });
  it("rejects unknown verdicts and fills defaults", () => {
    expect(parseDiagnosis({ verdict: "hungry" })).toBeNull();
    expect(parseDiagnosis({ verdict: "stalled", source: "fallback" })).toMatchObject({ input_wait_share: null, source: "fallback", evidence: [], advice: [] });
  });
});

describe("verdict labels", () => {
  it("gives each verdict a tone, a badge and a headline", () => {
    expect(verdictTone("highly_input_bound")).toBe("bad");
    expect(verdictTone("moderately_input_bound")).toBe("warn");
    expect(verdictTone("not_input_bound")).toBe("ok");
    expect(verdictTone("insufficient_data")).toBe("info");
    // The words are the server's, as sent: the UI holds no copy of them.
    expect(verdictWords("the server's words")).toBe("the server's words");
    expect(verdictWords("")).toBe("—");
    expect(verdictWords(undefined)).toBe("—");
    expect(verdictHeadline("highly_input_bound", "highly input-bound", "device")).toBe("Highly input-bound: the device waits for data");
    expect(verdictHeadline("highly_input_bound", "starved!", "GPU")).toBe("Starved!: the GPU waits for data");
    expect(deviceWord({ environment: {}, summary: { gpu_util_mean: null } })).toBe("device");
    expect(deviceWord({ environment: { gpus: [{ name: "H100" }] }, summary: {} })).toBe("GPU");
    expect(verdictHeadline("stalled", "stalled")).toBe("Stalled: steps stopped while the process is alive");
    expect(evidenceText({ key: "k", value: 1, text: "" })).toBe("k: 1");
  });
});

describe("runVerdict", () => {
  it("prefers a pushed verdict, then takes the summary's verdict from the server", () => {
    // The level is the server's: a share of 0.3 with a summary verdict of "moderately" stays moderately.
    const run = makeRun({ summary: { ...makeRun().summary, input_wait_share: 0.3, verdict: "moderately_input_bound", verdict_label: "moderately (server)" } });
    const stalled = { verdict: "stalled" as const, label: "stalled (server)" };
    expect(runVerdict({ ...run, status: "running" }, stalled)).toEqual({ verdict: "stalled", label: "stalled (server)", derived: false });
    expect(runVerdict({ ...run, status: "finished" }, stalled)).toEqual({ verdict: "moderately_input_bound", label: "moderately (server)", derived: true });
    expect(runVerdict(run, undefined)).toEqual({ verdict: "moderately_input_bound", label: "moderately (server)", derived: true });
    expect(runVerdict({ ...run, summary: { ...run.summary, verdict: null, verdict_label: null } }, undefined)).toEqual({ verdict: null, label: "—", derived: true });
  });
});

describe("inputWaitLevel", () => {
  it("is the level of the server's verdict, not of thresholds in the UI", () => {
    expect(inputWaitLevel("highly_input_bound")).toBe("high");
    expect(inputWaitLevel("moderately_input_bound")).toBe("moderate");
    expect(inputWaitLevel("not_input_bound")).toBe("low");
    expect(inputWaitLevel(null)).toBe("unknown");
    expect(inputWaitLevel("stalled")).toBe("unknown");
    expect(inputWaitLabel({ verdict: "highly_input_bound", verdict_label: "highly (server)" })).toBe("highly (server)");
    expect(inputWaitLabel({ verdict: null, verdict_label: null })).toBe("input wait not measured");
  });
});

describe("VerdictGeneration", () => {
  it("accepts a REST answer when no live verdict arrived while it was in flight", () => {
    const g = new VerdictGeneration();
    const token = g.begin();
    expect(g.accepts(token)).toBe(true);
  });

  it("drops a REST answer whose request started before the last live verdict", () => {
    const g = new VerdictGeneration();
    const token = g.begin();
    g.live(); // a newer verdict arrived on the socket while the request was in flight
    expect(g.accepts(token)).toBe(false);
    // A request started after that live verdict is current again.
    const later = g.begin();
    expect(g.accepts(later)).toBe(true);
    g.live();
    g.live();
    expect(g.accepts(later)).toBe(false);
    expect(g.accepts(g.begin())).toBe(true);
  });
});

describe("parseGpuFindings", () => {
  it("keeps well-formed findings and drops the rest", () => {
    const finding = { key: "launch_bound", title: "Busy but under-used", evidence: [{ key: "sm_util_mean", value: 18, text: "18 % of SMs busy" }], advice: ["Use larger batches"] };
    expect(parseGpuFindings({ gpu_findings: [finding, { key: 1 }, null] })).toEqual([finding]);
    expect(parseGpuFindings({ verdict: "not_input_bound" })).toEqual([]);
    expect(parseGpuFindings(null)).toEqual([]);
  });
});
