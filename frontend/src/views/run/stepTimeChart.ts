// The live step-time chart: a LiveChart of the run's step series (step time,
// input wait filled underneath, the min/max band of downsampled buckets) with
// starved stretches shaded. See liveChart.ts for the chart's life cycle.

import type uPlot from "uplot";
import { stepTimeOptions } from "../../charts/stepTimeOptions";
import { LiveChart, type ChartGroup, type ZoomRange } from "../../charts/liveChart";
import type { ShadeRange } from "../../state/samples";
import { chartColumns, seriesShape, type StepSeries } from "../../state/series";

export interface StepTimeChartOptions {
  height?: number;
  /** Told whenever following live turns on or off. */
  onFollowChange?: (follow: boolean) => void;
  onZoom?: (range: ZoomRange | null) => void;
  syncKey?: string;
  group?: ChartGroup;
  shade?: () => ShadeRange[];
}

export class StepTimeChart extends LiveChart<StepSeries> {
  constructor(container: HTMLElement, opts: StepTimeChartOptions = {}) {
    super(
      container,
      {
        options: (series, size, style) =>
          stepTimeOptions({ width: size.width, height: size.height, shape: seriesShape(series), palette: style.palette }),
        columns: (series) => chartColumns(series, seriesShape(series)) as uPlot.AlignedData,
        shapeKey: (series) => {
          const s = seriesShape(series);
          return `${s.wait}:${s.band}`;
        },
      },
      { ...opts, emptyText: "Waiting for the first steps…" },
    );
  }

  /** Hand over the newest series; it is drawn on the next animation frame. */
  setSeries(series: StepSeries): void {
    this.setData(series);
  }
}
