import { describe, expect, it } from "vitest";
import { ApiClient, ApiError, isNotFound, sessionTokenStore, stepsQuery, type FetchLike, type TokenStore } from "./api";

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
