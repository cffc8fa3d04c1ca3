import { describe, expect, it } from "vitest";
import { parseLiveMessage } from "./liveClient";

describe("live profile messages", () => {
  it("passes a profile status change on with its run", () => {
    const profile = { id: 3, run_id: 7, status: "capturing", analysis: {} };
    expect(parseLiveMessage(JSON.stringify({ type: "profile", run_id: 7, profile }))).toEqual({ type: "profile", run_id: 7, profile });
  });

  it("drops a malformed one", () => {
    expect(parseLiveMessage(JSON.stringify({ type: "profile", run_id: "7", profile: {} }))).toBeNull();
    expect(parseLiveMessage(JSON.stringify({ type: "profile", run_id: 7, profile: null }))).toBeNull();
  });
});
