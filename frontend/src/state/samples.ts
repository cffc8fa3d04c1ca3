// Wall-clock telemetry (device and host samples) and logged metrics: normalizing
// what the server sends, merging live increments, and building chart columns.
// Pure (no DOM), unit-tested.
//
// The server's answers (DeviceSeries, HostSeries, MetricSeries in api.gen.ts) are
// `{series: [track...]}`, where a device or host track is
// `{rank, gpu?, total, downsampled, t: [...], <field>: [...], <field>_min?: [...], ...}`;
// their rows are read defensively (non-finite values become null).

import type { MetricTrack, SampleTrack, SamplesData } from "../api/types";

type Col = (number | null)[];

function isObj(v: unknown): v is Record<string, unknown> {
  return typeof v === "object" && v !== null && !Array.isArray(v);
}

function num(v: unknown): number | null {
  return typeof v === "number" && Number.isFinite(v) ? v : null;
}

function numCol(v: unknown, n: number): Col {
  const out: Col = new Array(n);
  const arr = Array.isArray(v) ? v : [];
  for (let i = 0; i < n; i++) out[i] = num(arr[i]);
  return out;
}

const TRACK_META = new Set(["t", "rank", "gpu", "total", "downsampled"]);

/** One track object → SampleTrack (rows sorted by t, rows without a finite t dropped). */
export function normalizeTrack(raw: unknown): SampleTrack | null {
  if (!isObj(raw) || !Array.isArray(raw.t)) return null;
  const tRaw = raw.t as unknown[];
  const n = tRaw.length;
  const cols: Record<string, Col> = {};
  for (const [k, v] of Object.entries(raw)) {
    if (TRACK_META.has(k) || !Array.isArray(v)) continue;
    cols[k] = numCol(v, n);
  }
  const track: SampleTrack = {
    rank: num(raw.rank) ?? 0,
    t: [],
    cols: {},
    downsampled: raw.downsampled === true || Object.keys(cols).some((k) => k.endsWith("_max")),
    total: num(raw.total),
  };
  const gpu = num(raw.gpu);
  if (gpu !== null) track.gpu = gpu;
  const rows: number[] = [];
  for (let i = 0; i < n; i++) if (num(tRaw[i]) !== null) rows.push(i);
  rows.sort((a, b) => (tRaw[a] as number) - (tRaw[b] as number));
  track.t = rows.map((i) => tRaw[i] as number);
  for (const [k, c] of Object.entries(cols)) track.cols[k] = rows.map((i) => c[i] ?? null);
  return track;
}

/** The series of an answer (`DeviceSeries`, `HostSeries`), read defensively; null when it failed. */
export type SeriesAnswer = { series?: readonly unknown[] } | null | undefined;

function tracksOf(answer: SeriesAnswer): SampleTrack[] {
  const list = Array.isArray(answer?.series) ? answer.series : [];
  return list.map(normalizeTrack).filter((x): x is SampleTrack => x !== null);
}

/** Sort tracks by rank then GPU, so colors stay put between fetches. */
function byIdentity(a: SampleTrack, b: SampleTrack): number {
  return a.rank - b.rank || (a.gpu ?? -1) - (b.gpu ?? -1);
}

/** The device (`GET /runs/{id}/samples`) and host (`GET /runs/{id}/host`) answers as tracks. */
export function normalizeSamples(device: SeriesAnswer, host: SeriesAnswer): SamplesData {
  return { device: tracksOf(device).sort(byIdentity), host: tracksOf(host).sort(byIdentity) };
}

/** The step series of a `MetricSeries` answer (`{series: [{name, axis, step, value, value_min?, value_max?}]}`). */
export function normalizeMetrics(answer: SeriesAnswer): MetricTrack[] {
  const out: MetricTrack[] = [];
  for (const item of Array.isArray(answer?.series) ? answer.series : []) {
    // Epoch series (`axis: "epoch"`) are drawn by epoch (see epochs.ts), not on the step chart.
    if (!isObj(item) || !Array.isArray(item.step) || item.axis === "epoch") continue;
    const n = item.step.length;
    const aggregation = item.aggregation === "running_mean_over_epoch" || item.aggregation === "value" ? item.aggregation : undefined;
    out.push(
      sortMetric({
        name: String(item.name ?? "value"),
        ...(aggregation ? { aggregation } : {}),
        step: numCol(item.step, n).map((v) => v ?? NaN),
        value: numCol(item.value, n),
        min: Array.isArray(item.value_min) ? numCol(item.value_min, n) : null,
        max: Array.isArray(item.value_max) ? numCol(item.value_max, n) : null,
      }),
    );
  }
  return out;
}

function sortMetric(m: MetricTrack): MetricTrack {
  const idx = m.step.map((_, i) => i).filter((i) => Number.isFinite(m.step[i]!));
  idx.sort((a, b) => m.step[a]! - m.step[b]!);
  return {
    name: m.name,
    ...(m.aggregation ? { aggregation: m.aggregation } : {}),
    step: idx.map((i) => m.step[i]!),
    value: idx.map((i) => m.value[i] ?? null),
    min: m.min ? idx.map((i) => m.min![i] ?? null) : null,
    max: m.max ? idx.map((i) => m.max![i] ?? null) : null,
  };
}

export function trackKey(t: SampleTrack): string {
  return `${t.rank}:${t.gpu ?? "host"}`;
}

/**
 * Append the rows of `incoming` tracks that are newer than the last row held
 * (per rank/GPU); unknown tracks are added. Returns a new SamplesData and how many rows were added.
 */
export function mergeSamples(held: SamplesData, incoming: SamplesData): { data: SamplesData; added: number } {
  let added = 0;
  const mergeList = (a: SampleTrack[], b: SampleTrack[]): SampleTrack[] => {
    const out = a.map((t) => t);
    const index = new Map(out.map((t, i) => [trackKey(t), i]));
    for (const inc of b) {
      const i = index.get(trackKey(inc));
      if (i === undefined) {
        index.set(trackKey(inc), out.length);
        out.push(inc);
        added += inc.t.length;
        continue;
      }
      const cur = out[i]!;
      const last = cur.t.length > 0 ? cur.t[cur.t.length - 1]! : -Infinity;
      let from = 0;
      while (from < inc.t.length && inc.t[from]! <= last) from++;
      if (from >= inc.t.length) continue;
      const n = inc.t.length - from;
      const merged: SampleTrack = { ...cur, t: cur.t.concat(inc.t.slice(from)), cols: {} };
      const keys = new Set([...Object.keys(cur.cols), ...Object.keys(inc.cols)]);
      for (const k of keys) {
        const old = cur.cols[k] ?? new Array<number | null>(cur.t.length).fill(null);
        // Raw rows appended to a downsampled track are their own min and max.
        const band = k.endsWith("_min") || k.endsWith("_max") ? inc.cols[k.slice(0, -4)] : undefined;
        const neu = (inc.cols[k] ?? band)?.slice(from) ?? new Array<number | null>(n).fill(null);
        merged.cols[k] = old.concat(neu);
      }
      if (merged.total !== null) merged.total += n;
      out[i] = merged;
      added += n;
    }
    return out.sort(byIdentity);
  };
  return { data: { device: mergeList(held.device, incoming.device), host: mergeList(held.host, incoming.host) }, added };
}

/** Latest sample time held, over all tracks (for `since_t` catch-up), or null. */
export function lastSampleTime(d: SamplesData): number | null {
  let last: number | null = null;
  for (const t of [...d.device, ...d.host]) {
    const v = t.t[t.t.length - 1];
    if (v !== undefined && (last === null || v > last)) last = v;
  }
  return last;
}

export function sampleCount(d: SamplesData): number {
  let n = 0;
  for (const t of [...d.device, ...d.host]) n += t.t.length;
  return n;
}

/**
 * Join several x-sorted tracks on the union of their x values (uPlot's aligned
 * data): `[x, ...one column per (track, field)]`, null where a track has no row.
 */
export function joinTracks(parts: { x: number[]; ys: Col[] }[]): (number | null)[][] {
  const all: number[] = [];
  for (const p of parts) for (const x of p.x) all.push(x);
  all.sort((a, b) => a - b);
  const xs: number[] = [];
  for (const x of all) if (xs.length === 0 || xs[xs.length - 1] !== x) xs.push(x);
  const out: (number | null)[][] = [xs];
  if (parts.length === 1) {
    // Already aligned (deduplicated rows keep their first value).
    const p = parts[0]!;
    if (p.x.length === xs.length) {
      for (const y of p.ys) out.push(y);
      return out;
    }
  }
  const pos = new Map<number, number>();
  xs.forEach((x, i) => pos.set(x, i));
  for (const p of parts) {
    for (const y of p.ys) {
      const col: (number | null)[] = new Array(xs.length).fill(null);
      for (let i = 0; i < p.x.length; i++) {
        const j = pos.get(p.x[i]!)!;
        if (col[j] === null) col[j] = y[i] ?? null;
      }
      out.push(col);
    }
  }
  return out;
}

/** Label of a device track: "GPU 0", or "r1 GPU 0" when several ranks report. */
export function deviceLabel(t: SampleTrack, multiRank: boolean): string {
  const g = `GPU ${t.gpu ?? 0}`;
  return multiRank ? `r${t.rank} ${g}` : g;
}

export function hasField(tracks: SampleTrack[], field: string): boolean {
  return tracks.some((t) => (t.cols[field] ?? []).some((v) => v !== null));
}

/** One chart's columns and the label/kind of each y column. */
export interface TelemetryChart {
  data: (number | null)[][];
  series: { label: string; field: string; gpu: number | null; unit: string; track: number; band: [number, number] | null }[];
}

/**
 * Columns of a wall-clock chart: for every track, the given fields that hold
 * at least one value. `label(track, field)` names each series.
 */
export function telemetryColumns(
  tracks: SampleTrack[],
  fields: { field: string; unit: string; name: string; band?: boolean }[],
  multiRank = tracks.some((t) => t.rank !== 0),
): TelemetryChart {
  const parts: { x: number[]; ys: Col[] }[] = [];
  const series: TelemetryChart["series"] = [];
  // Column 0 is x; uPlot numbers series from 1, in column order.
  let next = 1;
  tracks.forEach((tr, ti) => {
    const ys: Col[] = [];
    for (const f of fields) {
      const col = tr.cols[f.field];
      if (!col || !col.some((v) => v !== null)) continue;
      ys.push(col);
      const who = tr.gpu !== undefined ? deviceLabel(tr, multiRank) : multiRank ? `r${tr.rank}` : "";
      const label = who ? `${who} ${f.name}` : f.name;
      series.push({ label, field: f.field, gpu: tr.gpu ?? null, unit: f.unit, track: ti, band: null });
      next++;
    }
    if (ys.length > 0) parts.push({ x: tr.t, ys });
  });
  // Min/max bands of downsampled fields go after all lines, so line indices stay stable.
  const bandParts: { x: number[]; ys: Col[] }[] = [];
  tracks.forEach((tr, ti) => {
    const ys: Col[] = [];
    for (const f of fields) {
      if (!f.band) continue;
      const lo = tr.cols[`${f.field}_min`];
      const hi = tr.cols[`${f.field}_max`];
      if (!lo || !hi || !tr.downsampled) continue;
      const line = series.find((s) => s.track === ti && s.field === f.field);
      if (!line) continue;
      ys.push(hi, lo);
      line.band = [next, next + 1];
      next += 2;
    }
    if (ys.length > 0) bandParts.push({ x: tr.t, ys });
  });
  return { data: joinTracks([...parts, ...bandParts]), series };
}

// ---- throttle (clock event) reasons, NVML's bitmask ----

/** NVML clock-event reasons worth marking: the ones that slow the GPU down. */
export const THROTTLE_REASONS: { bit: number; name: string }[] = [
  { bit: 0x4, name: "power cap" },
  { bit: 0x8, name: "HW slowdown" },
  { bit: 0x20, name: "SW thermal" },
  { bit: 0x40, name: "HW thermal" },
  { bit: 0x80, name: "power brake" },
];

export const THROTTLE_MASK = THROTTLE_REASONS.reduce((m, r) => m | r.bit, 0);

export function throttleNames(mask: number | null | undefined): string[] {
  if (typeof mask !== "number" || !Number.isFinite(mask)) return [];
  return THROTTLE_REASONS.filter((r) => (mask & r.bit) !== 0).map((r) => r.name);
}

/** A shaded stretch of a chart's x axis, with a label for its tooltip and legend. */
export interface ShadeRange {
  from: number;
  to: number;
  label: string;
}

/**
 * Stretches of time during which a device reported a slowing clock-event
 * reason, merged across devices when they touch. A single sample marks the
 * interval up to the next sample.
 */
export function throttleRanges(tracks: SampleTrack[]): ShadeRange[] {
  const ranges: ShadeRange[] = [];
  for (const tr of tracks) {
    const th = tr.cols.throttle;
    if (!th) continue;
    // Downsampled tracks carry the bucket max of the mask as a number; OR-ing reasons is
    // not possible there, so the max stands for "something throttled in this bucket".
    const mx = tr.cols.throttle_max;
    let open: ShadeRange | null = null;
    for (let i = 0; i < tr.t.length; i++) {
      const raw = mx?.[i] ?? th[i];
      const mask = typeof raw === "number" ? Math.round(raw) & THROTTLE_MASK : 0;
      const t = tr.t[i]!;
      const next = tr.t[i + 1] ?? t;
      if (mask !== 0) {
        const label = `GPU ${tr.gpu ?? 0}: ${throttleNames(mask).join(", ")}`;
        if (open && open.label === label) open.to = next;
        else {
          if (open) ranges.push(open);
          open = { from: t, to: next, label };
        }
      } else if (open) {
        ranges.push(open);
        open = null;
      }
    }
    if (open) ranges.push(open);
  }
  return ranges.sort((a, b) => a.from - b.from);
}

/** Bytes as GiB / MiB text: "10.5 GiB", "512 MiB". */
export function formatBytes(b: number | null | undefined): string {
  if (typeof b !== "number" || !Number.isFinite(b)) return "—";
  const a = Math.abs(b);
  if (a >= 1024 ** 4) return `${(b / 1024 ** 4).toFixed(2)} TiB`;
  if (a >= 1024 ** 3) return `${(b / 1024 ** 3).toFixed(a >= 10 * 1024 ** 3 ? 1 : 2)} GiB`;
  if (a >= 1024 ** 2) return `${(b / 1024 ** 2).toFixed(0)} MiB`;
  if (a >= 1024) return `${(b / 1024).toFixed(0)} KiB`;
  return `${Math.round(b)} B`;
}

/** Append metric rows newer than the last step held per name; new names are added (sorted by name). */
export function mergeMetrics(held: MetricTrack[], incoming: MetricTrack[]): { tracks: MetricTrack[]; added: number } {
  let added = 0;
  const out = held.map((t) => t);
  const index = new Map(out.map((t, i) => [t.name, i]));
  for (const inc of incoming) {
    const i = index.get(inc.name);
    if (i === undefined) {
      index.set(inc.name, out.length);
      out.push(inc);
      added += inc.step.length;
      continue;
    }
    const cur = out[i]!;
    const last = cur.step.length > 0 ? cur.step[cur.step.length - 1]! : -Infinity;
    let from = 0;
    while (from < inc.step.length && inc.step[from]! <= last) from++;
    if (from >= inc.step.length) continue;
    const n = inc.step.length - from;
    const pad = (a: (number | null)[] | null, len: number) => a ?? new Array<number | null>(len).fill(null);
    const band = cur.min !== null || inc.min !== null;
    out[i] = {
      ...cur,
      step: cur.step.concat(inc.step.slice(from)),
      value: cur.value.concat(inc.value.slice(from)),
      min: band ? pad(cur.min, cur.step.length).concat(pad(inc.min, inc.step.length).slice(from)) : null,
      max: band ? pad(cur.max, cur.step.length).concat(pad(inc.max, inc.step.length).slice(from)) : null,
    };
    added += n;
  }
  out.sort((a, b) => a.name.localeCompare(b.name));
  return { tracks: out, added };
}

/** Last step held over all metric tracks, or null. */
export function lastMetricStep(tracks: MetricTrack[]): number | null {
  let last: number | null = null;
  for (const t of tracks) {
    const v = t.step[t.step.length - 1];
    if (v !== undefined && (last === null || v > last)) last = v;
  }
  return last;
}
