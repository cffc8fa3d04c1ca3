import { describe, expect, it } from "vitest";
import { retentionNote, thinnedSamplesNote } from "./retention";

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

describe("thinnedSamplesNote", () => {
  it("says nothing at the default zoom, or for a run whose samples are whole", () => {
    expect(thinnedSamplesNote(true, null, 10, 800)).toBeNull();
    expect(thinnedSamplesNote(false, { min: 0, max: 60 }, 10, 800)).toBeNull();
  });
  it("says nothing while the zoom still holds a sample per two pixels", () => {
    expect(thinnedSamplesNote(true, { min: 0, max: 600 }, 400, 800)).toBeNull();
  });
  it("says the samples were thinned once the zoom holds fewer", () => {
    expect(thinnedSamplesNote(true, { min: 0, max: 60 }, 12, 800)).toBe("Finer detail removed by retention: this run's samples were thinned.");
  });
});
