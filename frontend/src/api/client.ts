// REST client for `/api/v1`, with bearer-token handling.
//
// When the server answers 401, the client asks for a token once (concurrent
// requests share one prompt), keeps it in the token store and retries with
// `Authorization: Bearer <token>`. A token the server rejects is forgotten
// and asked for again, with the reason shown.

import type { StepQuery } from "../state/stepSync";
import { normalizeEpochMetrics, type EpochTrack } from "../state/epochs";
import type { RunEnergy } from "../state/energy";
import { normalizeMetrics, normalizeSamples } from "../state/samples";
import type {
  Alert,
  AlertRule,
  AlertRuleInput,
  CompareResponse,
  DeviceSeries,
  Diagnosis,
  DiskUse,
  HostSeries,
  ListPage,
  MetricSeries,
  MetricTrack,
  Run,
  RunEvent,
  RunsPage,
  SamplesData,
  StarvedRanges,
  StepsResponse,
  TuneGroup,
} from "./types";

export const API_BASE = "/api/v1";

/** One validation problem the server reported (FastAPI's 422 `detail` list). */
export interface FieldError {
  /** Last path element naming the field (`threshold`), or "" for the whole body. */
  field: string;
  message: string;
}

export class ApiError extends Error {
  readonly status: number;
  readonly detail: string | null;
  readonly fieldErrors: FieldError[];

  constructor(status: number, detail: string | null, path: string, fieldErrors: FieldError[] = []) {
    super(detail ? `${status} ${detail}` : `HTTP ${status} for ${path}`);
    this.name = "ApiError";
    this.status = status;
    this.detail = detail;
    this.fieldErrors = fieldErrors;
  }
}

/** Query of the runs list (`GET /runs`). */
export interface RunsQuery {
  limit?: number;
  offset?: number;
  sort?: string;
  q?: string;
  project?: string;
  status?: string;
  tag?: string;
}

export interface SamplesQuery {
  maxPoints?: number;
  /** Only samples after this unix time (live catch-up, or the left edge of a zoom). */
  sinceT?: number;
  /** Only samples up to this unix time (right edge of a zoom). */
  untilT?: number;
}

export interface MetricsQuery {
  maxPoints?: number;
  afterStep?: number;
  beforeStep?: number;
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

/** Shows the token form; resolves with what the user entered (null: the user cancelled). */
export type TokenPrompt = (reason: "required" | "rejected" | "admin") => Promise<string | null>;

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

  /** What the token in use may do (`GET /access`; no token needed to ask). */
  getAccess(signal?: AbortSignal): Promise<unknown> {
    return this.getJson<unknown>("/access", signal);
  }

  /** Ask for a token with more rights (the admin's); true when one was entered. */
  async askForAdminToken(): Promise<boolean> {
    const token = (await this.prompt("admin"))?.trim();
    if (!token) return false;
    this.tokens.set(token);
    this.onToken?.(token);
    return true;
  }

  listRuns(signal?: AbortSignal, query: RunsQuery = {}): Promise<RunsPage> {
    return this.getJson<RunsPage>(`/runs${queryString(query as Record<string, string | number | undefined>)}`, signal);
  }

  /** The run's GPU energy split by what its steps were doing (`/runs/{id}/energy`). */
  getEnergy(id: number, signal?: AbortSignal): Promise<RunEnergy> {
    return this.getJson<RunEnergy>(`/runs/${encodeURIComponent(String(id))}/energy`, signal);
  }

  /** `stoker tune`'s groups, newest first; `key` finds a trial run's group. */
  listTuneGroups(query: { key?: string; limit?: number } = {}, signal?: AbortSignal): Promise<ListPage<TuneGroup>> {
    return this.getJson<ListPage<TuneGroup>>(`/tune-groups${queryString(query)}`, signal);
  }

  getTuneGroup(id: number, signal?: AbortSignal): Promise<TuneGroup> {
    return this.getJson<TuneGroup>(`/tune-groups/${encodeURIComponent(String(id))}`, signal);
  }

  getDiagnosis(id: number, signal?: AbortSignal): Promise<Diagnosis> {
    return this.getJson<Diagnosis>(`/runs/${encodeURIComponent(String(id))}/diagnosis`, signal);
  }

  /** Device samples (`/runs/{id}/samples`) and host samples (`/runs/{id}/host`), fetched together. */
  async getSamples(id: number, query: SamplesQuery, signal?: AbortSignal): Promise<SamplesData> {
    const run = `/runs/${encodeURIComponent(String(id))}`;
    const qs = queryString({
      max_points: query.maxPoints === undefined ? undefined : Math.max(2, Math.round(query.maxPoints)),
      since_t: query.sinceT,
      until_t: query.untilT,
    });
    const [host, device] = await Promise.all([
      this.getJson<HostSeries>(`${run}/host${qs}`, signal),
      this.getJson<DeviceSeries>(`${run}/samples${qs}`, signal),
    ]);
    return normalizeSamples(device, host);
  }

  /** Server-computed starved step ranges (`/runs/{id}/starvation`). */
  getStarvation(id: number, query: { threshold?: number; maxGap?: number } = {}, signal?: AbortSignal): Promise<StarvedRanges> {
    return this.getJson<StarvedRanges>(
      `/runs/${encodeURIComponent(String(id))}/starvation${queryString({ threshold: query.threshold, max_gap: query.maxGap })}`,
      signal,
    );
  }

  async getMetrics(id: number, query: MetricsQuery, signal?: AbortSignal): Promise<MetricTrack[]> {
    const raw = await this.getJson<MetricSeries>(
      `/runs/${encodeURIComponent(String(id))}/metrics${queryString({
        max_points: query.maxPoints === undefined ? undefined : Math.max(2, Math.round(query.maxPoints)),
        after_step: query.afterStep,
        before_step: query.beforeStep,
      })}`,
      signal,
    );
    return normalizeMetrics(raw);
  }

  /** A run's epoch series (`axis=epoch`): all of them, or the `names` asked for. */
  async getEpochMetrics(id: number, names: string[] = [], signal?: AbortSignal): Promise<EpochTrack[]> {
    const p = new URLSearchParams({ axis: "epoch" });
    for (const n of names) p.append("name", n);
    const raw = await this.getJson<unknown>(`/runs/${encodeURIComponent(String(id))}/metrics?${p.toString()}`, signal);
    return normalizeEpochMetrics(raw);
  }

  compare(ids: number[], signal?: AbortSignal): Promise<CompareResponse> {
    return this.getJson<CompareResponse>(`/compare?runs=${ids.map((i) => String(i)).join(",")}`, signal);
  }

  listAlertRules(signal?: AbortSignal): Promise<ListPage<AlertRule>> {
    return this.getJson<ListPage<AlertRule>>("/alert-rules", signal);
  }

  createAlertRule(rule: AlertRuleInput): Promise<AlertRule> {
    return this.sendJson<AlertRule>("POST", "/alert-rules", rule);
  }

  updateAlertRule(id: number, patch: Partial<AlertRuleInput>): Promise<AlertRule> {
    return this.sendJson<AlertRule>("PATCH", `/alert-rules/${encodeURIComponent(String(id))}`, patch);
  }

  deleteAlertRule(id: number): Promise<unknown> {
    return this.sendJson<unknown>("DELETE", `/alert-rules/${encodeURIComponent(String(id))}`);
  }

  /** Disk use: database and profile sizes, free space, full or nearly full. */
  getDisk(signal?: AbortSignal): Promise<DiskUse> {
    return this.getJson<DiskUse>("/disk", signal);
  }

  listAlerts(query: { runId?: number; state?: string; limit?: number } = {}, signal?: AbortSignal): Promise<ListPage<Alert>> {
    return this.getJson<ListPage<Alert>>(
      `/alerts${queryString({ run_id: query.runId, state: query.state, limit: query.limit })}`,
      signal,
    );
  }

  listRunEvents(id: number, signal?: AbortSignal): Promise<ListPage<RunEvent>> {
    return this.getJson<ListPage<RunEvent>>(`/runs/${encodeURIComponent(String(id))}/events`, signal);
  }

  getRun(id: number, signal?: AbortSignal): Promise<Run> {
    return this.getJson<Run>(`/runs/${encodeURIComponent(String(id))}`, signal);
  }

  getSteps(id: number, query: StepQuery, signal?: AbortSignal): Promise<StepsResponse> {
    return this.getJson<StepsResponse>(`/runs/${encodeURIComponent(String(id))}/steps${stepsQuery(query)}`, signal);
  }

  /** GET a JSON document under the API base, asking for a token on 401. */
  getJson<T>(path: string, signal?: AbortSignal): Promise<T> {
    return this.request<T>("GET", path, undefined, signal);
  }

  /** POST / PATCH / DELETE with an optional JSON body; same token handling as GET. */
  sendJson<T>(method: "POST" | "PATCH" | "PUT" | "DELETE", path: string, body?: unknown, signal?: AbortSignal): Promise<T> {
    return this.request<T>(method, path, body, signal);
  }

  private async request<T>(method: string, path: string, body: unknown, signal?: AbortSignal): Promise<T> {
    const res = await this.requestRaw(method, path, body, signal);
    if (res.status === 204) return undefined as T;
    const text = await res.text();
    return (text ? JSON.parse(text) : undefined) as T;
  }

  /** GET a non-JSON document (CSV export) as a Blob, with the same token handling. */
  async getBlob(path: string, signal?: AbortSignal): Promise<Blob> {
    const res = await this.requestRaw("GET", path, undefined, signal, "*/*");
    return res.blob();
  }

  updateRun(id: number, patch: { name?: string; tags?: string[]; notes?: string; pinned?: boolean }): Promise<Run> {
    return this.sendJson<Run>("PATCH", `/runs/${encodeURIComponent(String(id))}`, patch);
  }

  deleteRun(id: number): Promise<unknown> {
    return this.sendJson<unknown>("DELETE", `/runs/${encodeURIComponent(String(id))}`);
  }

  private async requestRaw(method: string, path: string, body: unknown, signal?: AbortSignal, accept = "application/json"): Promise<Response> {
    const url = this.base + path;
    let sentToken = this.tokens.get();
    let res = await this.fetchFn(url, this.init(method, body, sentToken, signal, accept));
    // One prompt per rejection; a cancelled page stops asking.
    for (let tries = 0; res.status === 401 && tries < 3; tries++) {
      if (signal?.aborted) break;
      const token = await this.tokenAfterRejection(sentToken);
      sentToken = token;
      res = await this.fetchFn(url, this.init(method, body, token, signal, accept));
    }
    if (!res.ok) {
      const { detail, fields } = await errorDetail(res);
      throw new ApiError(res.status, detail, url, fields);
    }
    return res;
  }

  private init(method: string, body: unknown, token: string | null, signal?: AbortSignal, accept = "application/json"): RequestInit {
    const headers: Record<string, string> = { Accept: accept };
    if (token) headers.Authorization = `Bearer ${token}`;
    const init: RequestInit = { headers, credentials: "same-origin" };
    if (method !== "GET") init.method = method;
    if (body !== undefined) {
      headers["Content-Type"] = "application/json";
      init.body = JSON.stringify(body);
    }
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
          const t = (token ?? "").trim();
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
  if (query.beforeStep !== undefined) params.set("before_step", String(query.beforeStep));
  const s = params.toString();
  return s ? `?${s}` : "";
}

/** `?a=1&b=x` from the defined entries, or "" when none. */
export function queryString(params: Record<string, string | number | undefined | null>): string {
  const p = new URLSearchParams();
  for (const [k, v] of Object.entries(params)) {
    if (v === undefined || v === null || v === "") continue;
    if (typeof v === "number" && !Number.isFinite(v)) continue;
    p.set(k, String(v));
  }
  const s = p.toString();
  return s ? `?${s}` : "";
}

/** Readable detail of an error body, and per-field messages of a 422 list. */
export function parseErrorBody(body: unknown): { detail: string | null; fields: FieldError[] } {
  if (!body || typeof body !== "object" || !("detail" in body)) return { detail: null, fields: [] };
  const d = (body as { detail: unknown }).detail;
  if (typeof d === "string") return { detail: d, fields: [] };
  if (Array.isArray(d)) {
    const fields: FieldError[] = [];
    for (const item of d) {
      if (!item || typeof item !== "object") continue;
      const loc = Array.isArray((item as { loc?: unknown }).loc) ? ((item as { loc: unknown[] }).loc) : [];
      const named = loc.filter((x) => typeof x === "string" && x !== "body" && x !== "query");
      const field = named.length > 0 ? String(named[named.length - 1]) : "";
      const raw = String((item as { msg?: unknown }).msg ?? "invalid");
      fields.push({ field, message: raw.replace(/^Value error, /, "") });
    }
    const detail = fields.map((f) => (f.field ? `${f.field}: ${f.message}` : f.message)).join("; ") || null;
    return { detail, fields };
  }
  return { detail: JSON.stringify(d), fields: [] };
}

async function errorDetail(res: Response): Promise<{ detail: string | null; fields: FieldError[] }> {
  try {
    return parseErrorBody(await res.json());
  } catch {
    return { detail: null, fields: [] };
  }
}
