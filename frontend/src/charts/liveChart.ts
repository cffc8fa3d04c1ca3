// One owner for each uPlot instance's life, for every chart in the UI:
//
// - create (and re-create when the set of series changes or the theme flips),
// - `setData` at most once per animation frame: callers hand over the newest
//   data as often as it arrives, the frame callback draws the last one,
// - `setSize` from a ResizeObserver,
// - "follow live": while the user has zoomed (drag-select), new data is drawn
//   without resetting the scales; double-click (or `resumeFollow`) resets the
//   zoom and following resumes; `onZoom` reports zooms so that the owner can
//   fetch the visible range at full resolution,
// - cursor sync between charts of one x kind (uPlot `cursor.sync`) and zoom
//   sync through a `ChartGroup`,
// - shaded x ranges (starved stretches, throttling) drawn under the series,
// - `destroy`.
//
// The container's `data-points` attribute always equals the number of points
// in the chart's data, `data-follow` whether it follows live data and
// `data-x-range` the visible x range.

import uPlot from "uplot";
import { paletteFromVars, seriesColorsFromVars, type ChartPalette } from "./palette";
import { isFullRange } from "./scales";
import type { ShadeRange } from "../state/samples";
import { THEME_EVENT } from "../app/theme";

export interface ChartStyle {
  palette: ChartPalette;
  colors: string[];
}

/** How a chart turns its data into uPlot options and columns. */
export interface ChartSpec<D> {
  options(data: D, size: { width: number; height: number }, style: ChartStyle): uPlot.Options;
  columns(data: D): uPlot.AlignedData;
  /** Charts are re-created when this changes (a series appeared or vanished). */
  shapeKey(data: D): string;
}

export interface ZoomRange {
  min: number;
  max: number;
}

export interface LiveChartOptions {
  height?: number;
  emptyText?: string;
  /** Told whenever following live turns on or off. */
  onFollowChange?: (follow: boolean) => void;
  /** Told when the visible x range changes by a user zoom (null: back to everything). */
  onZoom?: (range: ZoomRange | null) => void;
  /** Charts with the same key move their cursors together. */
  syncKey?: string;
  /** Charts in one group zoom together. */
  group?: ChartGroup;
  /** Shaded x ranges, read at every redraw. */
  shade?: () => ShadeRange[];
}

/** Charts that share an x axis kind and zoom together. */
export class ChartGroup {
  private readonly members = new Set<LiveChart<unknown>>();
  private applying = false;

  add(c: LiveChart<unknown>): void {
    this.members.add(c);
  }

  remove(c: LiveChart<unknown>): void {
    this.members.delete(c);
  }

  /** A member's user zoom changed; apply it to the others. */
  broadcast(from: LiveChart<unknown>, range: ZoomRange | null): void {
    if (this.applying) return;
    this.applying = true;
    try {
      for (const c of this.members) if (c !== from) c.applyZoom(range);
    } finally {
      this.applying = false;
    }
  }
}

const DARK_QUERY = "(prefers-color-scheme: dark)";

export class LiveChart<D> {
  protected readonly container: HTMLElement;
  private readonly plotHost: HTMLElement;
  private readonly emptyNote: HTMLElement;
  private readonly height: number;
  private readonly spec: ChartSpec<D>;
  private readonly opts: LiveChartOptions;
  private plot: uPlot | null = null;
  private shape: string | null = null;
  private data: D | null = null;
  private drawnPoints = -1;
  private followValue = true;
  private dirty = false;
  private frame: number | null = null;
  private width: number;
  private resizePending = false;
  private readonly resizeObserver: ResizeObserver;
  private readonly media: MediaQueryList | null;
  private readonly onScheme = () => this.rebuild();
  private lastZoom: string | null = null;
  private destroyed = false;

  constructor(container: HTMLElement, spec: ChartSpec<D>, opts: LiveChartOptions = {}) {
    this.container = container;
    this.spec = spec;
    this.opts = opts;
    this.height = opts.height ?? 300;
    this.container.classList.add("chart");
    this.container.style.minHeight = `${this.height}px`;
    this.container.setAttribute("data-points", "0");
    this.container.setAttribute("data-follow", "true");
    this.plotHost = document.createElement("div");
    this.plotHost.className = "chart-plot";
    this.emptyNote = document.createElement("p");
    this.emptyNote.className = "chart-empty";
    this.emptyNote.textContent = opts.emptyText ?? "Waiting for data…";
    this.container.append(this.plotHost, this.emptyNote);
    this.width = this.measureWidth();

    this.resizeObserver = new ResizeObserver((entries) => {
      const entry = entries[entries.length - 1];
      if (!entry) return;
      const w = Math.floor(entry.contentRect.width);
      if (w > 0 && w !== this.width) {
        this.width = w;
        this.resizePending = true;
        this.schedule();
      }
    });
    this.resizeObserver.observe(this.container);

    this.media = typeof matchMedia === "function" ? matchMedia(DARK_QUERY) : null;
    this.media?.addEventListener("change", this.onScheme);
    window.addEventListener(THEME_EVENT, this.onScheme);
    opts.group?.add(this as LiveChart<unknown>);
  }

  /** Width of the plotting area in CSS pixels (for choosing `max_points`). */
  get widthPx(): number {
    return this.width;
  }

  get follow(): boolean {
    return this.followValue;
  }

  /** The visible x range while zoomed, else null. */
  get zoom(): ZoomRange | null {
    if (this.followValue || !this.plot) return null;
    const min = this.plot.scales.x?.min;
    const max = this.plot.scales.x?.max;
    return min != null && max != null ? { min, max } : null;
  }

  /** Hand over the newest data; it is drawn on the next animation frame. */
  setData(data: D): void {
    if (this.destroyed) return;
    this.data = data;
    this.dirty = true;
    this.schedule();
  }

  /** Text shown over the chart while it has no points. */
  setEmptyText(text: string): void {
    if (this.emptyNote.textContent !== text) this.emptyNote.textContent = text;
  }

  /** Redraw without new data (the shaded ranges changed). */
  redraw(): void {
    this.plot?.redraw(false, false);
  }

  /** Reset the zoom and follow live data again. */
  resumeFollow(): void {
    if (this.destroyed) return;
    this.setFollow(true);
    this.reportZoom(null, true);
    this.dirty = true;
    this.schedule();
  }

  /** Apply a zoom from another chart of the group (null resets). */
  applyZoom(range: ZoomRange | null): void {
    if (this.destroyed) return;
    if (range === null) {
      if (!this.followValue) this.resumeFollow();
      return;
    }
    if (this.plot) this.plot.setScale("x", { min: range.min, max: range.max });
  }

  destroy(): void {
    if (this.destroyed) return;
    this.destroyed = true;
    if (this.frame !== null) cancelAnimationFrame(this.frame);
    this.frame = null;
    this.resizeObserver.disconnect();
    this.media?.removeEventListener("change", this.onScheme);
    window.removeEventListener(THEME_EVENT, this.onScheme);
    this.opts.group?.remove(this as LiveChart<unknown>);
    this.plot?.destroy();
    this.plot = null;
  }

  private measureWidth(): number {
    const w = Math.floor(this.container.getBoundingClientRect().width || this.container.clientWidth);
    return w > 0 ? w : 800;
  }

  private schedule(): void {
    if (this.frame !== null || this.destroyed) return;
    this.frame = requestAnimationFrame(() => {
      this.frame = null;
      this.flush();
    });
  }

  private flush(): void {
    if (this.destroyed) return;
    if (this.resizePending) {
      this.resizePending = false;
      this.plot?.setSize({ width: this.width, height: this.height });
    }
    if (!this.dirty || this.data === null) return;
    this.dirty = false;
    const data = this.data;
    const shape = this.spec.shapeKey(data);
    const cols = this.spec.columns(data);
    if (!this.plot || this.shape !== shape) {
      this.create(data, shape, cols);
    } else {
      // While zoomed, keep the user's scales; while following, rescale to all data.
      this.plot.setData(cols, this.followValue);
    }
    this.markDrawn(cols[0]?.length ?? 0);
  }

  private markDrawn(points: number): void {
    if (points !== this.drawnPoints) {
      this.drawnPoints = points;
      this.container.setAttribute("data-points", String(points));
      this.emptyNote.hidden = points > 0;
    }
  }

  /** Re-create with the current data (color scheme change). */
  private rebuild(): void {
    if (this.destroyed || this.data === null) return;
    this.shape = null;
    this.dirty = true;
    this.schedule();
  }

  private create(data: D, shape: string, cols: uPlot.AlignedData): void {
    // Keep a user's zoom across a re-creation.
    const keep = this.zoom;
    this.plot?.destroy();
    this.shape = shape;
    const opts = this.spec.options(data, { width: this.width, height: this.height }, this.style());
    if (this.opts.syncKey) {
      opts.cursor = { ...(opts.cursor ?? {}), sync: { key: this.opts.syncKey, setSeries: false } };
    }
    const hooks: uPlot.Hooks.Arrays = { ...(opts.hooks as uPlot.Hooks.Arrays | undefined) };
    hooks.setScale = [...(hooks.setScale ?? []), (u: uPlot, key: string) => this.onSetScale(u, key)];
    const shade = this.opts.shade;
    if (shade) {
      const fill = opts.series.length > 0 ? this.style().palette.shade ?? "rgba(232,113,10,0.14)" : "";
      hooks.drawClear = [
        ...(hooks.drawClear ?? []),
        (u: uPlot) => drawShades(u, shade(), fill),
      ];
    }
    opts.hooks = hooks;
    const plot = new uPlot(opts, cols, this.plotHost);
    this.plot = plot;
    plot.over.setAttribute("aria-hidden", "true");
    if (keep) {
      this.setFollow(false);
      plot.setScale("x", { min: keep.min, max: keep.max });
    }
  }

  private onSetScale(u: uPlot, key: string): void {
    if (key !== "x" || u !== this.plot) return;
    const xs = u.data[0];
    const n = xs.length;
    const min = u.scales.x?.min;
    const max = u.scales.x?.max;
    // The visible x range, for people and browser tests alike.
    if (min != null && max != null) this.container.setAttribute("data-x-range", `${min},${max}`);
    const full = isFullRange(min, max, n > 0 ? xs[0] : null, n > 0 ? xs[n - 1] : null);
    if (full !== this.followValue) {
      this.setFollow(full);
      // Back to following: draw whatever arrived while zoomed, rescaled.
      if (full) {
        this.dirty = true;
        this.schedule();
      }
    }
    this.reportZoom(full || min == null || max == null ? null : { min, max }, false);
  }

  private reportZoom(range: ZoomRange | null, fromReset: boolean): void {
    const key = range ? `${range.min},${range.max}` : null;
    if (key === this.lastZoom) return;
    this.lastZoom = key;
    this.opts.onZoom?.(range);
    if (!fromReset || range === null) this.opts.group?.broadcast(this as LiveChart<unknown>, range);
  }

  private setFollow(follow: boolean): void {
    if (follow === this.followValue) return;
    this.followValue = follow;
    this.container.setAttribute("data-follow", follow ? "true" : "false");
    this.opts.onFollowChange?.(follow);
  }

  private style(): ChartStyle {
    const style = getComputedStyle(this.container);
    const get = (name: string) => style.getPropertyValue(name);
    return { palette: paletteFromVars(get), colors: seriesColorsFromVars(get) };
  }
}

/** Fill the shaded x ranges over the plotting area (before the series are drawn). */
function drawShades(u: uPlot, ranges: ShadeRange[], fill: string): void {
  if (ranges.length === 0) return;
  const { ctx } = u;
  const { top, height, left, width } = u.bbox;
  const xmin = u.scales.x?.min;
  const xmax = u.scales.x?.max;
  if (xmin == null || xmax == null) return;
  ctx.save();
  ctx.fillStyle = fill;
  for (const r of ranges) {
    if (r.to < xmin || r.from > xmax) continue;
    const x0 = Math.max(left, u.valToPos(r.from, "x", true));
    const x1 = Math.min(left + width, u.valToPos(r.to, "x", true));
    // At least one device pixel wide, so lone points stay visible.
    ctx.fillRect(x0, top, Math.max(1, x1 - x0), height);
  }
  ctx.restore();
}
