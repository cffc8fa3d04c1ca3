import { describe, expect, it } from "vitest";
import {
  defaultSince,
  fedEstimate,
  fedSentence,
  formatLostHours,
  formatLostPriced,
  formatMoney,
  jobInputWaitS,
  loadUiSettings,
  NO_PRICE,
  starvationPath,
  uiSettings,
} from "./cost";

const PRICED = { gpu_hour_price: 2.5, currency: "€" };

describe("formatLostHours", () => {
  it("keeps two significant-ish digits", () => {
    expect(formatLostHours(1.523)).toBe("1.52 h");
    expect(formatLostHours(42.71)).toBe("42.7 h");
    expect(formatLostHours(1234.4)).toBe("1234 h");
    // Small costs in seconds or minutes, never "<0.01 h".
    expect(formatLostHours(0.523)).toBe("31 min");
    expect(formatLostHours(0.1)).toBe("6.0 min");
    expect(formatLostHours(0.004)).toBe("14 s");
    expect(formatLostHours(0.0001)).toBe("0.4 s");
    expect(formatLostHours(0)).toBe("0 s");
    expect(formatLostHours(null)).toBe("—");
    expect(formatLostHours(-1)).toBe("—");
  });
});

describe("formatMoney and formatLostPriced", () => {
  it("prices hours only when a price is set", () => {
    expect(formatMoney(2, PRICED)).toBe("€5.00");
    expect(formatMoney(1000, PRICED)).toBe("€2,500");
    expect(formatMoney(2, NO_PRICE)).toBeNull();
    expect(formatMoney(null, PRICED)).toBeNull();
  });
  it("shows lost device seconds as hours, priced", () => {
    expect(formatLostPriced(7200, PRICED)).toBe("2.00 h · €5.00");
    expect(formatLostPriced(1800, NO_PRICE)).toBe("30 min");
    expect(formatLostPriced(2, PRICED)).toBe("2.0 s · €0.00");
    expect(formatLostPriced(undefined, PRICED)).toBe("—");
  });
});

describe("fed estimate", () => {
  it("takes the longest-waiting worker's wait as the job's", () => {
    expect(jobInputWaitS({ input_wait_s: 9, workers: [{ input_wait_s: 4 }, { input_wait_s: 5 }] })).toBe(5);
    expect(jobInputWaitS({ input_wait_s: 3, workers: [] })).toBe(3);
    expect(jobInputWaitS(null)).toBeNull();
  });
  it("says how much sooner a fed run would have finished", () => {
    const estimate = fedEstimate({ input_wait_s: 412, workers: [{ input_wait_s: 412 }] }, 662);
    expect(estimate).toEqual({ wallS: 662, fedS: 250, savedShare: 412 / 662 });
    expect(fedSentence(estimate)).toBe("Fed, this run would have taken 4m 10s instead of 11m 02s (−62 %).");
  });
  it("says nothing without a wait or a wall time, and never goes below zero", () => {
    expect(fedEstimate({ input_wait_s: 0 }, 100)).toBeNull();
    expect(fedEstimate({ input_wait_s: 5 }, null)).toBeNull();
    expect(fedSentence(null)).toBeNull();
    // The "2s instead of 3s (−1 %)": the time saved, not two durations that disagree with it.
    expect(fedSentence(fedEstimate({ input_wait_s: 0.03 }, 3.02))).toBe("Fed, this run would have finished 0.03s sooner (−1 % of 3s).");
    expect(fedEstimate({ input_wait_s: 50 }, 40)?.fedS).toBe(0);
    expect(fedSentence(fedEstimate({ input_wait_s: 0.1 }, 1000))).toBe("Fed, this run would have taken 16m 39s instead of 16m 40s (<1 %).");
  });
});

describe("starvation query", () => {
  it("builds the path and the 7-day default", () => {
    const now = Date.UTC(2026, 10, 24, 12, 0, 0);
    expect(defaultSince(now).toISOString()).toBe("2026-11-17T12:00:00.000Z");
    expect(starvationPath(defaultSince(now), "vision", 50)).toBe("/starvation?since=2026-11-17T12%3A00%3A00.000Z&limit=50&project=vision");
    expect(starvationPath(defaultSince(now))).toBe("/starvation?since=2026-11-17T12%3A00%3A00.000Z&limit=100");
  });
});

describe("loadUiSettings", () => {
  it("rejects with the server's error and no price nor thresholds, then reads them at the next call", async () => {
    const sent = { ...PRICED, input_bound: { highly_input_bound: 0.2, moderately_input_bound: 0.05 } };
    let calls = 0;
    const failing = { getJson: <T>() => (calls++, Promise.reject(new Error("HTTP 500 for /settings/ui"))) as Promise<T> };
    await expect(loadUiSettings(failing)).rejects.toThrow("HTTP 500 for /settings/ui");
    expect(uiSettings()).toEqual({ ...NO_PRICE, input_bound: null });
    const ok = { getJson: <T>(path: string) => (calls++, Promise.resolve(path === "/settings/ui" ? sent : null) as Promise<T>) };
    expect(await loadUiSettings(ok)).toEqual(sent);
    expect(await loadUiSettings(ok)).toEqual(sent);
    expect(calls).toBe(2);
    expect(uiSettings()).toEqual(sent);
  });
});
