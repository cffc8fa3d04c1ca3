import { describe, expect, it } from "vitest";
import type { DiskUse } from "../api/types";
import { DiskStore, diskBanner, diskSummary, diskSummaryTitle } from "./disk";

const GiB = 1024 ** 3;
const disk = (over: Partial<DiskUse> = {}): DiskUse => ({
  database_bytes: 1.2 * GiB,
  profiles_bytes: 340 * 1024 ** 2,
  free_bytes: 57 * GiB,
  total_bytes: 252 * GiB,
  full: false,
  low: false,
  refusals: 0,
  low_free_share: 0.05,
  low_free_bytes: 1e9,
  sqlite: true,
  ...over,
});

describe("diskSummary", () => {
  it("says the sizes and the free share as the UI writes bytes and shares", () => {
    expect(diskSummary(disk())).toBe("Database 1.20 GiB · profiles 340 MiB · 57.0 GiB free of 252.0 GiB (23 %)");
  });
  it("says when free space cannot be read", () => {
    expect(diskSummary(disk({ free_bytes: null, total_bytes: null }))).toBe("Database 1.20 GiB · profiles 340 MiB · free space unknown");
  });
  it("adds PostgreSQL's own disk, or says it is not visible from the server", () => {
    const pg = disk({ sqlite: false, database_free_bytes: 10 * GiB, database_total_bytes: 40 * GiB, database_disk: "PostgreSQL's disk (/var/lib/postgresql)" });
    expect(diskSummary(pg)).toBe("Database 1.20 GiB · profiles 340 MiB · 57.0 GiB free of 252.0 GiB (23 %) · PostgreSQL's disk 10.0 GiB free of 40.0 GiB (25 %)");
    expect(diskSummary(disk({ sqlite: false }))).toContain("PostgreSQL's disk not visible from here");
    expect(diskSummaryTitle(pg)).toContain("PostgreSQL: PostgreSQL's disk (/var/lib/postgresql).");
  });
  it("says which disk the free space is of", () => {
    expect(diskSummaryTitle(disk())).toContain("SQLite database");
    expect(diskSummaryTitle(disk({ sqlite: false }))).toContain("PostgreSQL keeps its own disk");
  });
});

describe("diskBanner", () => {
  it("is absent while there is room", () => {
    expect(diskBanner(disk())).toBeNull();
    expect(diskBanner(null)).toBeNull();
  });
  it("says plainly that rows are refused, nothing is lost, and what to do, when full", () => {
    const b = diskBanner(disk({ full: true, low: true, free_bytes: 0 }))!;
    expect(b.level).toBe("full");
    expect(b.title).toBe("The database's disk is full: new rows are refused.");
    expect(b.body).toContain("keep their rows in their spool");
    expect(b.body).toContain("nothing is lost");
    expect(b.body).toContain("STOKER_RETENTION_TIME_S");
  });
  it("warns with what is left on the fuller disk, the database's own when that one is low", () => {
    const b = diskBanner(disk({ sqlite: false, low: true, database_free_bytes: 0.5 * GiB, database_total_bytes: 40 * GiB }))!;
    expect(b.title).toBe("The database's disk is nearly full (512 MiB free, 1.3 %).");
  });
  it("warns before it is full, with how much is left", () => {
    const b = diskBanner(disk({ low: true, free_bytes: 0.5 * GiB }))!;
    expect(b.level).toBe("low");
    expect(b.title).toBe("The database's disk is nearly full (512 MiB free, 0.2 %).");
    expect(b.body).toContain("new rows are refused");
  });
});

describe("DiskStore", () => {
  it("tells its listeners of new figures until they leave", () => {
    const store = new DiskStore();
    let calls = 0;
    const leave = store.subscribe(() => calls++);
    store.set(disk());
    expect(store.current?.free_bytes).toBe(57 * GiB);
    leave();
    store.set(disk());
    expect(calls).toBe(1);
  });
});
