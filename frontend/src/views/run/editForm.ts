// The run page's edit form (name, tags, notes): validated in the browser,
// saved with `PATCH /runs/{id}`; the server's answer goes through `onSaved`.

import { h, replaceChildren, setText } from "../../app/dom";
import { validateRunEdit } from "../../state/runs";
import type { Run } from "../../api/types";
import { errorMessage, type AppContext } from "../common";

/** Opens the form in `box` (hidden until then), filled from `run`. */
export function openRunEditForm(box: HTMLElement, ctx: AppContext, run: Run, onSaved: (updated: Run) => void): void {
  const err = (id: string) => h("p", { class: "field-error", attrs: { id, hidden: true, "data-testid": id } });
  const name = h("input", { attrs: { id: "run-edit-name", type: "text", maxlength: "200", "data-testid": "run-edit-name" } });
  const tags = h("input", { attrs: { id: "run-edit-tags", type: "text", "data-testid": "run-edit-tags", placeholder: "baseline, bs256" } });
  const notes = h("textarea", { attrs: { id: "run-edit-notes", rows: 3, maxlength: "10000", "data-testid": "run-edit-notes" } });
  name.value = run.name;
  tags.value = (run.tags ?? []).join(", ");
  notes.value = run.notes ?? "";
  const errs = { name: err("run-edit-error-name"), tags: err("run-edit-error-tags"), notes: err("run-edit-error-notes") };
  const formError = h("p", { class: "error", attrs: { hidden: true, role: "alert" } });
  const close = () => {
    box.hidden = true;
    replaceChildren(box);
  };
  const form = h(
    "form",
    { class: "panel run-edit-form rule-form", attrs: { "data-testid": "run-edit-form", "aria-label": "Edit run" } },
    h("div", { class: "field" }, h("label", { text: "Name", attrs: { for: "run-edit-name" } }), name, errs.name),
    h("div", { class: "field" }, h("label", { text: "Tags (comma or space separated)", attrs: { for: "run-edit-tags" } }), tags, errs.tags),
    h("div", { class: "field" }, h("label", { text: "Notes", attrs: { for: "run-edit-notes" } }), notes, errs.notes),
    formError,
    h(
      "div",
      { class: "form-actions" },
      h("button", { text: "Cancel", attrs: { type: "button" }, on: { click: close } }),
      h("button", { class: "primary", text: "Save", attrs: { type: "submit", "data-testid": "run-edit-save" } }),
    ),
  );
  form.addEventListener("submit", (ev) => {
    ev.preventDefault();
    const { patch, errors } = validateRunEdit({ name: name.value, tags: tags.value, notes: notes.value });
    for (const [k, el] of Object.entries(errs)) {
      const msg = errors[k as keyof typeof errors];
      el.hidden = !msg;
      setText(el, msg ?? "");
    }
    if (!patch) return;
    ctx.api.updateRun(run.id, patch).then(
      (updated) => {
        onSaved(updated);
        close();
      },
      (e: unknown) => {
        formError.hidden = false;
        setText(formError, `Cannot save: ${errorMessage(e)}`);
      },
    );
  });
  replaceChildren(box, form);
  box.hidden = false;
  name.focus();
}
