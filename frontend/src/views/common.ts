// Pieces shared by the runs list and the run page.

import type { AlertsStore } from "../alerts";
import type { ApiClient } from "../api";
import { h } from "../dom";
import { statusLabel, type InputWaitLevel } from "../format";
import type { LiveClient } from "../liveClient";
import type { RunsStore } from "../runs";
import type { RunStatus } from "../types";

/** What every view gets from the app. */
export interface AppContext {
  api: ApiClient;
  live: LiveClient;
  runs: RunsStore;
  alerts: AlertsStore;
  /** Current time in ms (injectable so views render relative times consistently). */
  now: () => number;
}

export interface View {
  readonly el: HTMLElement;
  destroy(): void;
}

export function statusBadge(status: RunStatus, stepsToUpload?: number | null): HTMLElement {
  const known = ["running", "finished", "failed", "interrupted"].includes(status);
  const label = statusLabel(String(status), stepsToUpload);
  return h("span", {
    class: `badge status status-${known ? status : "unknown"}`,
    text: label.text,
    attrs: { "data-status": String(status), title: label.title },
  });
}

export function tagList(tags: string[]): HTMLElement {
  const ul = h("ul", { class: "tags", attrs: { "aria-label": "tags" } });
  for (const tag of tags) ul.append(h("li", { class: "tag", text: tag }));
  return ul;
}

export function waitLevelClass(level: InputWaitLevel): string {
  return `wait-${level}`;
}

/** Re-run `fn` every `ms` while the view lives (relative times, running durations). */
export function every(ms: number, fn: () => void): () => void {
  const id = setInterval(fn, ms);
  return () => clearInterval(id);
}

export function errorMessage(err: unknown): string {
  if (err instanceof Error) return err.message;
  return String(err);
}

/** A muted box saying a feature is not available (endpoint missing) or empty. */
export function emptyNote(text: string, testId?: string): HTMLElement {
  return h("p", { class: "muted empty-note", text, attrs: { "data-testid": testId ?? null } });
}

/** A section panel with a heading and an optional right-hand toolbar. */
export function panel(title: string, id: string, body: Node[], tools: Node[] = [], testId?: string): HTMLElement {
  return h(
    "section",
    { class: "panel", attrs: { "aria-labelledby": id, "data-testid": testId ?? null } },
    h("div", { class: "panel-head" }, h("h2", { text: title, attrs: { id } }), h("div", { class: "spacer" }), ...tools),
    ...body,
  );
}
