import { describe, expect, it } from "vitest";
import { makeRun } from "./testing";
import { evidenceText, parseDiagnosis, runVerdict, VerdictGeneration, verdictHeadline, verdictShort, verdictTone } from "./verdict";

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
    expect(verdictShort("not_input_bound")).toBe("fed");
    expect(verdictHeadline("stalled")).toMatch(/Stalled/);
    expect(evidenceText({ key: "k", value: 1, text: "" })).toBe("k: 1");
  });
});

describe("runVerdict", () => {
  it("prefers a pushed verdict, then derives from input wait", () => {
    const run = makeRun({ summary: { ...makeRun().summary, input_wait_share: 0.3 } });
    expect(runVerdict(run, "stalled")).toEqual({ verdict: "stalled", derived: false });
    expect(runVerdict(run, undefined)).toEqual({ verdict: "highly_input_bound", derived: true });
    expect(runVerdict({ ...run, summary: { ...run.summary, input_wait_share: null } }, undefined).verdict).toBeNull();
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
