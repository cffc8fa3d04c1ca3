// The browser's one WebSocket to `/api/v1/live`.
//
// It reconnects by itself with capped exponential backoff, remembers which
// runs are subscribed (reference-counted) and subscribes them again on every
// new connection, then tells its listeners that a connection opened so that
// they can fetch whatever they missed while it was down. The socket, timers
// and clock are injectable: the tests drive them by hand.

import { Backoff } from "./backoff";
import { alertFromMessage } from "../state/alerts";
import type { Alert, ClientMessage, Diagnosis, LiveMessage, Run, RunEvent, StepColumns } from "./types";
import { parseDiagnosis } from "../state/verdict";

/** The part of the browser's WebSocket this client uses. */
export interface SocketLike {
  readonly readyState: number;
  send(data: string): void;
  close(code?: number, reason?: string): void;
  onopen: ((ev: unknown) => void) | null;
  onmessage: ((ev: { data: unknown }) => void) | null;
  onclose: ((ev: unknown) => void) | null;
  onerror: ((ev: unknown) => void) | null;
}

export type SocketFactory = (url: string) => SocketLike;

export interface Timers {
  setTimeout(fn: () => void, ms: number): unknown;
  clearTimeout(handle: unknown): void;
  now(): number;
}

const OPEN = 1;

export type ConnectionState =
  | { kind: "connecting" }
  | { kind: "open" }
  | { kind: "waiting"; retryAt: number }
  | { kind: "stopped" };

export interface LiveEvents {
  /** A connection opened and subscriptions were sent; `reconnect` after the first. */
  open: { reconnect: boolean };
  run: Run;
  /** `rank` is absent for single-worker runs (rank 0). */
  steps: { runId: number; data: StepColumns; rank?: number };
  notice: { message: string };
  verdict: { runId: number; diagnosis: Diagnosis };
  alert: Alert;
  event: RunEvent;
  deleted: { runId: number };
  profile: { runId: number; profile: Record<string, unknown> };
  state: ConnectionState;
}

type Listener<K extends keyof LiveEvents> = (payload: LiveEvents[K]) => void;

/** WebSocket URL of the live endpoint for a page location, with the token if any. */
export function liveUrl(
  loc: { protocol: string; host: string },
  token: string | null,
  path = "/api/v1/live",
): string {
  const scheme = loc.protocol === "https:" ? "wss:" : "ws:";
  const query = token ? `?token=${encodeURIComponent(token)}` : "";
  return `${scheme}//${loc.host}${path}${query}`;
}

/** Parse one server frame; anything malformed yields null. */
export function parseLiveMessage(raw: unknown): LiveMessage | null {
  if (typeof raw !== "string") return null;
  let msg: unknown;
  try {
    msg = JSON.parse(raw);
  } catch {
    return null;
  }
  if (typeof msg !== "object" || msg === null) return null;
  const m = msg as Record<string, unknown>;
  switch (m.type) {
    case "run":
      return typeof m.run === "object" && m.run !== null ? (m as LiveMessage) : null;
    case "steps":
      return typeof m.run_id === "number" && typeof m.data === "object" && m.data !== null
        ? (m as LiveMessage)
        : null;
    case "notice":
      return { type: "notice", message: String(m.message ?? "") };
    case "run_deleted":
      return typeof m.run_id === "number" ? { type: "run_deleted", run_id: m.run_id } : null;
    case "profile":
      return typeof m.run_id === "number" && typeof m.profile === "object" && m.profile !== null
        ? { type: "profile", run_id: m.run_id, profile: m.profile as Record<string, unknown> }
        : null;
    case "verdict": {
      // `{type, run_id, diagnosis: {...}}` or the diagnosis fields inline.
      const inner = typeof m.diagnosis === "object" && m.diagnosis !== null ? m.diagnosis : m;
      const diagnosis = parseDiagnosis(inner);
      const runId = typeof m.run_id === "number" ? m.run_id : diagnosis?.run_id;
      return diagnosis && typeof runId === "number" ? { type: "verdict", run_id: runId, diagnosis } : null;
    }
    case "alert": {
      const alert = alertFromMessage(m);
      return alert ? { type: "alert", alert } : null;
    }
    case "event": {
      const e = (typeof m.event === "object" && m.event !== null ? m.event : m) as Record<string, unknown>;
      if (typeof e.run_id !== "number") return null;
      return {
        type: "event",
        event: {
          id: typeof e.id === "number" ? e.id : 0,
          run_id: e.run_id,
          at: String(e.at ?? new Date().toISOString()),
          kind: String(e.kind ?? "event"),
          message: String(e.message ?? ""),
          data: typeof e.data === "object" && e.data !== null ? (e.data as Record<string, unknown>) : {},
        },
      };
    }
    default:
      return null;
  }
}

export interface LiveClientOptions {
  /** Called for every connection attempt, so a token set meanwhile is used. */
  url: () => string;
  createSocket?: SocketFactory;
  timers?: Timers;
  backoff?: Backoff;
  /** A connection that stayed open this long resets the backoff. */
  stableAfterMs?: number;
}

const browserTimers: Timers = {
  setTimeout: (fn, ms) => globalThis.setTimeout(fn, ms),
  clearTimeout: (h) => globalThis.clearTimeout(h as ReturnType<typeof setTimeout>),
  now: () => Date.now(),
};

export class LiveClient {
  private readonly opts: LiveClientOptions;
  private readonly createSocket: SocketFactory;
  private readonly timers: Timers;
  private readonly backoff: Backoff;
  private readonly stableAfterMs: number;
  private socket: SocketLike | null = null;
  private retryHandle: unknown = null;
  private openedAt: number | null = null;
  private everOpened = false;
  private running = false;
  private stateValue: ConnectionState = { kind: "stopped" };
  private readonly subs = new Map<number, number>();
  private readonly listeners: { [K in keyof LiveEvents]: Set<Listener<K>> } = {
    open: new Set(),
    run: new Set(),
    steps: new Set(),
    notice: new Set(),
    verdict: new Set(),
    alert: new Set(),
    event: new Set(),
    deleted: new Set(),
    profile: new Set(),
    state: new Set(),
  };

  constructor(opts: LiveClientOptions) {
    this.opts = opts;
    this.createSocket =
      opts.createSocket ?? ((url) => new WebSocket(url) as unknown as SocketLike);
    this.timers = opts.timers ?? browserTimers;
    this.backoff = opts.backoff ?? new Backoff();
    this.stableAfterMs = opts.stableAfterMs ?? 5000;
  }

  get state(): ConnectionState {
    return this.stateValue;
  }

  get connected(): boolean {
    return this.socket !== null && this.socket.readyState === OPEN && this.openedAt !== null;
  }

  /** Run ids currently subscribed. */
  get subscriptions(): number[] {
    return [...this.subs.keys()];
  }

  on<K extends keyof LiveEvents>(event: K, listener: Listener<K>): () => void {
    const set = this.listeners[event] as Set<Listener<K>>;
    set.add(listener);
    return () => set.delete(listener);
  }

  start(): void {
    if (this.running) return;
    this.running = true;
    this.connect();
  }

  stop(): void {
    this.running = false;
    this.clearRetry();
    this.dropSocket();
    this.setState({ kind: "stopped" });
  }

  /** Drop the current connection (or pending retry) and connect again now. */
  reconnectNow(): void {
    if (!this.running) return;
    this.clearRetry();
    this.dropSocket();
    this.backoff.reset();
    this.connect();
  }

  /** Subscribe to a run's steps; counted, so two views may share one run. */
  subscribe(runId: number): void {
    const n = this.subs.get(runId) ?? 0;
    this.subs.set(runId, n + 1);
    if (n === 0) this.send({ type: "subscribe", run_id: runId });
  }

  unsubscribe(runId: number): void {
    const n = this.subs.get(runId) ?? 0;
    if (n <= 0) return;
    if (n === 1) {
      this.subs.delete(runId);
      this.send({ type: "unsubscribe", run_id: runId });
    } else {
      this.subs.set(runId, n - 1);
    }
  }

  private send(msg: ClientMessage): void {
    if (this.connected) this.socket!.send(JSON.stringify(msg));
  }

  private setState(state: ConnectionState): void {
    this.stateValue = state;
    this.emit("state", state);
  }

  private emit<K extends keyof LiveEvents>(event: K, payload: LiveEvents[K]): void {
    for (const l of [...(this.listeners[event] as Set<Listener<K>>)]) {
      try {
        l(payload);
      } catch (err) {
        console.error(`stoker: live '${event}' listener failed`, err);
      }
    }
  }

  private connect(): void {
    if (!this.running) return;
    this.setState({ kind: "connecting" });
    let sock: SocketLike;
    try {
      sock = this.createSocket(this.opts.url());
    } catch (err) {
      console.warn("stoker: cannot open live socket", err);
      this.scheduleRetry();
      return;
    }
    this.socket = sock;
    this.openedAt = null;
    sock.onopen = () => {
      if (this.socket !== sock) return;
      this.openedAt = this.timers.now();
      const reconnect = this.everOpened;
      this.everOpened = true;
      for (const runId of this.subs.keys()) sock.send(JSON.stringify({ type: "subscribe", run_id: runId }));
      this.setState({ kind: "open" });
      this.emit("open", { reconnect });
    };
    sock.onmessage = (ev) => {
      if (this.socket !== sock) return;
      this.dispatch(ev.data);
    };
    sock.onerror = () => {
      // A close event always follows; reconnecting happens there.
    };
    sock.onclose = () => {
      if (this.socket !== sock) return;
      const openedAt = this.openedAt;
      this.socket = null;
      this.openedAt = null;
      if (openedAt !== null && this.timers.now() - openedAt >= this.stableAfterMs) this.backoff.reset();
      this.scheduleRetry();
    };
  }

  private dispatch(raw: unknown): void {
    const msg = parseLiveMessage(raw);
    if (!msg) return;
    switch (msg.type) {
      case "run":
        this.emit("run", msg.run);
        break;
      case "steps":
        this.emit("steps", typeof msg.rank === "number" ? { runId: msg.run_id, data: msg.data, rank: msg.rank } : { runId: msg.run_id, data: msg.data });
        break;
      case "notice":
        this.emit("notice", { message: msg.message });
        break;
      case "verdict":
        this.emit("verdict", { runId: msg.run_id, diagnosis: msg.diagnosis });
        break;
      case "alert":
        this.emit("alert", msg.alert);
        break;
      case "event":
        this.emit("event", msg.event);
        break;
      case "run_deleted":
        this.emit("deleted", { runId: msg.run_id });
        break;
      case "profile":
        this.emit("profile", { runId: msg.run_id, profile: msg.profile });
        break;
    }
  }

  private scheduleRetry(): void {
    if (!this.running) return;
    this.clearRetry();
    const delay = this.backoff.next();
    this.setState({ kind: "waiting", retryAt: this.timers.now() + delay });
    this.retryHandle = this.timers.setTimeout(() => {
      this.retryHandle = null;
      this.connect();
    }, delay);
  }

  private clearRetry(): void {
    if (this.retryHandle !== null) {
      this.timers.clearTimeout(this.retryHandle);
      this.retryHandle = null;
    }
  }

  private dropSocket(): void {
    const sock = this.socket;
    this.socket = null;
    this.openedAt = null;
    if (sock) {
      sock.onopen = sock.onmessage = sock.onclose = sock.onerror = null;
      try {
        sock.close(1000, "client closing");
      } catch {
        /* already closed */
      }
    }
  }
}
