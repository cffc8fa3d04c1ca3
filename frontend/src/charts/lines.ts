// Chart series: a line's description, and where the step-time chart's optional series sit.
//
// Column order of the step-time chart matches `chartColumns` in state/series.ts:
//   0 step index (x), 1 step time ms, [2 input wait ms], [min ms, max ms].

import type { SeriesShape } from "../state/series";

export interface LineSpec {
  label: string;
  scale: string;
  color: string;
  width?: number;
  dash?: number[];
  fill?: string;
  /** Legend value text. */
  format?: (v: number) => string;
  /** Draw across nulls (joined series of different clocks). */
  spanGaps?: boolean;
  show?: boolean;
  /** Mark each point (sparse series such as epochs). */
  points?: boolean;
}

/** Indices of the optional series for a shape (null when absent). */
export function seriesLayout(shape: SeriesShape): { wait: number | null; min: number | null; max: number | null; count: number } {
  let next = 2;
  const wait = shape.wait ? next++ : null;
  const min = shape.band ? next++ : null;
  const max = shape.band ? next++ : null;
  return { wait, min, max, count: next };
}
