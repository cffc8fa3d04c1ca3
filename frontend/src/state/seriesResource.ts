// One series of a run as the run page holds it (steps, logged metrics or device
// and host samples): an overview of the whole run, live catch-up onto it, and,
// while a chart is zoomed into downsampled data, the visible range fetched again
// at the chart's resolution and spliced in. No DOM; unit-tested.

import type { ZoomRange } from "../charts/liveChart";

export type ResourceState = "loading" | "ok" | "error";

/** How one kind of series is fetched and combined. */
export interface SeriesSource<T> {
  /** The whole run at about `widthPx` points. */
  fetchOverview?(widthPx: number, signal: AbortSignal): Promise<T>;
  /** Rows newer than those held (live catch-up); null when `held` gives no anchor, then the overview is fetched. */
  fetchNewer?(held: T, signal: AbortSignal): Promise<T> | null;
  merge?(held: T, newer: T): T;
  /** Whether a zoom onto `range` deserves a re-fetch at the chart's resolution. */
  wantsDetail(held: T, range: ZoomRange, widthPx: number): boolean;
  fetchDetail(range: ZoomRange, widthPx: number, signal: AbortSignal): Promise<T>;
  /** The overview with `range` replaced by `detail`. */
  splice(overview: T, detail: T, range: ZoomRange): T;
}

export interface SeriesResourceOptions {
  /** The width of the chart that shows the series, in CSS pixels. */
  widthPx: () => number;
  signal: AbortSignal;
  /** The held data, its state or its refined range changed. */
  onChange: () => void;
}

export class SeriesResource<T> {
  state: ResourceState = "loading";
  private overview: T | null = null;
  private detail: { range: ZoomRange; data: T } | null = null;
  private zoom: ZoomRange | null = null;
  private readonly source: SeriesSource<T>;
  private readonly opts: SeriesResourceOptions;

  constructor(source: SeriesSource<T>, opts: SeriesResourceOptions) {
    this.source = source;
    this.opts = opts;
  }

  /** The overview as held (null before the first answer). */
  get held(): T | null {
    return this.overview;
  }

  /** What the chart shows: the overview with the refined range spliced in. */
  get data(): T | null {
    const d = this.detail;
    if (this.overview === null || d === null) return this.overview;
    return this.source.splice(this.overview, d.data, d.range);
  }

  /** The zoomed range now shown at full resolution, if any. */
  get refined(): ZoomRange | null {
    return this.detail?.range ?? null;
  }

  /** An overview from elsewhere (the step series comes from StepSync, which also follows the live stream). */
  setOverview(data: T): void {
    this.overview = data;
    this.state = "ok";
  }

  /**
   * Fetch the overview (`initial`, or nothing held yet), or else only what is
   * newer than the held data, merged onto it.
   */
  async load(initial: boolean): Promise<void> {
    const src = this.source;
    const { signal } = this.opts;
    const held = this.overview;
    try {
      const newer = !initial && held !== null ? (src.fetchNewer?.(held, signal) ?? null) : null;
      if (newer !== null && held !== null) {
        const rows = await newer;
        if (signal.aborted) return;
        this.overview = src.merge ? src.merge(held, rows) : rows;
      } else {
        const rows = await src.fetchOverview!(Math.max(200, this.opts.widthPx()), signal);
        if (signal.aborted) return;
        this.overview = rows;
      }
      this.state = "ok";
    } catch {
      if (signal.aborted) return;
      this.state = "error";
    }
    this.opts.onChange();
  }

  /** The charts' zoom changed (null: reset); `refine` acts on the latest one. */
  setZoom(range: ZoomRange | null): void {
    this.zoom = range;
  }

  /** Fetch the zoomed range at the chart's resolution, or drop the detail when the zoom was reset. */
  async refine(): Promise<void> {
    const range = this.zoom;
    if (!range) {
      if (this.detail) {
        this.detail = null;
        this.opts.onChange();
      }
      return;
    }
    const held = this.overview;
    const width = this.opts.widthPx();
    if (held === null || !this.source.wantsDetail(held, range, width)) return;
    const { signal } = this.opts;
    try {
      const data = await this.source.fetchDetail(range, width, signal);
      if (signal.aborted || this.zoom !== range) return;
      this.detail = { range, data };
      this.opts.onChange();
    } catch {
      /* keep the overview's min/max band */
    }
  }
}
