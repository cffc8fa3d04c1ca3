import { describe, expect, it } from "vitest";
import { AlertsStore, alertFromMessage, describeRule, emptyRuleForm, ruleToForm, neverFired, sortAlerts, splitCleared, upsertAlert, validateRuleForm } from "./alerts";
import type { Alert, AlertRule } from "./types";

const form = (over: Partial<ReturnType<typeof emptyRuleForm>> = {}) => ({ ...emptyRuleForm(), name: "low util", ...over });

describe("validateRuleForm", () => {
  it("accepts the defaults with a name and converts to server units", () => {
    const { rule, errors } = validateRuleForm(form({ metric: "input_wait_share", comparison: ">=", threshold: "20", for_s: "60" }));
    expect(errors).toEqual({});
    expect(rule).toMatchObject({ name: "low util", metric: "input_wait_share", comparison: ">=", threshold: 0.2, for_s: 60, scope: "all", enabled: true });
    expect(rule!.channels).toEqual([{ type: "browser" }]);
  });
  it("converts step time from ms to seconds", () => {
    expect(validateRuleForm(form({ metric: "step_time", threshold: "250" })).rule!.threshold).toBe(0.25);
  });
  it("names every invalid field", () => {
    const { rule, errors } = validateRuleForm(form({ name: " ", threshold: "abc", for_s: "-1", metric: "nope" }));
    expect(rule).toBeNull();
    expect(Object.keys(errors).sort()).toEqual(["for_s", "metric", "name", "threshold"]);
  });
  it("checks the threshold against the metric's range", () => {
    expect(validateRuleForm(form({ metric: "gpu_util", threshold: "120" })).errors.threshold).toBe("At most 100 %.");
  });
  it("requires a project or a run id for narrower scopes", () => {
    expect(validateRuleForm(form({ scope: "project", project: "" })).errors.project).toBeTruthy();
    expect(validateRuleForm(form({ scope: "run", run_id: "1.5" })).errors.run_id).toBeTruthy();
    const ok = validateRuleForm(form({ scope: "run", run_id: "7" })).rule!;
    expect(ok.run_id).toBe(7);
    expect(ok.project).toBeNull();
  });
  it("validates an optional webhook URL and adds it as a channel", () => {
    expect(validateRuleForm(form({ webhook_url: "javascript:alert(1)" })).errors.webhook_url).toBeTruthy();
    const r = validateRuleForm(form({ webhook_url: "https://hooks.example.com/x", webhook_format: "slack" })).rule!;
    expect(r.channels).toEqual([{ type: "browser" }, { type: "webhook", url: "https://hooks.example.com/x", format: "slack" }]);
  });
});

const rule: AlertRule = {
  id: 3,
  name: "starving",
  metric: "input_wait_share",
  comparison: ">=",
  threshold: 0.2,
  for_s: 60,
  scope: "project",
  project: "cifar",
  run_id: null,
  enabled: false,
  channels: [{ type: "browser" }, { type: "webhook", url: "https://h.example/x", format: "json" }],
  builtin: null,
  created_at: "2024-05-01T12:00:00Z",
  updated_at: "2024-05-01T12:00:00Z",
};

describe("ruleToForm", () => {
  it("shows server values in form units and round-trips", () => {
    const f = ruleToForm(rule);
    expect(f.threshold).toBe("20");
    expect(f.webhook_url).toBe("https://h.example/x");
    expect(f.enabled).toBe(false);
    expect(validateRuleForm(f).rule).toMatchObject({ threshold: 0.2, scope: "project", project: "cifar", enabled: false });
  });
});

describe("describeRule", () => {
  it("reads as a sentence in display units", () => {
    expect(describeRule(rule)).toBe("Input-wait share >= 20 % for 60 s · project cifar");
    expect(describeRule({ ...rule, metric: "gpu_util", comparison: "<", threshold: 70, for_s: 0, scope: "all" })).toBe("GPU utilization < 70 % · all runs");
  });
});

const alert = (over: Partial<Alert>): Alert => ({
  id: 1,
  rule_id: 1,
  run_id: 1,
  rule_name: "r",
  state: "firing",
  value: null,
  message: "",
  started_at: "2024-05-01T12:00:00Z",
  fired_at: null,
  resolved_at: null,
  deliveries: [],
  ...over,
});

describe("alerts ordering and updates", () => {
  it("puts firing first, then pending, then resolved, newest first", () => {
    const list = sortAlerts([
      alert({ id: 1, state: "resolved", resolved_at: "2024-05-01T13:00:00Z" }),
      alert({ id: 2, state: "firing", fired_at: "2024-05-01T12:10:00Z" }),
      alert({ id: 3, state: "firing", fired_at: "2024-05-01T12:20:00Z" }),
      alert({ id: 4, state: "pending" }),
    ]);
    expect(list.map((a) => a.id)).toEqual([3, 2, 4, 1]);
  });
  it("reports an alert as newly firing only on the transition", () => {
    let r = upsertAlert([], alert({ id: 5, state: "pending" }));
    expect(r.newlyFiring).toBe(false);
    r = upsertAlert(r.list, alert({ id: 5, state: "firing" }));
    expect(r.newlyFiring).toBe(true);
    r = upsertAlert(r.list, alert({ id: 5, state: "firing", value: 3 }));
    expect(r.newlyFiring).toBe(false);
    expect(r.list).toHaveLength(1);
  });
  it("reads live messages with the alert nested or inline", () => {
    expect(alertFromMessage({ type: "alert", alert: alert({ id: 9 }) })?.id).toBe(9);
    expect(alertFromMessage({ type: "alert", id: 4, run_id: 2, state: "resolved", rule_name: "x" })?.state).toBe("resolved");
    expect(alertFromMessage({ type: "alert", id: 4, run_id: 2, state: "weird" })).toBeNull();
  });
  it("store counts firing alerts and filters by run", () => {
    const s = new AlertsStore();
    s.replaceAll([alert({ id: 1, run_id: 1 }), alert({ id: 2, run_id: 2, state: "resolved" })]);
    expect(s.firingCount()).toBe(1);
    expect(s.forRun(2).map((a) => a.id)).toEqual([2]);
    const seen: boolean[] = [];
    s.subscribe((_a, newly) => seen.push(newly));
    s.upsert(alert({ id: 2, run_id: 2, state: "firing" }));
    expect(seen).toEqual([true]);
    expect(s.firingCount()).toBe(2);
  });
});

describe("alerts that never fired", () => {
  const base = { rule_id: 1, run_id: 1, rule_name: "r", value: null, message: "", started_at: "2024-05-01T12:00:00Z", deliveries: [] };
  it("keeps pending-then-cleared alerts out of firing and recent", () => {
    const fired = { ...base, id: 1, state: "resolved" as const, fired_at: "2024-05-01T12:01:00Z", resolved_at: "2024-05-01T12:02:00Z" };
    const cleared = { ...base, id: 2, state: "resolved" as const, fired_at: null, resolved_at: "2024-05-01T12:00:30Z" };
    const pending = { ...base, id: 3, state: "pending" as const, fired_at: null, resolved_at: null };
    expect(neverFired(cleared)).toBe(true);
    expect(neverFired(fired)).toBe(false);
    const { recent, cleared: gone } = splitCleared([fired, cleared, pending]);
    expect(recent.map((a) => a.id)).toEqual([1, 3]);
    expect(gone.map((a) => a.id)).toEqual([2]);
  });
});
