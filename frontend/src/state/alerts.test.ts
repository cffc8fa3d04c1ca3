import { describe, expect, it } from "vitest";
import { AlertsStore, alertFromMessage, describeRule, emptyRuleForm, ruleToForm, neverFired, sortAlerts, splitCleared, upsertAlert, validateRuleForm } from "./alerts";
import type { Alert, AlertRule } from "../api/types";

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
    // Written as the alerts themselves write the rule: "input wait … (rule: ≥ 20.0 % for 60 s)".
    expect(describeRule(rule)).toBe("Input wait ≥ 20.0 % for 60 s · project cifar");
    expect(describeRule({ ...rule, metric: "step_time", comparison: ">", threshold: 0.5 })).toBe("Step time > 500 ms for 60 s · project cifar");
    expect(describeRule({ ...rule, metric: "gpu_util", comparison: "<", threshold: 70, for_s: 0, scope: "all" })).toBe("GPU utilization < 70 % · all runs");
  });
  it("says a disk rule watches the server, in percent", () => {
    const disk = { ...rule, metric: "disk_free_share" as const, comparison: "<" as const, threshold: 0.05, for_s: 60, scope: "all" as const };
    expect(describeRule(disk)).toBe("Free disk space (data directory) < 5 % for 60 s · the server");
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

describe("run ends, metrics, throughput and the profile action", () => {
  it("sends a NaN-loss rule with its metric name, defaulting to loss", () => {
    const named = validateRuleForm(form({ metric: "metric_nonfinite", comparison: ">=", threshold: "1", metric_name: "val_loss" })).rule!;
    expect(named).toMatchObject({ metric: "metric_nonfinite", metric_name: "val_loss", baseline_run_id: null, profile_steps: null });
    expect(validateRuleForm(form({ metric: "metric_rise", threshold: "2" })).rule!.metric_name).toBe("loss");
    expect(validateRuleForm(form({ metric: "gpu_util", metric_name: "loss" })).rule!.metric_name).toBeNull();
  });
  it("converts a throughput drop from % and keeps its baseline", () => {
    const own = validateRuleForm(form({ metric: "throughput_drop", threshold: "30", baseline_s: "90" })).rule!;
    expect(own).toMatchObject({ threshold: 0.3, baseline_s: 90, baseline_run_id: null });
    const other = validateRuleForm(form({ metric: "throughput_drop", threshold: "30", baseline_run_id: "4" })).rule!;
    expect(other.baseline_run_id).toBe(4);
    expect(validateRuleForm(form({ metric: "throughput_drop", baseline_run_id: "x" })).errors.baseline_run_id).toBeTruthy();
    expect(validateRuleForm(form({ metric: "throughput_drop", baseline_s: "-3" })).errors.baseline_s).toBeTruthy();
  });
  it("carries the profile action and refuses a bad step count", () => {
    expect(validateRuleForm(form({ profile_steps: "20" })).rule!.profile_steps).toBe(20);
    expect(validateRuleForm(form({ profile_steps: "0" })).errors.profile_steps).toBeTruthy();
    expect(validateRuleForm(form({ profile_steps: "2.5" })).errors.profile_steps).toBeTruthy();
  });
  it("describes the new rules, their baseline and their action", () => {
    const base = { comparison: ">=" as const, for_s: 0, scope: "all" as const, project: null, run_id: null };
    expect(describeRule({ ...base, metric: "run_failed", threshold: 1 })).toBe("Run failed or its process died (1 = yes) ≥ 1 · all runs");
    expect(describeRule({ ...base, metric: "metric_nonfinite", threshold: 1, metric_name: "val_loss" })).toContain("(val_loss)");
    expect(describeRule({ ...base, metric: "throughput_drop", threshold: 0.3, baseline_run_id: 4 })).toContain("vs run #4 ≥ 30 %");
    expect(describeRule({ ...base, metric: "throughput_drop", threshold: 0.3, baseline_s: 60 })).toContain("vs its first 60 s");
    expect(describeRule({ ...base, metric: "input_wait_share", threshold: 0.5, profile_steps: 20 })).toMatch(/then profile 20 steps$/);
  });
  it("round-trips a rule's new fields through the form", () => {
    const rule = {
      id: 3, builtin: null, name: "drop", metric: "throughput_drop", comparison: ">=", threshold: 0.3, for_s: 0, keep_firing_for_s: 0,
      only_while_stepping: true, scope: "all", project: null, run_id: null, channels: [{ type: "browser" }], enabled: true,
      metric_name: null, baseline_run_id: 9, baseline_s: null, profile_steps: 10, created_at: "", updated_at: "",
    } as unknown as AlertRule;
    const f = ruleToForm(rule);
    expect([f.threshold, f.baseline_run_id, f.profile_steps]).toEqual(["30", "9", "10"]);
    expect(validateRuleForm(f).rule).toMatchObject({ baseline_run_id: 9, profile_steps: 10, threshold: 0.3 });
  });
  it("keeps the profile an alert captured from a live message", () => {
    const alert = alertFromMessage({ type: "alert", alert: { id: 5, run_id: 2, state: "firing", rule_name: "starved", profile_id: 8 } });
    expect(alert!.profile_id).toBe(8);
    expect(alertFromMessage({ type: "alert", alert: { id: 5, run_id: 2, state: "firing" } })!.profile_id).toBeNull();
  });
});
