// Chart colors and font: the light defaults and the page's CSS custom properties.

/** Colors and font of a chart, read from the page's CSS custom properties. */
export interface ChartPalette {
  text: string;
  axis: string;
  grid: string;
  step: string;
  wait: string;
  band: string;
  bandEdge: string;
  font: string;
  /** Fill of shaded x ranges (starved stretches, throttling). */
  shade?: string;
}

export const LIGHT_PALETTE: ChartPalette = {
  text: "#3b4252",
  axis: "#c8ccd4",
  grid: "rgba(120,128,140,0.18)",
  step: "#2f6fde",
  wait: "#e8710a",
  band: "rgba(47,111,222,0.16)",
  bandEdge: "rgba(47,111,222,0.35)",
  font: '11px ui-monospace, "SF Mono", Menlo, Consolas, monospace',
  shade: "rgba(232,113,10,0.14)",
};

/** Series colors of multi-series charts (per GPU, per run), in order. */
export const SERIES_COLORS: string[] = [
  "#2f6fde",
  "#e8710a",
  "#1a9e55",
  "#c2185b",
  "#7b5cd6",
  "#00838f",
  "#9e7700",
  "#5d6b7e",
];

/** CSS custom properties a chart palette is read from. */
export const PALETTE_VARS: Record<keyof ChartPalette, string> = {
  text: "--chart-text",
  axis: "--chart-axis",
  grid: "--chart-grid",
  step: "--chart-step",
  wait: "--chart-wait",
  band: "--chart-band",
  bandEdge: "--chart-band-edge",
  font: "--chart-font",
  shade: "--chart-shade",
};

/** Series colors from `--chart-series-1` .. `--chart-series-8`, falling back to SERIES_COLORS. */
export function seriesColorsFromVars(get: (name: string) => string): string[] {
  return SERIES_COLORS.map((c, i) => get(`--chart-series-${i + 1}`).trim() || c);
}

/** A palette from CSS custom properties, with `fallback` for any left unset. */
export function paletteFromVars(get: (name: string) => string, fallback: ChartPalette = LIGHT_PALETTE): ChartPalette {
  const out = { ...fallback };
  for (const key of Object.keys(PALETTE_VARS) as (keyof ChartPalette)[]) {
    const v = get(PALETTE_VARS[key]).trim();
    if (v) out[key] = v;
  }
  return out;
}

/** `rgba()` of a hex color at an alpha, for fills derived from a series color. */
export function withAlpha(color: string, alpha: number): string {
  const m = /^#([0-9a-f]{6})$/i.exec(color.trim());
  if (!m) return color;
  const v = parseInt(m[1]!, 16);
  return `rgba(${(v >> 16) & 255},${(v >> 8) & 255},${v & 255},${alpha})`;
}
