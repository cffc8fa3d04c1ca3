import { describe, expect, it } from "vitest";
import { retentionNote } from "./retention";

describe("retentionNote", () => {
  it("says nothing for a run whose raw steps are kept, at any zoom", () => {
    expect(retentionNote(false, null, { min: 100, max: 120 }, 800)).toBeNull();
  });
  it("says nothing at the default zoom of a compacted run: the chart looks the same", () => {
    expect(retentionNote(true, 10, null, 800)).toBeNull();
  });
  it("says nothing while the rollups still give a point per two pixels", () => {
    expect(retentionNote(true, 10, { min: 0, max: 4000 }, 800)).toBeNull();
  });
  it("says plainly that finer detail is gone once the zoom goes past the rollups' resolution", () => {
    expect(retentionNote(true, 10, { min: 1000, max: 1500 }, 800)).toBe(
      "Finer detail removed by retention: this run keeps one point per 10 steps.",
    );
  });
});
