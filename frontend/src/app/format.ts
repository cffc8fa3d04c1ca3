// Number, duration and time formatting for tables, cards and chart axes: one function per
// quantity, used wherever that quantity is shown. The server writes the same quantities in
// its texts (evidence, alerts) and `stoker top` with trainer_agent/figures.py; both are checked against
// formats.cases.json. Every function here is pure; missing values render as an em dash.

export const MISSING = "—";

function isNum(v: number | null | undefined): v is number {
  return typeof v === "number" && Number.isFinite(v);
}

/** A step-scale duration given in milliseconds: "0.42 ms", "42.1 ms", "421 ms", "1.23 s". */
export function formatMs(ms: number | null | undefined): string {
  if (!isNum(ms)) return MISSING;
  const a = Math.abs(ms);
  if (a < 10) return `${ms.toFixed(2)} ms`;
  if (a < 100) return `${ms.toFixed(1)} ms`;
  if (a < 1000) return `${ms.toFixed(0)} ms`;
  if (a < 60_000) return `${(ms / 1000).toFixed(a < 10_000 ? 2 : 1)} s`;
  return formatDuration(ms / 1000);
}

/** Compact axis tick label for milliseconds: "0", "250", "1.5k" ... */
export function formatMsTick(ms: number | null | undefined): string {
  if (!isNum(ms)) return "";
  const a = Math.abs(ms);
  if (a === 0) return "0";
  if (a >= 10_000) return `${trimZeros((ms / 1000).toFixed(1))}k`;
  if (a >= 100) return ms.toFixed(0);
  if (a >= 1) return trimZeros(ms.toFixed(1));
  return trimZeros(ms.toFixed(3));
}

function trimZeros(s: string): string {
  return s.includes(".") ? s.replace(/\.?0+$/, "") : s;
}

/** A wall-clock duration in seconds: "0s", "42s", "3m 05s", "1h 02m", "2d 03h". */
export function formatDuration(seconds: number | null | undefined): string {
  if (!isNum(seconds) || seconds < 0) return MISSING;
  if (seconds < 1) return seconds === 0 ? "0s" : `${seconds.toFixed(1)}s`;
  const total = Math.floor(seconds);
  const d = Math.floor(total / 86_400);
  const h = Math.floor((total % 86_400) / 3600);
  const m = Math.floor((total % 3600) / 60);
  const s = total % 60;
  const two = (n: number) => String(n).padStart(2, "0");
  if (d > 0) return `${d}d ${two(h)}h`;
  if (h > 0) return `${h}h ${two(m)}m`;
  if (m > 0) return `${m}m ${two(s)}s`;
  return `${s}s`;
}

/** A share 0..1 of something other than step time (a disk, a buffer) as a percentage:
 * 0.1234 → "12.3 %". Input wait has its own: `formatInputWait`. */
export function formatPercent(share: number | null | undefined, digits = 1): string {
  if (!isNum(share)) return MISSING;
  return `${(share * 100).toFixed(digits)} %`;
}

/**
 * An input-wait share as every surface writes it, the server's evidence and CLI included:
 * to a tenth of a percent, "5.1 %". The server sends shares already rounded so (levels.py).
 */
export function formatInputWait(share: number | null | undefined): string {
  if (!isNum(share)) return MISSING;
  return `${(Math.round(share * 1000) / 10).toFixed(1)} %`;
}

/** A reading already in percent (0..100: GPU utilization, SM activity): 87.25 → "87 %". */
export function formatPercentValue(pct: number | null | undefined): string {
  if (!isNum(pct)) return MISSING;
  return `${pct.toFixed(0)} %`;
}

/** An integer count with thousands separators: 12345 → "12,345". */
export function formatCount(n: number | null | undefined): string {
  if (!isNum(n)) return MISSING;
  return Math.round(n).toLocaleString("en-US");
}

/**
 * A run's status as its badge shows it. A run that ended while its agent still held steps in
 * its disk spool (the server was busy) says how many are still to come.
 */
export function statusLabel(status: string, stepsToUpload?: number | null): { text: string; title: string } {
  if (!isNum(stepsToUpload) || stepsToUpload <= 0 || status === "running") {
    return { text: status, title: `status: ${status}` };
  }
  const n = formatCount(stepsToUpload);
  return {
    text: `${status} · ${n} steps to upload`,
    title:
      `status: ${status}. The run ended with ${n} steps still in its agent's spool. The next ` +
      "Stoker agent that starts on that machine sends them (or run: stoker upload DIR).",
  };
}

/** A rate such as samples per second, three significant-ish figures. */
export function formatRate(v: number | null | undefined): string {
  if (!isNum(v)) return MISSING;
  const a = Math.abs(v);
  if (a >= 1000) return Math.round(v).toLocaleString("en-US");
  if (a >= 100) return v.toFixed(0);
  if (a >= 10) return v.toFixed(1);
  return v.toFixed(2);
}

/**
 * Parse an ISO-8601 timestamp into epoch milliseconds, or null.
 * A timestamp without a zone (as some databases hand them back) is taken as
 * UTC, and fractions finer than milliseconds are cut, so that every browser
 * reads it the same way.
 */
export function parseIso(iso: string | null | undefined): number | null {
  if (typeof iso !== "string" || iso.trim() === "") return null;
  let s = iso.trim().replace(" ", "T");
  s = s.replace(/(\.\d{3})\d+/, "$1");
  const hasTime = s.includes("T");
  const hasZone = /(Z|[+-]\d{2}:?\d{2})$/i.test(s);
  if (hasTime && !hasZone) s += "Z";
  const ms = Date.parse(s);
  return Number.isNaN(ms) ? null : ms;
}

/** "just now", "42 s ago", "3 min ago", "5 h ago", "2 d ago", then a date. */
export function formatRelativeTime(iso: string | null | undefined, nowMs: number): string {
  const at = parseIso(iso);
  if (at === null) return MISSING;
  const s = (nowMs - at) / 1000;
  if (s < 5) return "just now";
  if (s < 60) return `${Math.floor(s)} s ago`;
  if (s < 3600) return `${Math.floor(s / 60)} min ago`;
  if (s < 86_400) return `${Math.floor(s / 3600)} h ago`;
  if (s < 30 * 86_400) return `${Math.floor(s / 86_400)} d ago`;
  return formatTimestamp(iso).slice(0, 10);
}

/** Local "YYYY-MM-DD HH:MM:SS", for titles and detail tables. */
export function formatTimestamp(iso: string | null | undefined): string {
  const at = parseIso(iso);
  if (at === null) return MISSING;
  const d = new Date(at);
  const two = (n: number) => String(n).padStart(2, "0");
  return (
    `${d.getFullYear()}-${two(d.getMonth() + 1)}-${two(d.getDate())} ` +
    `${two(d.getHours())}:${two(d.getMinutes())}:${two(d.getSeconds())}`
  );
}

/** A config or environment value as one line of text. */
export function formatValue(v: unknown): string {
  if (v === null || v === undefined) return "null";
  if (typeof v === "string") return v;
  if (typeof v === "number" || typeof v === "boolean" || typeof v === "bigint") return String(v);
  try {
    return JSON.stringify(v);
  } catch {
    return String(v);
  }
}

/** A dotted key (`fit_params.epochs`, `optimizer.config.learning_rate`) in the pieces a narrow
 * column may break it between: after each dot, so that no piece is broken inside. */
export function keySegments(key: string): string[] {
  return key.split(/(?<=\.)/).filter((piece) => piece.length > 0);
}
