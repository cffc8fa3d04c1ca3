// REST client for `/api/v1`, with bearer-token handling.
//
// When the server answers 401, the client asks for a token once (concurrent
// requests share one prompt), keeps it in the token store and retries with
// `Authorization: Bearer <token>`. A token the server rejects is forgotten
// and asked for again, with the reason shown.

import type { StepQuery } from "./stepSync";
import type { Run, RunsPage, StepsResponse } from "./types";

export const API_BASE = "/api/v1";

export class ApiError extends Error {
  readonly status: number;
  readonly detail: string | null;

  constructor(status: number, detail: string | null, path: string) {
    super(detail ? `${status} ${detail}` : `HTTP ${status} for ${path}`);
    this.name = "ApiError";
    this.status = status;
    this.detail = detail;
  }
}

export function isNotFound(err: unknown): boolean {
  return err instanceof ApiError && err.status === 404;
}

/** Where the token lives between page loads of one tab. */
export interface TokenStore {
  get(): string | null;
  set(token: string | null): void;
}

const TOKEN_KEY = "stoker.token";

/** Token store over `sessionStorage`, falling back to memory when it is unavailable. */
export function sessionTokenStore(storage: Pick<Storage, "getItem" | "setItem" | "removeItem"> | null): TokenStore {
  let memory: string | null = null;
  return {
    get() {
      try {
        return storage?.getItem(TOKEN_KEY) ?? memory;
      } catch {
        return memory;
      }
    },
    set(token) {
      memory = token;
      try {
        if (token === null) storage?.removeItem(TOKEN_KEY);
        else storage?.setItem(TOKEN_KEY, token);
      } catch {
        /* private mode: keep it in memory */
      }
    },
  };
}

/** Shows the token form; resolves with what the user entered. */
export type TokenPrompt = (reason: "required" | "rejected") => Promise<string>;

export type FetchLike = (input: string, init?: RequestInit) => Promise<Response>;

export interface ApiClientOptions {
  fetch?: FetchLike;
  tokens: TokenStore;
  prompt: TokenPrompt;
  /** Told when a new token was entered (the live socket reconnects with it). */
  onToken?: (token: string) => void;
  base?: string;
}

export class ApiClient {
  private readonly fetchFn: FetchLike;
  private readonly tokens: TokenStore;
  private readonly prompt: TokenPrompt;
  private readonly onToken: ((token: string) => void) | undefined;
  private readonly base: string;
  private pendingPrompt: Promise<string> | null = null;

  constructor(opts: ApiClientOptions) {
    this.fetchFn = opts.fetch ?? ((input, init) => globalThis.fetch(input, init));
    this.tokens = opts.tokens;
    this.prompt = opts.prompt;
    this.onToken = opts.onToken;
    this.base = opts.base ?? API_BASE;
  }

  get token(): string | null {
    return this.tokens.get();
  }

  listRuns(signal?: AbortSignal): Promise<RunsPage> {
    return this.getJson<RunsPage>("/runs", signal);
  }

  getRun(id: number, signal?: AbortSignal): Promise<Run> {
    return this.getJson<Run>(`/runs/${encodeURIComponent(String(id))}`, signal);
  }

  getSteps(id: number, query: StepQuery, signal?: AbortSignal): Promise<StepsResponse> {
    return this.getJson<StepsResponse>(`/runs/${encodeURIComponent(String(id))}/steps${stepsQuery(query)}`, signal);
  }

  /** GET a JSON document under the API base, asking for a token on 401. */
  async getJson<T>(path: string, signal?: AbortSignal): Promise<T> {
    const url = this.base + path;
    let sentToken = this.tokens.get();
    let res = await this.fetchFn(url, this.init(sentToken, signal));
    // One prompt per rejection; a cancelled page stops asking.
    for (let tries = 0; res.status === 401 && tries < 3; tries++) {
      if (signal?.aborted) break;
      const token = await this.tokenAfterRejection(sentToken);
      sentToken = token;
      res = await this.fetchFn(url, this.init(token, signal));
    }
    if (!res.ok) throw new ApiError(res.status, await errorDetail(res), url);
    return (await res.json()) as T;
  }

  private init(token: string | null, signal?: AbortSignal): RequestInit {
    const headers: Record<string, string> = { Accept: "application/json" };
    if (token) headers.Authorization = `Bearer ${token}`;
    const init: RequestInit = { headers, credentials: "same-origin" };
    if (signal) init.signal = signal;
    return init;
  }

  /**
   * The token to retry with after a 401. If another request already obtained a
   * newer token than the one rejected, use it; otherwise ask (once for all
   * requests waiting at the same time).
   */
  private tokenAfterRejection(rejected: string | null): Promise<string> {
    const current = this.tokens.get();
    if (current && current !== rejected) return Promise.resolve(current);
    if (!this.pendingPrompt) {
      if (rejected) this.tokens.set(null);
      this.pendingPrompt = this.prompt(rejected ? "rejected" : "required")
        .then((token) => {
          const t = token.trim();
          this.tokens.set(t);
          this.onToken?.(t);
          return t;
        })
        .finally(() => {
          this.pendingPrompt = null;
        });
    }
    return this.pendingPrompt;
  }
}

export function stepsQuery(query: StepQuery): string {
  const params = new URLSearchParams();
  if (query.maxPoints !== undefined) params.set("max_points", String(Math.max(1, Math.round(query.maxPoints))));
  if (query.afterStep !== undefined) params.set("after_step", String(query.afterStep));
  const s = params.toString();
  return s ? `?${s}` : "";
}

async function errorDetail(res: Response): Promise<string | null> {
  try {
    const body: unknown = await res.json();
    if (body && typeof body === "object" && "detail" in body) {
      const d = (body as { detail: unknown }).detail;
      return typeof d === "string" ? d : JSON.stringify(d);
    }
  } catch {
    /* not JSON */
  }
  return null;
}
