// What starvation costs: lost device time, its price, and how much
// sooner a run would have finished had its input kept up. Pure formatting plus
// the server's UI settings (`GET /settings/ui`, read once): the price, and the
// input-bound thresholds the server judges by.

import type { components } from "../api/api.gen";
import { formatDuration, MISSING } from "../app/format";

type Schemas = components["schemas"];
export type UiSettings = Schemas["UiSettings"];
export type InputBound = Schemas["InputBoundThresholds"];
/** The price part of the settings: all that formatting a cost needs. */
export type Price = Pick<UiSettings, "gpu_hour_price" | "currency">;
/** The settings as held: no thresholds until the server sent them. */
export type HeldUiSettings = Price & { input_bound: InputBound | null };
export type Starvation = Schemas["Starvation"];
type Summary = Pick<Schemas["RunSummary"], "input_wait_s"> & { workers?: Pick<Schemas["WorkerSummary"], "input_wait_s">[] };

export const NO_PRICE: Price = { gpu_hour_price: null, currency: "$" };

function finite(v: unknown): v is number {
  return typeof v === "number" && Number.isFinite(v);
}

/** The one name of the device time input starvation cost, on every surface. */
export const LOST_TIME = "Lost device time";
/** What it is, for tooltips. */
export const LOST_TIME_MEANS =
  "Device time lost to input starvation: the time the steps waited for input, times the devices (GPUs; the host when there is none) each worker trains on.";

/**
 * Lost device time: small amounts in seconds or minutes ("42 s", "12.5 min"), from an
 * hour on in hours ("0.52 h" is never written: "31.2 min"; 42.7 h → "42.7 h").
 */
export function formatLostTime(seconds: number | null | undefined): string {
  if (!finite(seconds) || seconds < 0) return MISSING;
  if (seconds === 0) return "0 s";
  if (seconds < 60) return `${seconds < 10 ? seconds.toFixed(1) : seconds.toFixed(0)} s`;
  if (seconds < 3600) {
    const min = seconds / 60;
    return `${min < 10 ? min.toFixed(1) : min.toFixed(0)} min`;
  }
  const hours = seconds / 3600;
  const digits = hours < 10 ? 2 : hours < 100 ? 1 : 0;
  return `${hours.toFixed(digits)} h`;
}

/** Device-hours as `formatLostTime` writes them. */
export function formatLostHours(hours: number | null | undefined): string {
  return finite(hours) ? formatLostTime(hours * 3600) : MISSING;
}

/** The price of `hours` device-hours at the GPU-hour price ("$1.30"), or null when no price is set. */
export function formatMoney(hours: number | null | undefined, settings: Price): string | null {
  const price = settings.gpu_hour_price;
  if (!finite(hours) || !finite(price)) return null;
  const amount = hours * price;
  const text = amount >= 1000 ? Math.round(amount).toLocaleString("en-US") : amount.toFixed(2);
  return `${settings.currency}${text}`;
}

/** Lost device seconds, with their price when one is set: "31.2 min · $1.30". */
export function formatLostPriced(lostS: number | null | undefined, settings: Price): string {
  if (!finite(lostS)) return MISSING;
  const money = formatMoney(lostS / 3600, settings);
  const time = formatLostTime(lostS);
  return money ? `${time} · ${money}` : time;
}

/**
 * The job's own time lost waiting for input: workers wait side by side, so the
 * job is held up as long as its longest-waiting worker (the summary's
 * `input_wait_s` adds every worker's wait up).
 */
export function jobInputWaitS(summary: Summary | null | undefined): number | null {
  if (!summary) return null;
  const workers = (summary.workers ?? []).map((w) => w.input_wait_s).filter(finite);
  if (workers.length > 0) return Math.max(...workers);
  return finite(summary.input_wait_s) ? summary.input_wait_s : null;
}

export interface FedEstimate {
  wallS: number;
  fedS: number;
  /** The share of the wall time the wait was (0..1). */
  savedShare: number;
}

/** The run's wall time without its input wait; null without a wait or a wall time. */
export function fedEstimate(summary: Summary | null | undefined, wallS: number | null | undefined): FedEstimate | null {
  const wait = jobInputWaitS(summary);
  if (wait === null || wait <= 0 || !finite(wallS) || wallS <= 0) return null;
  const saved = Math.min(wait, wallS);
  return { wallS, fedS: wallS - saved, savedShare: saved / wallS };
}

/**
 * "Fed, this run would have taken 4m 10s instead of 11m 02s (−62 %)." The two durations
 * are written precisely enough to differ when the percentage does; a saving too small to
 * show in whole seconds is said as the time saved: "… would have finished 0.1s sooner (−1 %)".
 */
export function fedSentence(estimate: FedEstimate | null): string | null {
  if (!estimate) return null;
  const pct = Math.round(estimate.savedShare * 100);
  const change = pct === 0 ? "<1 %" : `−${pct} %`;
  const fed = formatDuration(estimate.fedS);
  const wall = formatDuration(estimate.wallS);
  if (fed === wall || estimate.wallS < 60) {
    const saved = estimate.wallS - estimate.fedS;
    const sooner = saved < 1 ? `${Math.max(saved, 0.01).toFixed(saved < 0.1 ? 2 : 1)}s` : formatDuration(saved);
    return `Fed, this run would have finished ${sooner} sooner (${change} of ${wall}).`;
  }
  return `Fed, this run would have taken ${fed} instead of ${wall} (${change}).`;
}

/** `GET /starvation` query: runs active since `since` (ISO), optionally one project. */
export function starvationPath(since: Date, project?: string, limit = 100): string {
  const p = new URLSearchParams({ since: since.toISOString(), limit: String(limit) });
  if (project) p.set("project", project);
  return `/starvation?${p.toString()}`;
}

/** The default "since" of the cost page: seven days before `nowMs`. */
export function defaultSince(nowMs: number): Date {
  return new Date(nowMs - 7 * 86_400_000);
}

interface JsonGetter {
  getJson<T>(path: string, signal?: AbortSignal): Promise<T>;
}

let current: HeldUiSettings = { ...NO_PRICE, input_bound: null };
let loading: Promise<HeldUiSettings> | null = null;

/** The settings as last read (no price nor thresholds until `loadUiSettings` answered). */
export function uiSettings(): HeldUiSettings {
  return current;
}

/**
 * Read the server's UI settings once; until they arrive there is no price nor
 * thresholds. A failed read rejects with its error (for the view to show) and
 * is made again at the next call.
 */
export function loadUiSettings(api: JsonGetter): Promise<HeldUiSettings> {
  if (!loading) {
    const attempt = api
      .getJson<UiSettings>("/settings/ui")
      .then((s) => {
        const bound = s?.input_bound;
        current = {
          gpu_hour_price: finite(s?.gpu_hour_price) ? s.gpu_hour_price : null,
          currency: typeof s?.currency === "string" ? s.currency : "$",
          input_bound:
            bound && finite(bound.highly_input_bound) && finite(bound.moderately_input_bound)
              ? { highly_input_bound: bound.highly_input_bound, moderately_input_bound: bound.moderately_input_bound }
              : null,
        };
        return current;
      });
    loading = attempt;
    attempt.catch(() => {
      if (loading === attempt) loading = null; // read again at the next call
    });
  }
  return loading;
}
