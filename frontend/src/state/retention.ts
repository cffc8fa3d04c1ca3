// A run compacted by retention keeps rollups of its steps, no finer than
// `finest_steps` steps a point: its charts look the same at the default zoom, and a zoom
// that would need finer points says so. Pure, unit-tested.

/** The note a zoomed chart of a compacted run shows, or null while nothing finer is missing. */
export function retentionNote(
  compacted: boolean,
  finestSteps: number | null | undefined,
  zoom: { min: number; max: number } | null,
  widthPx: number,
): string | null {
  if (!compacted || !zoom || !(zoom.max > zoom.min)) return null;
  const finest = finestSteps && finestSteps > 1 ? finestSteps : null;
  if (finest === null) return null;
  // The chart refines a zoom to a point per pixel (refine.shouldRefine wants half of that):
  // past there, a compacted run has no finer points to give.
  const points = (zoom.max - zoom.min) / finest;
  if (points >= Math.max(16, widthPx / 2)) return null;
  return `Finer detail removed by retention: this run keeps one point per ${finest} steps.`;
}

/**
 * The note a zoomed time chart of a compacted run shows: retention thinned its samples, so a
 * zoom that holds fewer samples than half the chart's pixels (the refined data already) has
 * no finer ones to give. Null otherwise.
 */
export function thinnedSamplesNote(
  compacted: boolean,
  zoom: { min: number; max: number } | null,
  visibleSamples: number,
  widthPx: number,
): string | null {
  if (!compacted || !zoom || !(zoom.max > zoom.min)) return null;
  if (visibleSamples >= Math.max(16, widthPx / 2)) return null;
  return "Finer detail removed by retention: this run's samples were thinned.";
}
