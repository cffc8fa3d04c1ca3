// Pieces shared by the views (runs list, run page, alerts, compare).

import { neverFired, type AlertsStore } from "../state/alerts";
import type { ApiClient } from "../api/client";
import { h } from "../app/dom";
import { formatRelativeTime, formatTimestamp, statusLabel } from "../app/format";
import type { LiveClient } from "../api/liveClient";
import type { AccessStore } from "../state/access";
import type { DiskStore } from "../state/disk";
import type { RunsStore } from "../state/runs";
import type { InputWaitLevel } from "../state/verdict";
import type { Alert, RunStatus } from "../api/types";

/** What every view gets from the app. */
export interface AppContext {
  api: ApiClient;
  live: LiveClient;
  runs: RunsStore;
  alerts: AlertsStore;
  /** Disk use, read by the shell (banner) every DISK_POLL_MS; the runs page shows it too. */
  disk: DiskStore;
  /** What the token in use may do: only those actions are offered. */
  access: AccessStore;
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

/** The link from an alert (or its event) to the profile its rule captured when it fired. */
export function profileLink(runId: number, profileId: number, testId: string): HTMLElement {
  return h(
    "a",
    {
      class: "alert-profile",
      text: `Profile #${profileId} captured when it fired`,
      attrs: { href: `#/runs/${runId}`, "data-testid": testId, "data-profile-id": profileId, title: "The run page shows the profile" },
    },
  );
}

/** A list of alerts (run page history and alerts view); with `runName`, each links to its run. */
export function alertList(alerts: Alert[], nowMs: number, runName?: (id: number) => string | null): HTMLElement {
  return h(
    "ul",
    { class: "alerts-list", attrs: { "data-testid": "alerts-list" } },
    ...alerts.map((a) => {
      const when = a.resolved_at ?? a.fired_at ?? a.started_at;
      const runId = a.run_id; // null: a server alert (disk), which links to no run
      const name = runId == null ? null : runName?.(runId);
      // Never fired (pending, cleared before the rule's `for`): its own look, not "resolved".
      const state = neverFired(a) ? "cleared" : a.state;
      return h(
        "li",
        { class: `alert-item state-${state}`, attrs: { "data-testid": "alert-row", "data-state": state, "data-alert-id": a.id } },
        h("span", { class: `badge alert-state state-${state}`, text: state === "cleared" ? "pending, cleared" : a.state }),
        h(
          "div",
          { class: "alert-body" },
          h("div", { class: "alert-title" }, h("strong", { text: a.rule_name }), runName && runId != null ? h("a", { class: "alert-run", text: name ?? `run #${runId}`, attrs: { href: `#/runs/${runId}` } }) : null,
            // Its id too: two runs may share a name (two demos' "fed-pipeline").
            runName && runId != null && name ? h("span", { class: "run-id", text: `#${runId}` }) : null, runId == null ? h("span", { class: "alert-run muted", text: "server" }) : null),
          a.message ? h("div", { class: "alert-message", text: a.message }) : null,
          a.profile_id != null && runId != null ? profileLink(runId, a.profile_id, "alert-profile") : null,
        ),
        h("span", { class: "alert-when muted", text: formatRelativeTime(when, nowMs), attrs: { title: formatTimestamp(when) } }),
      );
    }),
  );
}
