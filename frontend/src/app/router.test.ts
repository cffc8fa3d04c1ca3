import { describe, expect, it } from "vitest";
import { parseRoute, runHref } from "./router";

describe("parseRoute", () => {
  it("maps the empty and root hashes to the runs list", () => {
    expect(parseRoute("")).toEqual({ name: "runs" });
    expect(parseRoute("#")).toEqual({ name: "runs" });
    expect(parseRoute("#/")).toEqual({ name: "runs" });
    expect(parseRoute("#/runs")).toEqual({ name: "runs" });
  });
  it("maps #/runs/<id> to the run page", () => {
    expect(parseRoute("#/runs/42")).toEqual({ name: "run", id: 42 });
    expect(parseRoute("#/runs/42/")).toEqual({ name: "run", id: 42 });
    expect(parseRoute("#/runs/7?x=1")).toEqual({ name: "run", id: 7 });
  });
  it("rejects malformed ids and unknown paths", () => {
    expect(parseRoute("#/runs/abc").name).toBe("notFound");
    expect(parseRoute("#/runs/-1").name).toBe("notFound");
    expect(parseRoute("#/nope").name).toBe("notFound");
  });
  it("maps #/compare?runs=1,2 to the compare view with deduplicated ids", () => {
    expect(parseRoute("#/compare?runs=1,2")).toEqual({ name: "compare", ids: [1, 2] });
    expect(parseRoute("#/compare?runs=3,x,3,,4")).toEqual({ name: "compare", ids: [3, 4] });
    expect(parseRoute("#/compare")).toEqual({ name: "compare", ids: [] });
  });
  it("maps #/tune to the tune groups and #/tune/<id> to one group", () => {
    expect(parseRoute("#/tune")).toEqual({ name: "tunes" });
    expect(parseRoute("#/tune/3")).toEqual({ name: "tune", id: 3 });
    expect(parseRoute("#/tune/x").name).toBe("notFound");
  });
  it("maps #/alerts to the alerts view", () => {
    expect(parseRoute("#/alerts")).toEqual({ name: "alerts" });
  });
  it("maps #/cost to the starvation cost view, with its since date", () => {
    expect(parseRoute("#/cost")).toEqual({ name: "cost", since: null });
    expect(parseRoute("#/cost?since=2026-11-01")).toEqual({ name: "cost", since: "2026-11-01" });
  });
  it("round-trips with runHref", () => {
    expect(parseRoute(runHref(15))).toEqual({ name: "run", id: 15 });
  });
});
