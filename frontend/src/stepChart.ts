// The live step-time chart: the one owner of a uPlot instance's life.
//
// - create (and re-create when the set of series changes or the color scheme flips),
// - `setData` at most once per animation frame: callers hand over the newest
//   series as often as messages arrive, the frame callback draws the last one,
// - `setSize` from a ResizeObserver,
// - "follow live": while the user has zoomed (drag-select), new data is drawn
//   without resetting the scales; double-click (or `resumeFollow`) resets the
//   zoom and following resumes,
// - `destroy`.
//
// The container's `data-points` attribute always equals the number of points
// in the chart's data.

import uPlot from "uplot";
import { isFullRange, paletteFromVars, stepTimeOptions, type ChartPalette } from "./chartOptions";
import { chartColumns, sameShape, seriesShape, type SeriesShape, type StepSeries } from "./series";

export interface StepTimeChartOptions {
  height?: number;
  /** Told whenever following live turns on or off. */
  onFollowChange?: (follow: boolean) => void;
}

const DARK_QUERY = "(prefers-color-scheme: dark)";

export class StepTimeChart {
  private readonly container: HTMLElement;
  private readonly plotHost: HTMLElement;
  private readonly emptyNote: HTMLElement;
  private readonly height: number;
  private readonly onFollowChange: ((follow: boolean) => void) | undefined;
  private plot: uPlot | null = null;
  private shape: SeriesShape | null = null;
  private series: StepSeries | null = null;
  private drawnPoints = -1;
  private followValue = true;
  private dirty = false;
  private frame: number | null = null;
  private width: number;
  private resizePending = false;
  private readonly resizeObserver: ResizeObserver;
  private readonly media: MediaQueryList | null;
  private readonly onScheme = () => this.rebuild();
  private destroyed = false;

  constructor(container: HTMLElement, opts: StepTimeChartOptions = {}) {
    this.container = container;
    this.height = opts.height ?? 300;
    this.onFollowChange = opts.onFollowChange;
    this.container.classList.add("chart");
    this.container.setAttribute("data-points", "0");
    this.container.setAttribute("data-follow", "true");
    this.plotHost = document.createElement("div");
    this.plotHost.className = "chart-plot";
    this.emptyNote = document.createElement("p");
    this.emptyNote.className = "chart-empty";
    this.emptyNote.textContent = "Waiting for the first steps…";
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
  }

  /** Width of the plotting area in CSS pixels (for choosing `max_points`). */
  get widthPx(): number {
    return this.width;
  }

  get follow(): boolean {
    return this.followValue;
  }

  /** Hand over the newest series; it is drawn on the next animation frame. */
  setSeries(series: StepSeries): void {
    if (this.destroyed) return;
    this.series = series;
    this.dirty = true;
    this.schedule();
  }

  /** Text shown over the chart while it has no points. */
  setEmptyText(text: string): void {
    if (this.emptyNote.textContent !== text) this.emptyNote.textContent = text;
  }

  /** Reset the zoom and follow live data again. */
  resumeFollow(): void {
    if (this.destroyed) return;
    this.setFollow(true);
    this.dirty = true;
    this.schedule();
  }

  destroy(): void {
    if (this.destroyed) return;
    this.destroyed = true;
    if (this.frame !== null) cancelAnimationFrame(this.frame);
    this.frame = null;
    this.resizeObserver.disconnect();
    this.media?.removeEventListener("change", this.onScheme);
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
    if (!this.dirty || !this.series) return;
    this.dirty = false;
    const series = this.series;
    const shape = seriesShape(series);
    if (!this.plot || !this.shape || !sameShape(shape, this.shape)) {
      this.create(series, shape);
    } else {
      // While zoomed, keep the user's scales; while following, rescale to all data.
      this.plot.setData(chartColumns(series, shape) as uPlot.AlignedData, this.followValue);
    }
    this.markDrawn(series.step.length);
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
    if (this.destroyed || !this.series) return;
    this.shape = null;
    this.dirty = true;
    this.schedule();
  }

  private create(series: StepSeries, shape: SeriesShape): void {
    // Keep a user's zoom across a re-creation.
    const keep =
      !this.followValue && this.plot
        ? { min: this.plot.scales.x?.min ?? null, max: this.plot.scales.x?.max ?? null }
        : null;
    this.plot?.destroy();
    this.shape = shape;
    const opts = stepTimeOptions({
      width: this.width,
      height: this.height,
      shape,
      palette: this.palette(),
    });
    opts.hooks = {
      setScale: [
        (u: uPlot, key: string) => {
          if (key !== "x" || u !== this.plot) return;
          const xs = u.data[0];
          const n = xs.length;
          const min = u.scales.x?.min;
          const max = u.scales.x?.max;
          // The visible step range, for people and browser tests alike.
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
        },
      ],
    };
    const plot = new uPlot(opts, chartColumns(series, shape) as uPlot.AlignedData, this.plotHost);
    this.plot = plot;
    plot.over.setAttribute("aria-hidden", "true");
    if (keep && keep.min !== null && keep.max !== null) {
      this.setFollow(false);
      plot.setScale("x", { min: keep.min, max: keep.max });
    }
  }

  private setFollow(follow: boolean): void {
    if (follow === this.followValue) return;
    this.followValue = follow;
    this.container.setAttribute("data-follow", follow ? "true" : "false");
    this.onFollowChange?.(follow);
  }

  private palette(): ChartPalette {
    const style = getComputedStyle(this.container);
    return paletteFromVars((name) => style.getPropertyValue(name));
  }
}
