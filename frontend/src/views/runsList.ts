// `#/` — every run, newest first, kept current by the live socket.

import { h, replaceChildren, setAttrs, setText } from "../dom";
import { matchesFilter, runRowCells } from "../runs";
import { runHref } from "../router";
import type { Run } from "../types";
import { every, statusBadge, tagList, waitLevelClass, type AppContext, type View } from "./common";

interface Column {
  key: string;
  label: string;
  numeric?: boolean;
  title?: string;
}

const COLUMNS: Column[] = [
  { key: "name", label: "Name" },
  { key: "project", label: "Project" },
  { key: "tags", label: "Tags" },
  { key: "status", label: "Status" },
  { key: "started", label: "Started" },
  { key: "duration", label: "Duration", numeric: true },
  { key: "steps", label: "Steps", numeric: true },
  { key: "median", label: "Step median", numeric: true, title: "Median step time" },
  { key: "p95", label: "Step p95", numeric: true, title: "95th percentile step time" },
  { key: "wait", label: "Input wait", numeric: true, title: "Share of step time spent waiting for input data" },
];

interface RowRefs {
  tr: HTMLTableRowElement;
  /** JSON of what the row shows, to skip rewriting unchanged rows. */
  key: string;
}

export class RunsListView implements View {
  readonly el: HTMLElement;
  private readonly ctx: AppContext;
  private readonly tbody: HTMLTableSectionElement;
  private readonly table: HTMLTableElement;
  private readonly stateBox: HTMLElement;
  private readonly countEl: HTMLElement;
  private readonly filterInput: HTMLInputElement;
  private readonly rows = new Map<number, RowRefs>();
  private readonly cleanups: (() => void)[] = [];

  constructor(ctx: AppContext) {
    this.ctx = ctx;
    this.countEl = h("span", { class: "count", attrs: { "data-testid": "runs-count" } });
    this.filterInput = h("input", {
      class: "filter",
      attrs: {
        type: "search",
        placeholder: "Filter by name, project, tag, status",
        "aria-label": "Filter runs",
        autocomplete: "off",
        spellcheck: "false",
      },
      on: { input: () => this.render() },
    });
    this.tbody = h("tbody");
    this.table = h(
      "table",
      { class: "runs-table", attrs: { "data-testid": "runs-table" } },
      h("caption", { class: "visually-hidden", text: "Training runs, newest first" }),
      h(
        "thead",
        null,
        h(
          "tr",
          null,
          ...COLUMNS.map((c) =>
            h("th", {
              class: c.numeric ? "num" : "",
              text: c.label,
              attrs: { scope: "col", title: c.title ?? null },
            }),
          ),
        ),
      ),
      this.tbody,
    );
    this.stateBox = h("div", { class: "state-box", attrs: { "aria-live": "polite" } });
    this.el = h(
      "section",
      { class: "page runs-page", attrs: { "aria-labelledby": "runs-heading" } },
      h(
        "div",
        { class: "page-head" },
        h("h1", { text: "Runs", attrs: { id: "runs-heading" } }),
        this.countEl,
        h("div", { class: "spacer" }),
        this.filterInput,
      ),
      h("div", { class: "table-wrap" }, this.table),
      this.stateBox,
    );
    this.cleanups.push(ctx.runs.subscribe((changed) => (changed ? this.renderRun(changed) : this.render())));
    this.cleanups.push(every(10_000, () => this.render()));
    this.render();
  }

  destroy(): void {
    for (const c of this.cleanups.splice(0)) c();
  }

  /** One run changed: update its row in place, or re-order when it is new. */
  private renderRun(run: Run): void {
    const refs = this.rows.get(run.id);
    if (refs && matchesFilter(run, this.filterInput.value)) {
      this.updateRow(refs, run, this.ctx.now());
      return;
    }
    this.render();
  }

  private render(): void {
    const now = this.ctx.now();
    const all = this.ctx.runs.list();
    const query = this.filterInput.value;
    const shown = all.filter((r) => matchesFilter(r, query));
    setText(this.countEl, shown.length === all.length ? `${all.length}` : `${shown.length} of ${all.length}`);

    const keep = new Set<number>();
    let prev: HTMLTableRowElement | null = null;
    for (const run of shown) {
      keep.add(run.id);
      let refs = this.rows.get(run.id);
      if (!refs) {
        refs = { tr: h("tr", { attrs: { "data-testid": "run-row", "data-run-id": run.id } }), key: "" };
        this.rows.set(run.id, refs);
      }
      this.updateRow(refs, run, now);
      // Keep DOM order equal to list order without re-inserting rows that are in place.
      const expected: ChildNode | null = prev ? prev.nextSibling : this.tbody.firstChild;
      if (expected !== refs.tr) this.tbody.insertBefore(refs.tr, expected);
      prev = refs.tr;
    }
    for (const [id, refs] of this.rows) {
      if (!keep.has(id)) {
        refs.tr.remove();
        this.rows.delete(id);
      }
    }
    this.renderState(all.length, shown.length);
  }

  private updateRow(refs: RowRefs, run: Run, now: number): void {
    const c = runRowCells(run, now);
    const key = JSON.stringify(c);
    if (key === refs.key) return;
    refs.key = key;
    const tr = refs.tr;
    setAttrs(tr, { "data-status": run.status });
    const link = h("a", { class: "run-link", text: c.name, attrs: { href: runHref(run.id) } });
    const num = (text: string, extra = "") => h("td", { class: `num ${extra}`.trim(), text });
    replaceChildren(
      tr,
      h("td", { class: "name" }, link, h("span", { class: "run-id", text: `#${run.id}` })),
      h("td", { class: "project", text: c.project }),
      h("td", { class: "tags-cell" }, tagList(c.tags)),
      h("td", null, statusBadge(c.status)),
      h("td", { class: "started", text: c.started, attrs: { title: c.startedTitle } }),
      num(c.duration),
      num(c.steps),
      num(c.median),
      num(c.p95),
      h("td", { class: `num ${waitLevelClass(c.inputWaitLevel)}`, text: c.inputWait, attrs: { title: c.inputWaitTitle } }),
    );
  }

  private renderState(total: number, shown: number): void {
    const runs = this.ctx.runs;
    if (total > 0) {
      if (shown === 0) replaceChildren(this.stateBox, h("p", { class: "muted", text: "No run matches the filter." }));
      else replaceChildren(this.stateBox);
      return;
    }
    if (runs.error) {
      replaceChildren(
        this.stateBox,
        h("p", { class: "error", text: `Cannot load runs: ${runs.error}` }),
      );
      return;
    }
    if (!runs.loaded) {
      replaceChildren(this.stateBox, h("p", { class: "muted", text: "Loading runs…" }));
      return;
    }
    replaceChildren(this.stateBox, emptyState());
  }
}

/** What to do when there is nothing yet: add the callback to `model.fit`. */
function emptyState(): HTMLElement {
  const server = `${location.protocol}//${location.host}`;
  const code = [
    "from trainer_agent import StokerCallback",
    "",
    `cb = StokerCallback(run_name="my-run", project="my-project", server="${server}")`,
    "model.fit(cb.wrap(train_ds), epochs=3, callbacks=[cb])",
  ].join("\n");
  return h(
    "div",
    { class: "empty-state", attrs: { "data-testid": "runs-empty" } },
    h("h2", { text: "No runs yet" }),
    h(
      "p",
      null,
      "Add ",
      h("code", { text: "StokerCallback" }),
      " to your ",
      h("code", { text: "model.fit" }),
      " call and start training; the run appears here live.",
    ),
    h("pre", { class: "code" }, h("code", { text: code })),
    h(
      "p",
      { class: "muted" },
      "Wrapping the dataset with ",
      h("code", { text: "cb.wrap(...)" }),
      " measures input wait. For a custom training loop use ",
      h("code", { text: "Monitor" }),
      ", or run ",
      h("code", { text: "stoker demo" }),
      " to see a real Keras training.",
    ),
  );
}
