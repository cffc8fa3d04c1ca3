// Hash routes: `#/` is the runs list, `#/runs/<id>` a run page.

export type Route =
  | { name: "runs" }
  | { name: "run"; id: number }
  | { name: "notFound"; hash: string };

export function parseRoute(hash: string): Route {
  const path = hash.replace(/^#/, "").replace(/[?].*$/, "");
  if (path === "" || path === "/" || path === "/runs" || path === "/runs/") return { name: "runs" };
  const m = /^\/runs\/(\d+)\/?$/.exec(path);
  if (m) {
    const id = Number(m[1]);
    if (Number.isSafeInteger(id)) return { name: "run", id };
  }
  return { name: "notFound", hash };
}

export function runHref(id: number): string {
  return `#/runs/${id}`;
}

export const RUNS_HREF = "#/";
