import { describe, expect, it } from "vitest";
import { Backoff } from "./backoff";
import { LiveClient, liveUrl, parseLiveMessage, type SocketLike, type Timers } from "./liveClient";
import { makeRun } from "../state/testing";

class FakeSocket implements SocketLike {
  readyState = 0;
  sent: unknown[] = [];
  closed = false;
  onopen: ((ev: unknown) => void) | null = null;
  onmessage: ((ev: { data: unknown }) => void) | null = null;
  onclose: ((ev: unknown) => void) | null = null;
  onerror: ((ev: unknown) => void) | null = null;
  constructor(readonly url: string) {}
  send(data: string): void {
    this.sent.push(JSON.parse(data));
  }
  close(): void {
    this.closed = true;
    this.readyState = 3;
  }
  // Server side of the test:
  open(): void {
    this.readyState = 1;
    this.onopen?.({});
  }
  receive(msg: unknown): void {
    this.onmessage?.({ data: typeof msg === "string" ? msg : JSON.stringify(msg) });
  }
  drop(): void {
    this.readyState = 3;
    this.onerror?.({});
    this.onclose?.({});
  }
}

class FakeTimers implements Timers {
  time = 0;
  private queue: { at: number; fn: () => void; id: number }[] = [];
  private nextId = 1;
  setTimeout(fn: () => void, ms: number): unknown {
    const id = this.nextId++;
    this.queue.push({ at: this.time + ms, fn, id });
    return id;
  }
  clearTimeout(handle: unknown): void {
    this.queue = this.queue.filter((t) => t.id !== handle);
  }
  now(): number {
    return this.time;
  }
  get pending(): number[] {
    return this.queue.map((t) => t.at - this.time);
  }
  advance(ms: number): void {
    this.time += ms;
    for (;;) {
      const due = this.queue.filter((t) => t.at <= this.time).sort((a, b) => a.at - b.at)[0];
      if (!due) break;
      this.queue = this.queue.filter((t) => t !== due);
      due.fn();
    }
  }
}

function setup(token: string | null = null) {
  const sockets: FakeSocket[] = [];
  const timers = new FakeTimers();
  const client = new LiveClient({
    url: () => liveUrl({ protocol: "http:", host: "127.0.0.1:8470" }, token),
    createSocket: (url) => {
      const s = new FakeSocket(url);
      sockets.push(s);
      return s;
    },
    timers,
    backoff: new Backoff({ baseMs: 100, maxMs: 800, jitter: 0 }),
    stableAfterMs: 1000,
  });
  const last = () => sockets[sockets.length - 1]!;
  return { client, sockets, timers, last };
}

describe("liveUrl", () => {
  it("uses ws: for http pages and wss: for https pages", () => {
    expect(liveUrl({ protocol: "http:", host: "localhost:5173" }, null)).toBe("ws://localhost:5173/api/v1/live");
    expect(liveUrl({ protocol: "https:", host: "stoker.example" }, null)).toBe("wss://stoker.example/api/v1/live");
  });
  it("passes the token as an encoded query parameter", () => {
    expect(liveUrl({ protocol: "http:", host: "h" }, "a b&c")).toBe("ws://h/api/v1/live?token=a%20b%26c");
  });
});

describe("parseLiveMessage", () => {
  it("accepts the three server message types", () => {
    expect(parseLiveMessage(JSON.stringify({ type: "run", run: makeRun() }))?.type).toBe("run");
    expect(
      parseLiveMessage(JSON.stringify({ type: "steps", run_id: 1, data: { step: [], t: [], dur: [], wait: [] } }))?.type,
    ).toBe("steps");
    expect(parseLiveMessage(JSON.stringify({ type: "notice", message: "dropped 10" }))).toEqual({
      type: "notice",
      message: "dropped 10",
    });
  });
  it("rejects malformed frames", () => {
    expect(parseLiveMessage("not json")).toBeNull();
    expect(parseLiveMessage(JSON.stringify({ type: "steps", run_id: "1" }))).toBeNull();
    expect(parseLiveMessage(JSON.stringify({ type: "mystery" }))).toBeNull();
    expect(parseLiveMessage(42)).toBeNull();
  });
});

describe("LiveClient", () => {
  it("connects to the live URL with the token and reports the state", () => {
    const { client, last } = setup("secret");
    const states: string[] = [];
    client.on("state", (s) => states.push(s.kind));
    client.start();
    expect(last().url).toBe("ws://127.0.0.1:8470/api/v1/live?token=secret");
    last().open();
    expect(states).toEqual(["connecting", "open"]);
    expect(client.connected).toBe(true);
  });

  it("dispatches run, steps and notice messages to listeners", () => {
    const { client, last } = setup();
    const got: string[] = [];
    client.on("run", (r) => got.push(`run:${r.id}`));
    client.on("steps", (s) => got.push(`steps:${s.runId}:${s.data.step.join(",")}`));
    client.on("notice", (n) => got.push(`notice:${n.message}`));
    client.start();
    last().open();
    last().receive({ type: "run", run: makeRun({ id: 4 }) });
    last().receive({ type: "steps", run_id: 4, data: { step: [1, 2], t: [0, 0], dur: [0, 0], wait: [0, 0] } });
    last().receive({ type: "notice", message: "slow" });
    last().receive("garbage");
    expect(got).toEqual(["run:4", "steps:4:1,2", "notice:slow"]);
  });

  it("sends subscribe immediately when open and on open when not yet connected", () => {
    const { client, last } = setup();
    client.start();
    client.subscribe(7);
    expect(last().sent).toEqual([]);
    last().open();
    expect(last().sent).toEqual([{ type: "subscribe", run_id: 7 }]);
    client.subscribe(8);
    expect(last().sent).toEqual([
      { type: "subscribe", run_id: 7 },
      { type: "subscribe", run_id: 8 },
    ]);
  });

  it("reference-counts subscriptions and unsubscribes on the last release", () => {
    const { client, last } = setup();
    client.start();
    last().open();
    client.subscribe(3);
    client.subscribe(3);
    client.unsubscribe(3);
    expect(client.subscriptions).toEqual([3]);
    client.unsubscribe(3);
    expect(client.subscriptions).toEqual([]);
    expect(last().sent).toEqual([
      { type: "subscribe", run_id: 3 },
      { type: "unsubscribe", run_id: 3 },
    ]);
  });

  it("reconnects with capped exponential backoff and resubscribes", () => {
    const { client, sockets, timers, last } = setup();
    const opens: boolean[] = [];
    client.on("open", (e) => opens.push(e.reconnect));
    client.start();
    client.subscribe(5);
    last().open();
    last().drop();
    expect(timers.pending).toEqual([100]);
    expect(client.state).toEqual({ kind: "waiting", retryAt: 100 });

    // Failed attempts double the delay up to the cap.
    const delays: number[] = [];
    for (let i = 0; i < 5; i++) {
      delays.push(timers.pending[0]!);
      timers.advance(timers.pending[0]!);
      last().drop();
    }
    expect(delays).toEqual([100, 200, 400, 800, 800]);

    timers.advance(timers.pending[0]!);
    last().open();
    expect(last().sent).toEqual([{ type: "subscribe", run_id: 5 }]);
    expect(opens).toEqual([false, true]);
    expect(sockets.length).toBe(7);
  });

  it("resets the backoff only after a connection stayed open long enough", () => {
    const { client, timers, last } = setup();
    client.start();
    last().open();
    last().drop(); // flapping: opened and dropped at once
    timers.advance(100);
    last().open();
    last().drop();
    expect(timers.pending).toEqual([200]);
    timers.advance(200);
    last().open();
    timers.advance(1000); // stable
    last().drop();
    expect(timers.pending).toEqual([100]);
  });

  it("reconnects at once with a fresh URL when asked (new token)", () => {
    let token: string | null = null;
    const sockets: FakeSocket[] = [];
    const timers = new FakeTimers();
    const client = new LiveClient({
      url: () => liveUrl({ protocol: "http:", host: "h" }, token),
      createSocket: (url) => {
        const s = new FakeSocket(url);
        sockets.push(s);
        return s;
      },
      timers,
    });
    client.start();
    sockets[0]!.drop();
    expect(timers.pending.length).toBe(1);
    token = "t0k";
    client.reconnectNow();
    expect(timers.pending).toEqual([]);
    expect(sockets[1]!.url).toBe("ws://h/api/v1/live?token=t0k");
  });

  it("stops for good: closes the socket and schedules nothing", () => {
    const { client, timers, last } = setup();
    client.start();
    last().open();
    const sock = last();
    client.stop();
    expect(sock.closed).toBe(true);
    expect(timers.pending).toEqual([]);
    expect(client.state.kind).toBe("stopped");
  });

  it("ignores events from a socket it has already replaced", () => {
    const { client, sockets, last } = setup();
    const runs: number[] = [];
    client.on("run", (r) => runs.push(r.id));
    client.start();
    const first = last();
    client.reconnectNow();
    first.receive({ type: "run", run: makeRun({ id: 1 }) });
    last().open();
    last().receive({ type: "run", run: makeRun({ id: 2 }) });
    expect(runs).toEqual([2]);
    expect(sockets.length).toBe(2);
  });

  it("keeps dispatching when one listener throws", () => {
    const { client, last } = setup();
    const got: number[] = [];
    const orig = console.error;
    console.error = () => {};
    try {
      client.on("run", () => {
        throw new Error("boom");
      });
      client.on("run", (r) => got.push(r.id));
      client.start();
      last().open();
      last().receive({ type: "run", run: makeRun({ id: 3 }) });
    } finally {
      console.error = orig;
    }
    expect(got).toEqual([3]);
  });
});

describe("parseLiveMessage: diagnosis and alert messages", () => {
  it("reads a verdict with the diagnosis nested or inline", () => {
    const nested = parseLiveMessage(JSON.stringify({ type: "verdict", run_id: 4, diagnosis: { verdict: "stalled", source: "measured" } }));
    expect(nested).toMatchObject({ type: "verdict", run_id: 4, diagnosis: { verdict: "stalled" } });
    const inline = parseLiveMessage(JSON.stringify({ type: "verdict", run_id: 5, verdict: "highly_input_bound", input_wait_share: 0.4, evidence: [], advice: ["prefetch"] }));
    expect(inline).toMatchObject({ type: "verdict", run_id: 5, diagnosis: { verdict: "highly_input_bound", input_wait_share: 0.4, advice: ["prefetch"] } });
    expect(parseLiveMessage(JSON.stringify({ type: "verdict", run_id: 5, verdict: "nope" }))).toBeNull();
  });
  it("reads alerts and events", () => {
    const a = parseLiveMessage(JSON.stringify({ type: "alert", alert: { id: 1, run_id: 2, state: "firing", rule_name: "low util", message: "GPU 40 %" } }));
    expect(a).toMatchObject({ type: "alert", alert: { id: 1, state: "firing", rule_name: "low util" } });
    const e = parseLiveMessage(JSON.stringify({ type: "event", event: { id: 3, run_id: 2, kind: "verdict", message: "now input-bound", at: "2024-01-01T00:00:00Z" } }));
    expect(e).toMatchObject({ type: "event", event: { id: 3, kind: "verdict", message: "now input-bound" } });
    expect(parseLiveMessage(JSON.stringify({ type: "event", event: { id: 3 } }))).toBeNull();
    expect(parseLiveMessage(JSON.stringify({ type: "run_deleted", run_id: 3 }))).toEqual({ type: "run_deleted", run_id: 3 });
  });
  it("dispatches verdicts to listeners", () => {
    const { client, last } = setup();
    const got: number[] = [];
    client.on("verdict", ({ runId }) => got.push(runId));
    client.start();
    last().open();
    last().receive({ type: "verdict", run_id: 8, verdict: "not_input_bound" });
    expect(got).toEqual([8]);
  });
});

describe("steps messages with a rank", () => {
  it("passes the worker rank on to listeners", () => {
    const { client, last } = setup();
    const got: (number | undefined)[] = [];
    client.on("steps", ({ rank }) => got.push(rank));
    client.start();
    last().open();
    last().receive({ type: "steps", run_id: 1, rank: 2, data: { step: [1], t: [0], dur: [0], wait: [null] } });
    last().receive({ type: "steps", run_id: 1, data: { step: [2], t: [0], dur: [0], wait: [null] } });
    expect(got).toEqual([2, undefined]);
  });
});
