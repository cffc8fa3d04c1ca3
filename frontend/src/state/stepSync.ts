// Keeps one run's step series complete while live data streams in.
//
// Catch-up rule (the same on first load and after every reconnect):
//   1. the caller subscribes to the run on the live socket first;
//   2. live `steps` messages are buffered while a fetch is in flight;
//   3. the fetch answers: the whole run downsampled to `max_points` the first
//      time, `after_step=<last step held>` afterwards;
//   4. the buffered messages are merged keeping only steps greater than the
//      last step held, so there are no duplicates and no gaps.
// A fetch that fails is retried with backoff, still buffering.

import { Backoff } from "../api/backoff";
import { appendNewer, compactSeries, emptySeries, lastStep, type StepSeries } from "./series";
import type { StepColumns, StepsResponse } from "../api/types";

export interface StepQuery {
  maxPoints?: number;
  afterStep?: number;
  /** Upper end of a zoomed range (servers without ranges ignore it; callers clip). */
  beforeStep?: number;
}

export type FetchSteps = (query: StepQuery) => Promise<StepsResponse>;

export type SyncPhase = "idle" | "syncing" | "live" | "stopped";

export interface RetryTimers {
  setTimeout(fn: () => void, ms: number): unknown;
  clearTimeout(handle: unknown): void;
}

export interface StepSyncOptions {
  fetchSteps: FetchSteps;
  /** Points the chart can show (about twice its width in pixels). */
  maxPoints: () => number;
  /** Called after the series changed; `series` may be a new object after compaction. */
  onChange: (series: StepSeries) => void;
  /** Called when a fetch fails; return false to stop retrying (e.g. on 404). */
  onError?: (err: unknown) => boolean | void;
  timers?: RetryTimers;
  retryBackoff?: Backoff;
  /** Live rows buffered during a fetch before the oldest chunks are dropped. */
  maxBufferedRows?: number;
  /** Compact the held series once it holds more points than this. */
  compactAt?: number;
}

const defaultTimers: RetryTimers = {
  setTimeout: (fn, ms) => globalThis.setTimeout(fn, ms),
  clearTimeout: (h) => globalThis.clearTimeout(h as ReturnType<typeof setTimeout>),
};

export class StepSync {
  private readonly opts: StepSyncOptions;
  private readonly timers: RetryTimers;
  private readonly retryBackoff: Backoff;
  private seriesValue: StepSeries = emptySeries();
  private phaseValue: SyncPhase = "idle";
  private generation = 0;
  private buffer: StepColumns[] = [];
  private bufferedRows = 0;
  private loaded = false;
  private retryHandle: unknown = null;
  private totalValue: number | null = null;

  constructor(opts: StepSyncOptions) {
    this.opts = opts;
    this.timers = opts.timers ?? defaultTimers;
    this.retryBackoff = opts.retryBackoff ?? new Backoff({ baseMs: 1000, maxMs: 30_000 });
  }

  get series(): StepSeries {
    return this.seriesValue;
  }

  get phase(): SyncPhase {
    return this.phaseValue;
  }

  /** Steps the server holds for the run, as far as this client knows. */
  get total(): number | null {
    return this.totalValue;
  }

  /** Whether the first fetch has answered. */
  get hasLoaded(): boolean {
    return this.loaded;
  }

  /** Start (or restart) a catch-up: on open, after a reconnect, after a notice. */
  sync(): void {
    if (this.phaseValue === "stopped") return;
    this.clearRetry();
    const gen = ++this.generation;
    this.phaseValue = "syncing";
    const last = lastStep(this.seriesValue);
    const query: StepQuery =
      this.loaded && last !== null
        ? { afterStep: last }
        : { maxPoints: Math.max(1, Math.round(this.opts.maxPoints())) };
    let pending: Promise<StepsResponse>;
    try {
      pending = this.opts.fetchSteps(query);
    } catch (err) {
      pending = Promise.reject(err);
    }
    pending.then(
      (resp) => this.onFetched(gen, query, resp),
      (err: unknown) => this.onFetchFailed(gen, err),
    );
  }

  /** Feed one live `steps` message for this run. */
  onLive(data: StepColumns): void {
    if (this.phaseValue === "stopped") return;
    if (this.phaseValue !== "live") {
      this.buffer.push(data);
      this.bufferedRows += Array.isArray(data.step) ? data.step.length : 0;
      const cap = this.opts.maxBufferedRows ?? 200_000;
      // The fetch in flight covers what was committed before it; dropping the
      // oldest buffered chunks only costs a re-fetch, never a wrong merge.
      while (this.bufferedRows > cap && this.buffer.length > 1) {
        const dropped = this.buffer.shift()!;
        this.bufferedRows -= dropped.step.length;
      }
      return;
    }
    const added = appendNewer(this.seriesValue, data);
    if (added > 0) {
      if (this.totalValue !== null) this.totalValue += added;
      this.afterAppend();
    }
  }

  stop(): void {
    this.phaseValue = "stopped";
    this.generation++;
    this.clearRetry();
    this.buffer = [];
    this.bufferedRows = 0;
  }

  private onFetched(gen: number, query: StepQuery, resp: StepsResponse): void {
    if (this.phaseValue === "stopped") return;
    // Even an answer superseded by a newer sync holds valid rows: keep them.
    const added = appendNewer(this.seriesValue, resp);
    if (query.afterStep === undefined && typeof resp.total === "number") {
      this.totalValue = resp.total;
    } else if (this.totalValue !== null) {
      this.totalValue += added;
    } else if (typeof resp.total === "number") {
      this.totalValue = resp.total;
    }
    this.loaded = true;
    if (gen === this.generation) {
      this.retryBackoff.reset();
      for (const chunk of this.buffer) {
        const n = appendNewer(this.seriesValue, chunk);
        if (this.totalValue !== null) this.totalValue += n;
      }
      this.buffer = [];
      this.bufferedRows = 0;
      this.phaseValue = "live";
    }
    this.afterAppend();
  }

  private onFetchFailed(gen: number, err: unknown): void {
    if (this.phaseValue === "stopped" || gen !== this.generation) return;
    const retry = this.opts.onError?.(err);
    if (retry === false) return;
    const delay = this.retryBackoff.next();
    this.retryHandle = this.timers.setTimeout(() => {
      this.retryHandle = null;
      if (gen === this.generation) this.sync();
    }, delay);
  }

  private afterAppend(): void {
    const limit = this.opts.compactAt ?? 50_000;
    if (this.seriesValue.step.length > limit) {
      const target = Math.max(1, Math.round(this.opts.maxPoints()));
      this.seriesValue = compactSeries(this.seriesValue, target, target);
    }
    this.opts.onChange(this.seriesValue);
  }

  private clearRetry(): void {
    if (this.retryHandle !== null) {
      this.timers.clearTimeout(this.retryHandle);
      this.retryHandle = null;
    }
  }
}
