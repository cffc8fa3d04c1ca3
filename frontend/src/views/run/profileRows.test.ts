import { describe, expect, it } from "vitest";
import { breakPoints, iteratorText, lastPart, opPlace, ownerOf, STOKER_STAMP, stageText, type RowStage } from "./profileRows";

const decode: RowStage = { position: 4, kind: "map_and_batch", name: "MapAndBatch", function: "slow_decode", owner: "user" };
const stamp: RowStage = { position: null, kind: null, name: null, function: null, owner: "stoker" };
const PATH = "Iterator::Root::Map::Zip[1]::Prefetch::MapAndBatch";

describe("profile rows in the pipeline's words", () => {
  it("names an iterator by the stage the pipeline view shows", () => {
    expect(stageText(decode)).toBe("stage 4: map and batch 'slow_decode'");
    expect(iteratorText({ name: PATH, count: 20, ms: 1, self_ms: 1, category: null, stage: decode })).toBe("stage 4: map and batch 'slow_decode'");
  });

  it("labels Stoker's stamp and keeps the last name of an unknown iterator", () => {
    expect(iteratorText({ name: "Iterator::Root::Map", count: 1, ms: 1, self_ms: 1, category: null, stage: stamp })).toBe(
      `${STOKER_STAMP}: Map (added by wrap, not in your pipeline)`,
    );
    expect(stageText(stamp)).toBe(`${STOKER_STAMP} (added by wrap, not in your pipeline)`);
    expect(iteratorText({ name: PATH, count: 1, ms: 1, self_ms: 1, category: null })).toBe("MapAndBatch");
    expect(lastPart("Iterator::Root")).toBe("Root");
    expect(ownerOf({ stage: stamp })).toBe("stoker");
    expect(ownerOf({})).toBe("user");
  });

  it("ties a Python call to the user's function, or lists the candidates", () => {
    const op = { where: "Host", type: "PyFunc", name: "PyFunc", count: 335, self_ms: 3609.8 };
    expect(opPlace({ ...op, function: "slow_decode", stage: decode })).toBe("in slow_decode (stage 4: map and batch 'slow_decode')");
    expect(opPlace({ ...op, function: null, functions: ["a", "b"] })).toBe("in one of a, b");
    expect(opPlace(op)).toBe("");
    expect(opPlace({ where: "Host", type: "Dataset", name: PATH, count: 1, self_ms: 1, stage: decode })).toBe("stage 4: map and batch 'slow_decode'");
  });

  it("breaks long names only between their parts", () => {
    expect(breakPoints(PATH)).toEqual(["Iterator::", "Root::", "Map::", "Zip[1]::", "Prefetch::", "MapAndBatch"]);
    expect(breakPoints("StatefulPartitionedCall/sequential_1/dense/MatMul").join("")).toBe("StatefulPartitionedCall/sequential_1/dense/MatMul");
    expect(breakPoints("StatefulPartitionedCall/sequential_1")).toEqual(["StatefulPartitionedCall/", "sequential_", "1"]);
  });
});
