// Alert rules and alerts: metric catalogue, form validation (mirroring the
// server's rules so mistakes show before a round trip), display conversions,
// ordering, and which alerts deserve a browser notification. Pure, unit-tested.

import { formatInputWait, formatMs, formatPercentValue, formatValue, parseIso } from "../app/format";
import type { Alert, AlertMetric, AlertRule, AlertRuleInput, AlertScope, AlertState, Comparison } from "../api/types";

export interface MetricInfo {
  metric: AlertMetric;
  label: string;
  /** Unit the form shows and the user types. */
  unit: string;
  /** Server value = form value × factor. */
  factor: number;
  /** Sensible default for a new rule. */
  comparison: Comparison;
  threshold: number;
  min?: number;
  max?: number;
}

export const ALERT_METRICS: MetricInfo[] = [
  { metric: "gpu_util", label: "GPU utilization", unit: "%", factor: 1, comparison: "<", threshold: 70, min: 0, max: 100 },
  { metric: "input_wait_share", label: "Input wait", unit: "%", factor: 0.01, comparison: ">=", threshold: 20, min: 0, max: 100 },
  { metric: "step_time", label: "Step time", unit: "ms", factor: 0.001, comparison: ">", threshold: 500, min: 0 },
  { metric: "samples_per_s", label: "Throughput", unit: "samples/s", factor: 1, comparison: "<", threshold: 100, min: 0 },
  { metric: "memory_share", label: "GPU memory used", unit: "%", factor: 0.01, comparison: ">=", threshold: 95, min: 0, max: 100 },
  { metric: "temperature", label: "GPU temperature", unit: "°C", factor: 1, comparison: ">=", threshold: 85 },
  { metric: "no_data", label: "No data for", unit: "s", factor: 1, comparison: ">=", threshold: 120, min: 0 },
  { metric: "stalled", label: "Stalled (1 = yes)", unit: "", factor: 1, comparison: ">=", threshold: 1, min: 0, max: 1 },
  { metric: "straggler_ratio", label: "Straggler ratio (slowest worker / median)", unit: "×", factor: 1, comparison: ">=", threshold: 1.5, min: 1 },
  // NVML GPM (Hopper and newer): no value, so never firing, on GPUs without GPM.
  { metric: "sm_util", label: "SM active (GPM)", unit: "%", factor: 1, comparison: "<", threshold: 40, min: 0, max: 100 },
  { metric: "tensor_util", label: "Tensor active (GPM)", unit: "%", factor: 1, comparison: "<", threshold: 5, min: 0, max: 100 },
  // How a run ended: an event (fires once when the run ends that way, then resolves).
  { metric: "run_finished", label: "Run finished (1 = yes)", unit: "", factor: 1, comparison: ">=", threshold: 1, min: 0, max: 1 },
  { metric: "run_failed", label: "Run failed or its process died (1 = yes)", unit: "", factor: 1, comparison: ">=", threshold: 1, min: 0, max: 1 },
  { metric: "run_interrupted", label: "Run interrupted (1 = yes)", unit: "", factor: 1, comparison: ">=", threshold: 1, min: 0, max: 1 },
  // A named batch or epoch metric (the rule's metric_name, "loss" by default).
  { metric: "metric_nonfinite", label: "Metric is NaN or infinite (1 = yes)", unit: "", factor: 1, comparison: ">=", threshold: 1, min: 0, max: 1 },
  { metric: "metric_rise", label: "Metric over its best (factor)", unit: "×", factor: 1, comparison: ">=", threshold: 2, min: 0 },
  { metric: "throughput_drop", label: "Throughput drop below baseline", unit: "%", factor: 0.01, comparison: ">=", threshold: 30, min: 0, max: 100 },
  // The server's, not a run's: its alerts belong to no run.
  { metric: "disk_free_share", label: "Free disk space (data directory)", unit: "%", factor: 0.01, comparison: "<", threshold: 5, min: 0, max: 100 },
];

/** Metrics whose rule names the batch or epoch metric it watches. */
export const NAMED_METRICS = ["metric_nonfinite", "metric_rise"];
/** Metrics whose rule names its throughput baseline. */
export const BASELINE_METRICS = ["throughput_drop"];
/** Metrics of the server (its disk), judged once, not per run: their scope is the server. */
export const SERVER_METRICS = ["disk_free_share"];

export const COMPARISONS: Comparison[] = ["<", "<=", ">", ">="];
export const SCOPES: AlertScope[] = ["all", "project", "run"];

export function metricInfo(m: string): MetricInfo | undefined {
  return ALERT_METRICS.find((x) => x.metric === m);
}

/** What the rule form holds: text, as typed. */
export interface RuleForm {
  name: string;
  metric: string;
  comparison: string;
  threshold: string;
  for_s: string;
  scope: string;
  project: string;
  run_id: string;
  webhook_url: string;
  webhook_format: string;
  enabled: boolean;
  /** The batch/epoch metric a NaN or rise rule watches ("" = loss). */
  metric_name: string;
  /** Throughput baseline: a run's id, or (empty) the run's own first `baseline_s` seconds. */
  baseline_run_id: string;
  baseline_s: string;
  /** The action: capture this many steps of profile when the alert fires ("" = none). */
  profile_steps: string;
}

export function emptyRuleForm(): RuleForm {
  const m = ALERT_METRICS[0]!;
  return {
    name: "",
    metric: m.metric,
    comparison: m.comparison,
    threshold: String(m.threshold),
    for_s: "30",
    scope: "all",
    project: "",
    run_id: "",
    webhook_url: "",
    webhook_format: "json",
    enabled: true,
    metric_name: "",
    baseline_run_id: "",
    baseline_s: "",
    profile_steps: "",
  };
}

/** Round away float noise from unit conversion: 0.2 × 100 → 20, not 20.000000000000004. */
function clean(v: number): number {
  return Number(v.toPrecision(12));
}

export function ruleToForm(rule: AlertRule): RuleForm {
  const info = metricInfo(rule.metric);
  const factor = info?.factor ?? 1;
  const hook = (rule.channels ?? []).find((c) => c.type === "webhook") as { url?: string; format?: string } | undefined;
  return {
    name: rule.name,
    metric: rule.metric,
    comparison: rule.comparison,
    threshold: String(clean(rule.threshold / factor)),
    for_s: String(rule.for_s ?? 0),
    scope: rule.scope ?? "all",
    project: rule.project ?? "",
    run_id: rule.run_id == null ? "" : String(rule.run_id),
    webhook_url: hook?.url ?? "",
    webhook_format: hook?.format ?? "json",
    enabled: rule.enabled !== false,
    metric_name: rule.metric_name ?? "",
    baseline_run_id: rule.baseline_run_id == null ? "" : String(rule.baseline_run_id),
    baseline_s: rule.baseline_s == null ? "" : String(rule.baseline_s),
    profile_steps: rule.profile_steps == null ? "" : String(rule.profile_steps),
  };
}

export type RuleErrors = Partial<Record<keyof RuleForm | "form", string>>;

function parseNumber(s: string): number | null {
  const t = s.trim();
  if (t === "") return null;
  const v = Number(t);
  return Number.isFinite(v) ? v : null;
}

/** Validate the form; on success the rule to send (server units). */
export function validateRuleForm(f: RuleForm): { rule: AlertRuleInput | null; errors: RuleErrors } {
  const errors: RuleErrors = {};
  const name = f.name.trim();
  if (!name) errors.name = "Give the rule a name.";
  else if (name.length > 200) errors.name = "At most 200 characters.";
  const info = metricInfo(f.metric);
  if (!info) errors.metric = "Choose a metric.";
  if (!(COMPARISONS as string[]).includes(f.comparison)) errors.comparison = "Choose a comparison.";
  const threshold = parseNumber(f.threshold);
  if (threshold === null) errors.threshold = "Enter a number.";
  else if (info && info.min !== undefined && threshold < info.min) errors.threshold = `At least ${info.min}${info.unit ? ` ${info.unit}` : ""}.`;
  else if (info && info.max !== undefined && threshold > info.max) errors.threshold = `At most ${info.max}${info.unit ? ` ${info.unit}` : ""}.`;
  const forS = parseNumber(f.for_s === "" ? "0" : f.for_s);
  if (forS === null) errors.for_s = "Enter a number of seconds.";
  else if (forS < 0 || forS > 86_400) errors.for_s = "Between 0 and 86400 seconds.";
  if (!(SCOPES as string[]).includes(f.scope)) errors.scope = "Choose a scope.";
  const project = f.project.trim();
  if (f.scope === "project" && !project) errors.project = "Name the project this rule watches.";
  let runId: number | null = null;
  if (f.scope === "run") {
    const r = parseNumber(f.run_id);
    if (r === null || !Number.isSafeInteger(r) || r < 1) errors.run_id = "Enter the run's id (a positive whole number).";
    else runId = r;
  }
  const url = f.webhook_url.trim();
  if (url) {
    let ok = false;
    try {
      const u = new URL(url);
      ok = u.protocol === "http:" || u.protocol === "https:";
    } catch {
      ok = false;
    }
    if (!ok) errors.webhook_url = "Enter an http:// or https:// URL, or leave empty.";
  }
  const metricName = f.metric_name.trim();
  if (metricName.length > 100) errors.metric_name = "At most 100 characters.";
  const positiveInt = (text: string, key: "baseline_run_id" | "profile_steps", what: string): number | null => {
    if (text.trim() === "") return null;
    const v = parseNumber(text);
    if (v === null || !Number.isSafeInteger(v) || v < 1) errors[key] = `Enter ${what} (a positive whole number), or leave empty.`;
    return v;
  };
  const baselineRun = BASELINE_METRICS.includes(f.metric) ? positiveInt(f.baseline_run_id, "baseline_run_id", "the baseline run's id") : null;
  let baselineS: number | null = null;
  if (BASELINE_METRICS.includes(f.metric) && f.baseline_s.trim() !== "") {
    baselineS = parseNumber(f.baseline_s);
    if (baselineS === null || baselineS <= 0 || baselineS > 86_400) errors.baseline_s = "Between 0 and 86400 seconds, or leave empty (120).";
  }
  const profileSteps = positiveInt(f.profile_steps, "profile_steps", "a number of steps");
  if (Object.keys(errors).length > 0 || !info || threshold === null || forS === null) return { rule: null, errors };
  const channels: AlertRuleInput["channels"] = [{ type: "browser" }];
  if (url) channels.push({ type: "webhook", url, format: f.webhook_format === "slack" ? "slack" : "json" });
  return {
    rule: {
      name,
      metric: info.metric,
      comparison: f.comparison as Comparison,
      threshold: clean(threshold * info.factor),
      for_s: forS,
      scope: f.scope as AlertScope,
      project: f.scope === "project" ? project : null,
      run_id: f.scope === "run" ? runId : null,
      channels,
      enabled: f.enabled,
      metric_name: NAMED_METRICS.includes(f.metric) ? metricName || "loss" : null,
      baseline_run_id: baselineRun,
      baseline_s: baselineS,
      profile_steps: profileSteps,
    },
    errors,
  };
}

type DescribedRule = Pick<AlertRule, "metric" | "comparison" | "threshold" | "for_s" | "scope" | "project" | "run_id"> &
  Partial<Pick<AlertRule, "metric_name" | "baseline_run_id" | "baseline_s" | "profile_steps">>;

/** "GPU utilization < 70 % for 30 s · all runs", with its baseline and action when it has them. */
/** The comparisons as alert messages write them (the server's alerting._SYMBOLS). */
const SYMBOLS: Record<Comparison, string> = { "<": "<", "<=": "≤", ">": ">", ">=": "≥" };

/** A rule's threshold as the quantity it compares is written everywhere. */
function thresholdText(rule: DescribedRule, info: MetricInfo | undefined): string {
  if (rule.metric === "input_wait_share") return formatInputWait(rule.threshold);
  if (rule.metric === "step_time") return formatMs(rule.threshold * 1000);
  if (["gpu_util", "sm_util", "tensor_util"].includes(rule.metric)) return formatPercentValue(rule.threshold);
  const v = info ? clean(rule.threshold / info.factor) : rule.threshold;
  const unit = info?.unit ? (info.unit === "%" ? " %" : ` ${info.unit}`) : "";
  return `${v}${unit}`;
}

export function describeRule(rule: DescribedRule): string {
  const info = metricInfo(rule.metric);
  const named = NAMED_METRICS.includes(rule.metric) ? ` (${rule.metric_name || "loss"})` : "";
  let baseline = "";
  if (BASELINE_METRICS.includes(rule.metric))
    baseline = rule.baseline_run_id != null ? ` vs run #${rule.baseline_run_id}` : ` vs its first ${rule.baseline_s ?? 120} s`;
  const cond = `${info?.label ?? rule.metric}${named}${baseline} ${SYMBOLS[rule.comparison]} ${thresholdText(rule, info)}`;
  const dur = rule.for_s ? ` for ${rule.for_s} s` : "";
  const scope = SERVER_METRICS.includes(rule.metric)
    ? "the server"
    : rule.scope === "project" ? `project ${formatValue(rule.project)}` : rule.scope === "run" ? `run #${rule.run_id}` : "all runs";
  const action = rule.profile_steps ? ` · then profile ${rule.profile_steps} steps` : "";
  return `${cond}${dur} · ${scope}${action}`;
}

const STATE_ORDER: Record<AlertState, number> = { firing: 0, pending: 1, resolved: 2 };

function lastChange(a: Alert): number {
  return parseIso(a.resolved_at) ?? parseIso(a.fired_at) ?? parseIso(a.started_at) ?? 0;
}

/**
 * An alert that never fired: pending, then cleared before its rule's `for` (stored as
 * resolved without `fired_at`). Kept apart from "Firing and recent", in its own history.
 */
export function neverFired(a: Pick<Alert, "state" | "fired_at">): boolean {
  return a.state === "resolved" && !a.fired_at;
}

/** Alerts that fired (or are pending now), and those that never fired. */
export function splitCleared(alerts: Alert[]): { recent: Alert[]; cleared: Alert[] } {
  return { recent: alerts.filter((a) => !neverFired(a)), cleared: alerts.filter(neverFired) };
}

/** Firing first, then pending, then resolved; newest first within each. */
export function sortAlerts(alerts: Alert[]): Alert[] {
  return [...alerts].sort(
    (a, b) => (STATE_ORDER[a.state] ?? 3) - (STATE_ORDER[b.state] ?? 3) || lastChange(b) - lastChange(a) || b.id - a.id,
  );
}

/** An alert from a live message: `{type: "alert", alert: {...}}` or the alert's fields inline. */
export function alertFromMessage(msg: Record<string, unknown>): Alert | null {
  const raw = (typeof msg.alert === "object" && msg.alert !== null ? msg.alert : msg) as Record<string, unknown>;
  if (typeof raw.id !== "number" || typeof raw.run_id !== "number") return null;
  const state = raw.state;
  if (state !== "pending" && state !== "firing" && state !== "resolved") return null;
  return {
    id: raw.id,
    rule_id: typeof raw.rule_id === "number" ? raw.rule_id : null,
    run_id: raw.run_id,
    rule_name: String(raw.rule_name ?? raw.name ?? "alert"),
    state,
    value: typeof raw.value === "number" ? raw.value : null,
    message: String(raw.message ?? ""),
    started_at: String(raw.started_at ?? new Date().toISOString()),
    fired_at: typeof raw.fired_at === "string" ? raw.fired_at : null,
    resolved_at: typeof raw.resolved_at === "string" ? raw.resolved_at : null,
    deliveries: Array.isArray(raw.deliveries) ? (raw.deliveries as Alert["deliveries"]) : [],
    profile_id: typeof raw.profile_id === "number" ? raw.profile_id : null,
  };
}

/** Insert or replace by id; returns the new list and whether the alert just started firing. */
export function upsertAlert(list: Alert[], alert: Alert): { list: Alert[]; newlyFiring: boolean } {
  const i = list.findIndex((a) => a.id === alert.id);
  const before = i >= 0 ? list[i]!.state : null;
  const next = i >= 0 ? list.map((a, j) => (j === i ? alert : a)) : [alert, ...list];
  return { list: next, newlyFiring: alert.state === "firing" && before !== "firing" };
}

export type AlertsListener = (changed: Alert | null, newlyFiring: boolean) => void;

/** The browser's alerts: loaded from `GET /alerts`, kept current by live `alert` messages. */
export class AlertsStore {
  private items: Alert[] = [];
  private readonly listeners = new Set<AlertsListener>();
  status: "loading" | "loaded" | "error" = "loading";
  error: string | null = null;

  list(): Alert[] {
    return sortAlerts(this.items);
  }

  forRun(runId: number): Alert[] {
    return sortAlerts(this.items.filter((a) => a.run_id === runId));
  }

  firingCount(): number {
    return this.items.filter((a) => a.state === "firing").length;
  }

  replaceAll(alerts: Alert[]): void {
    this.items = alerts.filter((a) => a && typeof a.id === "number");
    this.status = "loaded";
    this.error = null;
    this.emit(null, false);
  }

  setStatus(status: AlertsStore["status"], error: string | null = null): void {
    this.status = status;
    this.error = error;
    this.emit(null, false);
  }

  upsert(alert: Alert): boolean {
    const { list, newlyFiring } = upsertAlert(this.items, alert);
    this.items = list;
    this.emit(alert, newlyFiring);
    return newlyFiring;
  }

  subscribe(l: AlertsListener): () => void {
    this.listeners.add(l);
    return () => this.listeners.delete(l);
  }

  private emit(changed: Alert | null, newlyFiring: boolean): void {
    for (const l of [...this.listeners]) l(changed, newlyFiring);
  }
}
