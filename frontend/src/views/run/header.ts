// The run page's header (name, status, project, times, tags, notes, and the
// edit / export / delete actions) and its row of summary figures.

import { fedEstimate, fedSentence } from "../../state/cost";
import { h, replaceChildren, setText } from "../../app/dom";
import { energyFigures, type RunEnergy } from "../../state/energy";
import { formatTimestamp } from "../../app/format";
import { runDurationSeconds, runSummaryFigures } from "../../state/runs";
import type { Run } from "../../api/types";
import { statusBadge, tagList } from "../common";

export interface RunActions {
  /** Whether the token in use may edit, pin and delete (the admin's); else only export. */
  canEdit: boolean;
  edit: () => void;
  exportCsv: () => void;
  remove: () => void;
  /** Pin or unpin: retention keeps a pinned run's raw rows. */
  togglePin: () => void;
}

export function renderRunHeader(box: HTMLElement, run: Run, actions: RunActions): void {
  replaceChildren(
    box,
    h(
      "div",
      { class: "title-row" },
      h("h1", { class: "run-name", text: run.name || `run ${run.id}`, attrs: { "data-testid": "run-name" } }),
      statusBadge(run.status, run.summary.steps_to_upload),
      h("div", { class: "spacer" }),
      h(
        "div",
        { class: "run-actions" },
        actions.canEdit ? pinButton(run, actions.togglePin) : run.pinned ? h("span", { class: "badge pinned", text: "Pinned", attrs: { "data-testid": "run-pinned" } }) : null,
        actions.canEdit
          ? h("button", { text: "Edit", attrs: { type: "button", "data-testid": "run-edit-button", "aria-label": "Edit name, tags and notes" }, on: { click: actions.edit } })
          : null,
        h("button", { text: "Export CSV", attrs: { type: "button", "data-testid": "export-csv", "aria-label": "Download all steps as CSV" }, on: { click: actions.exportCsv } }),
        actions.canEdit
          ? h("button", {
              class: "danger",
              text: "Delete",
              attrs: {
                type: "button",
                "data-testid": "run-delete",
                "aria-label": "Delete this run",
                // Its next batch would bring a partial copy back: the server refuses it.
                disabled: run.status === "running",
                title: run.status === "running" ? "A running run cannot be deleted: stop its training first" : null,
              },
              on: { click: actions.remove },
            })
          : null,
      ),
    ),
    h(
      "div",
      { class: "meta-row" },
      h("span", { class: "meta" }, h("span", { class: "meta-label", text: "project" }), h("span", { class: "project", text: run.project || "—" })),
      h("span", { class: "meta" }, h("span", { class: "meta-label", text: "id" }), h("span", { class: "mono", text: String(run.id) })),
      h("span", { class: "meta" }, h("span", { class: "meta-label", text: "started" }), h("span", { class: "mono", text: formatTimestamp(run.started_at) })),
      run.ended_at
        ? h("span", { class: "meta" }, h("span", { class: "meta-label", text: "ended" }), h("span", { class: "mono", text: formatTimestamp(run.ended_at) }))
        : null,
      run.compacted_at
        ? h(
            "span",
            { class: "meta", attrs: { "data-testid": "run-compacted", title: "Retention removed this run's raw steps and most samples; its charts show the rollups kept, summaries and epochs are whole" } },
            h("span", { class: "meta-label", text: "compacted" }),
            h("span", { class: "mono", text: formatTimestamp(run.compacted_at) }),
          )
        : null,
      Array.isArray(run.tags) && run.tags.length > 0 ? tagList(run.tags.map(String)) : null,
    ),
    run.notes ? h("p", { class: "run-notes", text: run.notes, attrs: { "data-testid": "run-notes" } }) : null,
  );
}

/** The pin toggle: pressed while retention keeps the run's raw rows whatever its age. */
function pinButton(run: Run, toggle: () => void): HTMLElement {
  const pinned = run.pinned === true;
  const title = pinned
    ? "Pinned: retention keeps this run's raw rows. Click to unpin."
    : run.compacted_at
      ? "Pin: retention has already reduced this run to rollups; pinning keeps what is left"
      : "Pin: retention keeps this run's raw rows, whatever its age";
  return h("button", {
    class: pinned ? "pin on" : "pin",
    text: pinned ? "Pinned" : "Pin",
    attrs: { type: "button", "aria-pressed": pinned ? "true" : "false", "data-testid": "run-pin", title },
    on: { click: toggle },
  });
}

export function renderRunFigures(box: HTMLElement, run: Run, nowMs: number, energy: RunEnergy | null = null): void {
  replaceChildren(
    box,
    ...[...runSummaryFigures(run, nowMs), ...energyFigures(energy)].map((f) =>
      h(
        "div",
        { class: `figure ${f.tone ?? ""}`.trim(), attrs: { "data-figure": f.key, title: f.title ?? null } },
        h("dt", { text: f.label }),
        h("dd", { text: f.value }),
      ),
    ),
  );
}

/** "Fed, this run would have taken … instead of …": hidden while the run never waited. */
export function renderFedLine(line: HTMLElement, run: Run, nowMs: number): void {
  const sentence = fedSentence(fedEstimate(run.summary, runDurationSeconds(run, nowMs)));
  setText(line, sentence ?? "");
  line.hidden = sentence === null;
}
