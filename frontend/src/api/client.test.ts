import { describe, expect, it } from "vitest";
import { ApiClient, ApiError, isNotFound, sessionTokenStore, stepsQuery, type FetchLike, type TokenStore } from "./client";

function memoryTokens(initial: string | null = null): TokenStore {
  let t = initial;
  return { get: () => t, set: (v) => (t = v) };
}

function json(status: number, body: unknown): Response {
  return new Response(JSON.stringify(body), { status, headers: { "Content-Type": "application/json" } });
}

interface Call {
  url: string;
  auth: string | null;
}

/** A server that wants `Bearer good`. */
function authServer(calls: Call[]): FetchLike {
  return async (url, init) => {
    const headers = (init?.headers ?? {}) as Record<string, string>;
    const auth = headers.Authorization ?? null;
    calls.push({ url, auth });
    if (auth !== "Bearer good") return json(401, { detail: "Not authenticated" });
    return json(200, { data: [], count: 0 });
  };
}

describe("ApiClient", () => {
  it("GETs JSON under /api/v1", async () => {
    const calls: Call[] = [];
    const api = new ApiClient({ fetch: authServer(calls), tokens: memoryTokens("good"), prompt: async () => "x" });
    expect(await api.listRuns()).toEqual({ data: [], count: 0 });
    expect(calls).toEqual([{ url: "/api/v1/runs", auth: "Bearer good" }]);
  });

  it("asks for a token on 401, stores it and retries with a bearer header", async () => {
    const calls: Call[] = [];
    const tokens = memoryTokens();
    const prompts: string[] = [];
    const notified: string[] = [];
    const api = new ApiClient({
      fetch: authServer(calls),
      tokens,
      prompt: async (reason) => {
        prompts.push(reason);
        return " good ";
      },
      onToken: (t) => notified.push(t),
    });
    await api.listRuns();
    expect(prompts).toEqual(["required"]);
    expect(tokens.get()).toBe("good");
    expect(notified).toEqual(["good"]);
    expect(calls.map((c) => c.auth)).toEqual([null, "Bearer good"]);
  });

  it("asks only once for concurrent requests that all got 401", async () => {
    const calls: Call[] = [];
    let prompts = 0;
    let release!: (t: string) => void;
    const api = new ApiClient({
      fetch: authServer(calls),
      tokens: memoryTokens(),
      prompt: () => {
        prompts++;
        return new Promise((r) => (release = r));
      },
    });
    const all = Promise.all([api.listRuns(), api.getRun(1), api.getSteps(1, { maxPoints: 10 })]);
    await new Promise((r) => setTimeout(r, 0));
    release("good");
    await all;
    expect(prompts).toBe(1);
  });

  it("forgets a rejected token and asks again saying why", async () => {
    const calls: Call[] = [];
    const tokens = memoryTokens("stale");
    const reasons: string[] = [];
    const api = new ApiClient({
      fetch: authServer(calls),
      tokens,
      prompt: async (reason) => {
        reasons.push(reason);
        return "good";
      },
    });
    await api.listRuns();
    expect(reasons).toEqual(["rejected"]);
    expect(tokens.get()).toBe("good");
  });

  it("raises ApiError with the server's detail on other errors", async () => {
    const api = new ApiClient({
      fetch: async () => json(404, { detail: "Run 9 not found" }),
      tokens: memoryTokens(),
      prompt: async () => "x",
    });
    const err = await api.getRun(9).catch((e: unknown) => e);
    expect(err).toBeInstanceOf(ApiError);
    expect((err as ApiError).status).toBe(404);
    expect((err as ApiError).detail).toBe("Run 9 not found");
    expect(isNotFound(err)).toBe(true);
  });

  it("builds the steps query string", async () => {
    const calls: Call[] = [];
    const api = new ApiClient({ fetch: authServer(calls), tokens: memoryTokens("good"), prompt: async () => "x" });
    await api.getSteps(3, { maxPoints: 1999.6 });
    await api.getSteps(3, { afterStep: 120 });
    expect(calls.map((c) => c.url)).toEqual(["/api/v1/runs/3/steps?max_points=2000", "/api/v1/runs/3/steps?after_step=120"]);
    expect(stepsQuery({})).toBe("");
  });
});

describe("sessionTokenStore", () => {
  it("keeps the token in the given storage", () => {
    const data = new Map<string, string>();
    const storage = {
      getItem: (k: string) => data.get(k) ?? null,
      setItem: (k: string, v: string) => void data.set(k, v),
      removeItem: (k: string) => void data.delete(k),
    };
    const store = sessionTokenStore(storage);
    store.set("abc");
    expect(data.get("stoker.token")).toBe("abc");
    expect(sessionTokenStore(storage).get()).toBe("abc");
    store.set(null);
    expect(store.get()).toBeNull();
  });

  it("falls back to memory when storage throws", () => {
    const broken = {
      getItem: () => {
        throw new Error("denied");
      },
      setItem: () => {
        throw new Error("denied");
      },
      removeItem: () => {
        throw new Error("denied");
      },
    };
    const store = sessionTokenStore(broken);
    store.set("abc");
    expect(store.get()).toBe("abc");
  });
});

import { parseErrorBody, queryString } from "./client";

describe("request helpers", () => {
  it("builds query strings from defined values only", () => {
    expect(queryString({ a: 1, b: undefined, c: "", d: null, e: "x y" })).toBe("?a=1&e=x+y");
    expect(queryString({ a: Number.NaN })).toBe("");
  });
  it("maps FastAPI 422 lists to per-field messages", () => {
    const r = parseErrorBody({
      detail: [
        { loc: ["body", "threshold"], msg: "Input should be a valid number" },
        { loc: ["body"], msg: "Value error, scope 'run' needs a 'run_id'" },
      ],
    });
    expect(r.fields).toEqual([
      { field: "threshold", message: "Input should be a valid number" },
      { field: "", message: "scope 'run' needs a 'run_id'" },
    ]);
    expect(r.detail).toBe("threshold: Input should be a valid number; scope 'run' needs a 'run_id'");
    expect(parseErrorBody({ detail: "run 9 not found" })).toEqual({ detail: "run 9 not found", fields: [] });
  });
});

describe("ApiClient writes and new reads", () => {
  function recorder(reply: (url: string, init?: RequestInit) => Response) {
    const calls: { url: string; method: string; body: unknown; auth: string | null }[] = [];
    const fetch: FetchLike = async (url, init) => {
      const headers = (init?.headers ?? {}) as Record<string, string>;
      calls.push({ url, method: init?.method ?? "GET", body: init?.body ? JSON.parse(String(init.body)) : undefined, auth: headers.Authorization ?? null });
      return reply(url, init);
    };
    return { calls, fetch };
  }

  it("POSTs, PATCHes and DELETEs alert rules as JSON with the token", async () => {
    const { calls, fetch } = recorder((_u, init) => (init?.method === "DELETE" ? new Response(null, { status: 204 }) : json(200, { id: 1 })));
    const api = new ApiClient({ fetch, tokens: memoryTokens("good"), prompt: async () => "x" });
    await api.createAlertRule({ name: "n", metric: "gpu_util", comparison: "<", threshold: 70, for_s: 30, scope: "all", enabled: true });
    await api.updateAlertRule(1, { enabled: false });
    expect(await api.deleteAlertRule(1)).toBeUndefined();
    expect(calls.map((c) => [c.method, c.url])).toEqual([
      ["POST", "/api/v1/alert-rules"],
      ["PATCH", "/api/v1/alert-rules/1"],
      ["DELETE", "/api/v1/alert-rules/1"],
    ]);
    expect(calls[1]!.body).toEqual({ enabled: false });
    expect(calls.every((c) => c.auth === "Bearer good")).toBe(true);
  });

  it("throws ApiError with field errors on 422", async () => {
    const { fetch } = recorder(() => json(422, { detail: [{ loc: ["body", "name"], msg: "too short" }] }));
    const api = new ApiClient({ fetch, tokens: memoryTokens(), prompt: async () => "x" });
    const err = await api.createAlertRule({ name: "", metric: "gpu_util", comparison: "<", threshold: 1, for_s: 0, scope: "all", enabled: true }).catch((e: unknown) => e);
    expect(err).toBeInstanceOf(ApiError);
    expect((err as ApiError).fieldErrors).toEqual([{ field: "name", message: "too short" }]);
  });

  it("asks for samples, metrics, compare and alerts with their query parameters and normalizes", async () => {
    const { calls, fetch } = recorder((url) => {
      if (url.includes("/samples")) return json(200, { run_id: 3, fields: ["util"], series: [{ rank: 0, gpu: 0, t: [1], util: [50] }] });
      if (url.includes("/host")) return json(200, { run_id: 3, fields: ["rss"], series: [{ rank: 0, t: [1], rss: [7] }] });
      if (url.includes("/metrics")) return json(200, { series: [{ name: "loss", step: [1], value: [2] }] });
      return json(200, { data: [], count: 0, runs: [], differences: { config: {}, environment: {} } });
    });
    const api = new ApiClient({ fetch, tokens: memoryTokens(), prompt: async () => "x" });
    const samples = await api.getSamples(3, { maxPoints: 800.4, sinceT: 10.5, untilT: 20 });
    expect(samples.device[0]!.cols.util).toEqual([50]);
    expect(samples.host[0]!.cols.rss).toEqual([7]);
    const metrics = await api.getMetrics(3, { afterStep: 5 });
    expect(metrics[0]!.name).toBe("loss");
    await api.compare([1, 2]);
    await api.listAlerts({ runId: 3 });
    await api.listRuns(undefined, { limit: 1000, sort: "-started_at" });
    await api.getSteps(3, { afterStep: 9, beforeStep: 21, maxPoints: 100 });
    expect(calls.map((c) => c.url)).toEqual([
      "/api/v1/runs/3/host?max_points=800&since_t=10.5&until_t=20",
      "/api/v1/runs/3/samples?max_points=800&since_t=10.5&until_t=20",
      "/api/v1/runs/3/metrics?after_step=5",
      "/api/v1/compare?runs=1,2",
      "/api/v1/alerts?run_id=3",
      "/api/v1/runs?limit=1000&sort=-started_at",
      "/api/v1/runs/3/steps?max_points=100&after_step=9&before_step=21",
    ]);
  });
});
