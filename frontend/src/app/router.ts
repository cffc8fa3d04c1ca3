// Hash routes: `#/` runs list, `#/runs/<id>` a run page, `#/compare?runs=1,2`
// the compare view, `#/alerts` alerts and rules, `#/cost?since=2026-11-01` the
// device time lost to input starvation, `#/tune` the `stoker tune` groups and
// `#/tune/<id>` one of them.

import { parseRunIds } from "../state/compare";

export type Route =
  | { name: "runs" }
  | { name: "run"; id: number }
  | { name: "compare"; ids: number[] }
  | { name: "alerts" }
  | { name: "cost"; since: string | null }
  | { name: "tunes" }
  | { name: "tune"; id: number }
  | { name: "notFound"; hash: string };

export function parseRoute(hash: string): Route {
  const raw = hash.replace(/^#/, "");
  const qi = raw.indexOf("?");
  const path = qi >= 0 ? raw.slice(0, qi) : raw;
  const query = new URLSearchParams(qi >= 0 ? raw.slice(qi + 1) : "");
  if (path === "" || path === "/" || path === "/runs" || path === "/runs/") return { name: "runs" };
  const m = /^\/runs\/(\d+)\/?$/.exec(path);
  if (m) {
    const id = Number(m[1]);
    if (Number.isSafeInteger(id)) return { name: "run", id };
  }
  if (path === "/compare" || path === "/compare/") return { name: "compare", ids: parseRunIds(query.get("runs")) };
  if (path === "/alerts" || path === "/alerts/") return { name: "alerts" };
  if (path === "/cost" || path === "/cost/") return { name: "cost", since: query.get("since") };
  if (path === "/tune" || path === "/tune/") return { name: "tunes" };
  const tune = /^\/tune\/(\d+)\/?$/.exec(path);
  if (tune) {
    const id = Number(tune[1]);
    if (Number.isSafeInteger(id)) return { name: "tune", id };
  }
  return { name: "notFound", hash };
}

export function runHref(id: number): string {
  return `#/runs/${id}`;
}

export function tuneHref(id: number): string {
  return `#/tune/${id}`;
}

export const RUNS_HREF = "#/";
export const TUNE_HREF = "#/tune";
export const ALERTS_HREF = "#/alerts";
export const COMPARE_HREF = "#/compare";
export const COST_HREF = "#/cost";
