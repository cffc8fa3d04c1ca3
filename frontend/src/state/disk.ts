// Disk use (`GET /api/v1/disk`): the runs page's one-line summary and the banner
// every page shows while the database's disk is full or nearly full. Pure, unit-tested.

import type { DiskUse } from "../api/types";
import { formatPercent } from "../app/format";
import { formatBytes } from "./samples";

/** How often the shell reads the disk figures. */
export const DISK_POLL_MS = 30_000;

function freeOf(free: number | null | undefined, total: number | null | undefined): string | null {
  return free != null && total ? `${formatBytes(free)} free of ${formatBytes(total)} (${formatPercent(free / total, 0)})` : null;
}

/** "Database 1.20 GiB · profiles 340 MiB · 57.0 GiB free of 252.0 GiB (23%)"; on PostgreSQL
 * also its own disk, where the server can see it. */
export function diskSummary(d: DiskUse): string {
  const parts = [`Database ${formatBytes(d.database_bytes)}`, `profiles ${formatBytes(d.profiles_bytes)}`];
  parts.push(freeOf(d.free_bytes, d.total_bytes) ?? "free space unknown");
  if (!d.sqlite) parts.push(`PostgreSQL's disk ${freeOf(d.database_free_bytes, d.database_total_bytes) ?? "not visible from here"}`);
  return parts.join(" · ");
}

/** What the summary's title says: where the figures come from. */
export function diskSummaryTitle(d: DiskUse): string {
  const where = d.sqlite ? "the SQLite database and the profiles" : "the profiles (PostgreSQL keeps its own disk)";
  const postgres = !d.sqlite && d.database_disk ? ` PostgreSQL: ${d.database_disk}.` : "";
  return `Free space on the data directory's disk, which holds ${where}.${postgres} Agents' spools are on their own machines.`;
}

/** The disk nearer to full of the two the server sees (the data directory's, the database's). */
function tightestDisk(d: DiskUse): { free: number; total: number } | null {
  const disks = [
    [d.free_bytes, d.total_bytes],
    [d.database_free_bytes, d.database_total_bytes],
  ].filter((pair): pair is [number, number] => pair[0] != null && !!pair[1]);
  if (!disks.length) return null;
  const [free, total] = disks.reduce((a, b) => (b[0] / b[1] < a[0] / a[1] ? b : a));
  return { free, total };
}

export interface DiskBanner {
  level: "full" | "low";
  title: string;
  body: string;
}

const WHAT_TO_DO =
  "Free space on that disk, or set retention (STOKER_RETENTION_TIME_S, STOKER_RETENTION_SIZE_BYTES) so old runs keep only their rollups.";

/** The banner while the disk is full or nearly full, else null. */
export function diskBanner(d: DiskUse | null): DiskBanner | null {
  if (!d) return null;
  if (d.full)
    return {
      level: "full",
      title: "The database's disk is full: new rows are refused.",
      body:
        "Agents keep their rows in their spool and send them again once there is room: nothing is lost. " +
        `Runs and charts stay readable. ${WHAT_TO_DO}`,
    };
  if (d.low) {
    const tight = tightestDisk(d);
    const free = tight ? ` (${formatBytes(tight.free)} free, ${formatPercent(tight.free / tight.total, 1)})` : "";
    return {
      level: "low",
      title: `The database's disk is nearly full${free}.`,
      body:
        "Once it is full, new rows are refused; agents then keep their rows in their spool and send them later: nothing is lost. " +
        WHAT_TO_DO,
    };
  }
  return null;
}

type DiskListener = () => void;

/** The latest disk figures, shared by the shell (banner) and the runs page (summary). */
export class DiskStore {
  current: DiskUse | null = null;
  private readonly listeners = new Set<DiskListener>();

  set(d: DiskUse): void {
    this.current = d;
    for (const l of [...this.listeners]) l();
  }

  subscribe(l: DiskListener): () => void {
    this.listeners.add(l);
    return () => this.listeners.delete(l);
  }
}
