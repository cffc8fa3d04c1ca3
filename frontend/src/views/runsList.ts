// `#/` — every run, newest first, kept current by the live socket.

import { compareHref } from "../state/compare";
import { h, replaceChildren, setAttrs, setText } from "../app/dom";
import { bestEpochValue, epochCell, epochGoal, epochMetricNames, epochMetricsOf } from "../state/epochs";
import {
  DEFAULT_SORT,
  hasGpuReadings,
  matchesFilter,
  nextEpochSort,
  nextSort,
  parseEpochColumnPref,
  runRowCells,
  serverEpochSort,
  sortRuns,
  type RunSort,
  type RunSortKey,
} from "../state/runs";
import { readStorage, writeStorage } from "../app/storage";
import { loadUiSettings, LOST_TIME, LOST_TIME_MEANS } from "../state/cost";
import { diskSummary, diskSummaryTitle } from "../state/disk";
import type { RunEnergy } from "../state/energy";
import { COST_HREF, runHref } from "../app/router";
import type { Run, RunStatus } from "../api/types";
import { every, statusBadge, tagList, waitLevelClass, type AppContext, type View } from "./common";
import { cannotLoad } from "./loading";

interface Column {
  key: string;
  label: string;
  numeric?: boolean;
  title?: string;
  /** Sort key when the column sorts. */
  sort?: RunSortKey;
  /** A GPU figure: the column is hidden while no run listed has GPU readings. */
  gpu?: boolean;
  /** A second figure in the same column, under the first (its own sort button). */
  under?: Column;
}

const COLUMNS: Column[] = [
  { key: "name", label: "Name", sort: "name" },
  { key: "project", label: "Project", sort: "project" },
  // The verdict under the status, each badge on one line: side by side, the two columns left
  // too little room at 1024 px for the others without breaking words.
  {
    key: "status",
    label: "Status",
    sort: "status",
    under: { key: "verdict", label: "Verdict", sort: "verdict", title: "Is the GPU being fed? The latest diagnosis" },
  },
  { key: "started", label: "Started", sort: "started" },
  { key: "duration", label: "Duration", numeric: true, sort: "duration" },
  { key: "steps", label: "Steps", numeric: true, sort: "steps" },
  { key: "median", label: "Step time median", numeric: true, title: "Median step time over the whole run", sort: "median" },
  { key: "p95", label: "Step time p95", numeric: true, title: "95th percentile step time over the whole run", sort: "p95" },
  { key: "wait", label: "Input wait · whole run", numeric: true, title: "Share of step time spent waiting for input data, over the whole run (so far, while it runs)", sort: "wait" },
  {
    key: "lost",
    label: LOST_TIME,
    numeric: true,
    title: `${LOST_TIME_MEANS} Priced when the server sets STOKER_GPU_HOUR_PRICE.`,
    sort: "lost",
  },
  {
    key: "energy",
    label: "GPU energy",
    numeric: true,
    title: "Energy the run's GPUs drew, and what of it was burned while steps waited for input (priced when the server sets STOKER_ENERGY_PRICE_KWH)",
    sort: "energy",
    gpu: true,
  },
  { key: "gpu", label: "GPU util", numeric: true, title: "Mean GPU utilization", sort: "gpu", gpu: true },
];

/** Names and projects up to this long stay on one line (not "starved-" over "pipeline"); longer
 * ones wrap where they must, so that one long name cannot push the table past the page. */
const NAME_WHOLE = 28;
const PROJECT_WHOLE = 20;

function keepWhole(text: string, upTo: number): string {
  return text.length <= upTo ? " whole" : "";
}

/** localStorage key of the chosen epoch-metric column (and whether the list is sorted by it). */
export const EPOCH_COLUMN_KEY = "stoker.runs.epochColumn";

const STATUSES: (RunStatus | "")[] = ["", "running", "finished", "failed", "interrupted"];

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
  /** Why the server's settings (the GPU-hour price of the lost device time column) could not be read. */
  private readonly settingsError: HTMLElement;
  /** Says why the GPU columns are hidden: no run listed has GPU readings. */
  private readonly noGpuNote: HTMLElement;
  /** Disk use (database, profiles, free space), as the shell last read it. */
  private readonly diskLine: HTMLElement;
  private destroyed = false;
  private readonly countEl: HTMLElement;
  private readonly filterInput: HTMLInputElement;
  private readonly statusSelect: HTMLSelectElement;
  private readonly compareButton: HTMLButtonElement;
  private readonly moreButton: HTMLButtonElement;
  private readonly selectAll: HTMLInputElement;
  private readonly headers = new Map<RunSortKey, HTMLElement>();
  private readonly rows = new Map<number, RowRefs>();
  private readonly selected = new Set<number>();
  private readonly cleanups: (() => void)[] = [];
  private sort: RunSort = DEFAULT_SORT;
  private shownIds: number[] = [];
  /** The epoch metric shown as a column (its best value), or "" for none. */
  private epochMetric = "";
  private readonly epochSelect: HTMLSelectElement;
  private readonly epochHeader: HTMLTableCellElement;
  private readonly epochButton: HTMLButtonElement;
  private readonly epochLabel: HTMLElement;
  private epochOptions = "";
  /** The server sort last fetched, so that runs beyond the loaded pages are not missed. */
  private fetchedSort: string | null = null;
  /** Each shown run's energy split (`/runs/{id}/energy`), with when it was read and whether
   * the run had ended then (an ended run's split is final). */
  private readonly energies = new Map<number, { energy: RunEnergy | null; readAt: number; final: boolean }>();
  private energyLoading = false;

  constructor(ctx: AppContext) {
    this.ctx = ctx;
    this.statusSelect = h(
      "select",
      { class: "filter-select", attrs: { "aria-label": "Filter by status", "data-testid": "status-filter" }, on: { change: () => this.render() } },
      ...STATUSES.map((st) => h("option", { text: st === "" ? "any status" : st, attrs: { value: st } })),
    );
    this.compareButton = h("button", {
      class: "primary",
      text: "Compare",
      attrs: { type: "button", disabled: true, "data-testid": "compare-button", title: "Select two or more runs to compare" },
      on: { click: () => this.openCompare() },
    });
    this.moreButton = h("button", {
      text: "Load older runs",
      attrs: { type: "button", hidden: true, "data-testid": "runs-load-more" },
      on: { click: () => void this.loadMore() },
    });
    this.selectAll = h("input", {
      attrs: { type: "checkbox", "aria-label": "Select all shown runs", "data-testid": "run-select-all" },
      on: { change: () => this.toggleAll(this.selectAll.checked) },
    });
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
    const pref = parseEpochColumnPref(readStorage(EPOCH_COLUMN_KEY));
    if (pref) {
      this.epochMetric = pref.metric;
      if (pref.sort) this.sort = pref.sort;
    }
    this.epochSelect = h("select", {
      class: "filter-select",
      attrs: { "aria-label": "Epoch metric column", "data-testid": "epoch-metric-select", title: "Show the best value of an epoch metric as a column" },
      on: { change: () => this.chooseEpochMetric(this.epochSelect.value) },
    });
    this.epochLabel = h("span");
    this.epochButton = h(
      "button",
      { class: "sort", attrs: { type: "button", "data-sort": "epoch", "data-testid": "epoch-sort" }, on: { click: () => this.sortByEpochMetric() } },
      this.epochLabel,
      h("span", { class: "sort-mark", attrs: { "aria-hidden": "true" } }),
    );
    this.epochHeader = h("th", { class: "num", attrs: { scope: "col", hidden: true, "data-testid": "epoch-column" } }, this.epochButton);
    this.headers.set("epoch", this.epochHeader);
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
          h("th", { class: "select-col", attrs: { scope: "col" } }, this.selectAll),
          ...COLUMNS.map((c) => this.headerCell(c)),
          this.epochHeader,
        ),
      ),
      this.tbody,
    );
    this.stateBox = h("div", { class: "state-box", attrs: { "aria-live": "polite" } });
    this.settingsError = h("p", { class: "error", attrs: { role: "status", hidden: true, "data-testid": "settings-error" } });
    this.noGpuNote = h("p", {
      class: "muted no-gpu-note",
      text: "No run listed has GPU readings (no GPU, or NVML unavailable to the agent): the GPU columns (energy, utilization) appear once one has.",
      attrs: { hidden: true, "data-testid": "runs-no-gpu" },
    });
    this.diskLine = h("p", { class: "disk-use muted", attrs: { hidden: true, "data-testid": "disk-use" } });
    this.el = h(
      "section",
      { class: "page runs-page", attrs: { "aria-labelledby": "runs-heading" } },
      h(
        "div",
        { class: "page-head" },
        h("h1", { text: "Runs", attrs: { id: "runs-heading" } }),
        this.countEl,
        h("div", { class: "spacer" }),
        this.epochSelect,
        this.statusSelect,
        this.filterInput,
        this.compareButton,
        h("a", { class: "button-link", text: "Starvation cost", attrs: { href: COST_HREF, "data-testid": "cost-link", title: "Device time lost to input starvation, per project and run" } }),
      ),
      h("div", { class: "table-wrap" }, this.table),
      this.stateBox,
      this.noGpuNote,
      this.settingsError,
      h("div", { class: "more-row" }, this.moreButton),
      this.diskLine,
    );
    this.cleanups.push(ctx.disk.subscribe(() => this.showDisk()));
    this.showDisk();
    this.cleanups.push(ctx.runs.subscribe((changed) => (changed ? this.renderRun(changed) : this.render())));
    this.cleanups.push(every(10_000, () => this.render()));
    this.render();
    loadUiSettings(ctx.api).then(
      () => this.render(),
      (err: unknown) => {
        if (this.destroyed) return; // left the page
        setText(this.settingsError, cannotLoad("the server's settings", err, false));
        this.settingsError.hidden = false;
      },
    );
  }

  private showDisk(): void {
    const d = this.ctx.disk.current;
    this.diskLine.hidden = d === null;
    if (!d) return;
    setText(this.diskLine, `Disk: ${diskSummary(d)}`);
    setAttrs(this.diskLine, { title: diskSummaryTitle(d), "data-state": d.full ? "full" : d.low ? "low" : "ok" });
  }

  destroy(): void {
    this.destroyed = true;
    for (const c of this.cleanups.splice(0)) c();
  }

  private headerCell(c: Column): HTMLElement {
    const cls = [c.numeric ? "num" : "", c.gpu ? "gpu-col" : "", c.under ? "stacked" : ""].join(" ").trim();
    if (!c.sort) return h("th", { class: cls, text: c.label, attrs: { scope: "col", title: c.title ?? null } });
    const buttons = [this.sortButton(c), c.under ? this.sortButton(c.under) : null];
    const th = h("th", { class: cls, attrs: { scope: "col" } }, ...buttons);
    for (const key of [c.sort, c.under?.sort]) if (key) this.headers.set(key, th);
    return th;
  }

  private sortButton(c: Column): HTMLButtonElement | null {
    const key = c.sort;
    if (!key) return null;
    return h(
      "button",
      {
        class: "sort",
        attrs: { type: "button", title: c.title ? `${c.title}: sort` : `Sort by ${c.label.toLowerCase()}`, "data-sort": key },
        on: {
          click: () => {
            this.sort = nextSort(this.sort, key);
            this.render();
          },
        },
      },
      c.label,
      h("span", { class: "sort-mark", attrs: { "aria-hidden": "true" } }),
    );
  }

  /** Show (or hide, for "") the best value of an epoch metric as a column, sorted best first. */
  private chooseEpochMetric(metric: string): void {
    this.epochMetric = metric;
    if (metric) this.sort = nextEpochSort({ ...DEFAULT_SORT }, metric, this.epochGoalOf(metric));
    else if (this.sort.key === "epoch") this.sort = DEFAULT_SORT;
    this.remember();
    this.render();
  }

  private sortByEpochMetric(): void {
    if (!this.epochMetric) return;
    this.sort = nextEpochSort(this.sort, this.epochMetric, this.epochGoalOf(this.epochMetric));
    this.remember();
    this.render();
  }

  private epochGoalOf(metric: string): "min" | "max" {
    const entry = this.ctx.runs.list().map((r) => epochMetricsOf(r.summary)[metric]).find((e) => e);
    return epochGoal(metric, entry);
  }

  private remember(): void {
    writeStorage(EPOCH_COLUMN_KEY, JSON.stringify({ metric: this.epochMetric, sort: this.sort.key === "epoch" ? this.sort : null }));
  }

  /** The epoch-metric menu: every epoch metric the loaded runs recorded (and the remembered one). */
  private renderEpochSelect(runs: Run[]): void {
    const names = epochMetricNames(runs.map((r) => r.summary));
    if (this.epochMetric && !names.includes(this.epochMetric)) names.unshift(this.epochMetric);
    const key = names.join("\n");
    if (key !== this.epochOptions) {
      this.epochOptions = key;
      replaceChildren(
        this.epochSelect,
        h("option", { text: names.length ? "epoch metric column: none" : "no epoch metrics yet", attrs: { value: "" } }),
        ...names.map((n) => h("option", { text: `best ${n}`, attrs: { value: n } })),
      );
    }
    this.epochSelect.value = this.epochMetric;
    const metric = this.epochMetric;
    setAttrs(this.epochHeader, { hidden: metric ? null : true, "data-metric": metric || null });
    setText(this.epochLabel, metric ? `best ${metric}` : "");
    setAttrs(this.epochButton, { title: metric ? `Best ${metric} of each run (${this.epochGoalOf(metric) === "min" ? "lowest" : "highest"}): sort` : null });
  }

  /**
   * Sorted by an epoch metric while older runs are not loaded: ask the server for the best
   * runs by that metric (it sorts every run), so the top of the list is right.
   */
  private fetchServerSort(): void {
    const sort = serverEpochSort(this.sort);
    const runs = this.ctx.runs;
    if (!sort || sort === this.fetchedSort || runs.total === null || runs.total <= runs.size) return;
    this.fetchedSort = sort;
    void this.ctx.api
      .listRuns(undefined, { limit: 1000, sort })
      .then((page) => runs.replaceAll(Array.isArray(page?.data) ? page.data : []))
      .catch(() => {
        this.fetchedSort = null;
      });
  }

  private showSort(): void {
    const sorted = this.headers.get(this.sort.key);
    for (const [key, th] of this.headers) {
      const active = key === this.sort.key;
      // A column of two figures is sorted when either is.
      if (th !== sorted || active) setAttrs(th, { "aria-sort": active ? (this.sort.desc ? "descending" : "ascending") : null });
      const mark = th.querySelector(`[data-sort="${key}"] .sort-mark`) ?? th.querySelector(".sort-mark");
      if (mark) setText(mark, active ? (this.sort.desc ? "▾" : "▴") : "");
    }
  }

  private toggle(id: number, on: boolean): void {
    if (on) this.selected.add(id);
    else this.selected.delete(id);
    this.showSelection();
  }

  private toggleAll(on: boolean): void {
    for (const id of this.shownIds) {
      if (on) this.selected.add(id);
      else this.selected.delete(id);
    }
    for (const [id, refs] of this.rows) {
      const box = refs.tr.querySelector<HTMLInputElement>('input[type="checkbox"]');
      if (box) box.checked = this.selected.has(id);
    }
    this.showSelection();
  }

  private showSelection(): void {
    const n = this.selected.size;
    this.compareButton.disabled = n < 2;
    setText(this.compareButton, n >= 2 ? `Compare ${n}` : "Compare");
    setAttrs(this.compareButton, { title: n >= 2 ? `Compare the ${n} selected runs` : "Select two or more runs to compare" });
    const shownSelected = this.shownIds.filter((id) => this.selected.has(id)).length;
    this.selectAll.checked = shownSelected > 0 && shownSelected === this.shownIds.length;
    this.selectAll.indeterminate = shownSelected > 0 && shownSelected < this.shownIds.length;
  }

  private async loadMore(): Promise<void> {
    this.moreButton.disabled = true;
    try {
      const page = await this.ctx.api.listRuns(undefined, { limit: 1000, offset: this.ctx.runs.size });
      this.ctx.runs.replaceAll(Array.isArray(page?.data) ? page.data : [], page?.count);
    } catch {
      /* the button stays; a retry is one click away */
    } finally {
      this.moreButton.disabled = false;
    }
  }

  private openCompare(): void {
    const ids = [...this.selected].sort((a, b) => a - b);
    if (ids.length >= 2) location.hash = compareHref(ids);
  }

  /** One run changed: update its row in place, or re-order when it is new. */
  private renderRun(run: Run): void {
    const refs = this.rows.get(run.id);
    if (refs && this.matches(run) && this.sort.key === "started") {
      this.updateRow(refs, run, this.ctx.now());
      return;
    }
    this.render();
  }

  private matches(run: Run): boolean {
    const st = this.statusSelect.value;
    return (st === "" || run.status === st) && matchesFilter(run, this.filterInput.value);
  }

  private render(): void {
    const now = this.ctx.now();
    const all = this.ctx.runs.list();
    this.renderEpochSelect(all);
    this.fetchServerSort();
    const shown = sortRuns(
      all.filter((r) => this.matches(r)),
      this.sort,
      now,
      (id) => this.ctx.runs.verdictOf(id),
    );
    this.shownIds = shown.map((r) => r.id);
    // Without GPU readings the GPU columns would be dashes only: hidden, and said why.
    const gpus = shown.some(hasGpuReadings);
    this.table.classList.toggle("no-gpu", !gpus);
    this.noGpuNote.hidden = gpus || shown.length === 0;
    this.showSort();
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
    for (const id of [...this.selected]) if (!this.ctx.runs.get(id)) this.selected.delete(id);
    this.showSelection();
    const total = this.ctx.runs.total;
    this.moreButton.hidden = total === null || total <= all.length;
    if (total !== null && total > all.length) setText(this.moreButton, `Load older runs (${all.length} of ${total} shown)`);
    this.renderState(all.length, shown.length);
    void this.loadEnergies(shown);
  }

  /**
   * Reads the energy split of shown runs that report energy, one request at a time: an
   * ended run's once, a running run's again after 30 s; re-renders when new ones came in.
   */
  private async loadEnergies(shown: Run[]): Promise<void> {
    if (this.energyLoading || this.destroyed) return;
    const now = Date.now();
    const due = shown.filter((run) => {
      if (typeof run.summary?.energy_j !== "number") return false;
      const held = this.energies.get(run.id);
      return !held || (!held.final && (run.status !== "running" || now - held.readAt >= 30_000));
    });
    if (!due.length) return;
    this.energyLoading = true;
    let read = 0;
    try {
      for (const run of due.slice(0, 50)) {
        if (this.destroyed) return;
        const final = run.status !== "running";
        try {
          const energy = await this.ctx.api.getEnergy(run.id);
          this.energies.set(run.id, { energy, readAt: Date.now(), final });
          read++;
        } catch {
          // Shown without the split (the summary's total stays); tried again after 30 s.
          this.energies.set(run.id, { energy: this.energies.get(run.id)?.energy ?? null, readAt: Date.now(), final: false });
        }
      }
    } finally {
      this.energyLoading = false;
    }
    if (read && !this.destroyed) this.render();
  }

  private updateRow(refs: RowRefs, run: Run, now: number): void {
    const c = runRowCells(run, now, this.ctx.runs.verdictOf(run.id), undefined, this.energies.get(run.id)?.energy ?? null);
    const epoch = this.epochMetric ? epochCell(run, this.epochMetric) : null;
    const key = JSON.stringify([c, epoch]);
    if (key === refs.key) return;
    refs.key = key;
    const tr = refs.tr;
    setAttrs(tr, { "data-status": run.status });
    const link = h("a", { class: `run-link${keepWhole(c.name, NAME_WHOLE)}`, text: c.name, attrs: { href: runHref(run.id) } });
    const num = (text: string, column: string, extra = "") => h("td", { class: `num ${extra}`.trim(), text, attrs: { "data-col": column } });
    const box = h("input", {
      attrs: {
        type: "checkbox",
        "aria-label": `Select ${c.name} to compare`,
        "data-testid": "run-select",
        "data-run-id": run.id,
      },
      on: { change: (ev) => this.toggle(run.id, (ev.target as HTMLInputElement).checked) },
    });
    box.checked = this.selected.has(run.id);
    replaceChildren(
      tr,
      h("td", { class: "select-col" }, box),
      // Tags under the name: a column of their own left the others too little room at 1024 px.
      h("td", { class: "name" }, link, h("span", { class: "run-id", text: `#${run.id}` }), c.tags.length ? tagList(c.tags) : null),
      h("td", { class: `project${keepWhole(c.project, PROJECT_WHOLE)}`, text: c.project }),
      h(
        "td",
        { class: "stacked" },
        statusBadge(c.status, run.summary.steps_to_upload),
        h("span", {
          class: c.verdict ? `badge verdict tone-${c.verdictTone}` : "muted",
          text: c.verdictText,
          attrs: { "data-testid": "verdict-badge", "data-verdict": c.verdict ?? "none", title: c.verdictTitle },
        }),
      ),
      h("td", { class: "started", text: c.started, attrs: { title: c.startedTitle } }),
      num(c.duration, "duration"),
      num(c.steps, "steps"),
      num(c.median, "median"),
      num(c.p95, "p95"),
      h("td", { class: `num ${waitLevelClass(c.inputWaitLevel)}`, text: c.inputWait, attrs: { title: c.inputWaitTitle, "data-testid": "input-wait" } }),
      h("td", { class: "num", text: c.lostTime, attrs: { title: c.lostTimeTitle, "data-testid": "lost-gpu", "data-value": run.summary?.lost_gpu_s ?? "" } }),
      h(
        "td",
        { class: "num gpu-col", attrs: { title: c.energyTitle, "data-testid": "run-energy", "data-value": run.summary?.energy_j ?? "" } },
        c.energy,
        c.energyStarved ? h("div", { class: "muted", text: c.energyStarved, attrs: { "data-testid": "run-energy-starved" } }) : null,
      ),
      num(c.gpu, "gpu", "gpu-col"),
      epoch
        ? h("td", {
            class: "num epoch-best",
            text: epoch.text,
            attrs: { title: epoch.title, "data-testid": "epoch-best", "data-value": bestEpochValue(run, this.epochMetric) ?? "" },
          })
        : null,
    );
  }

  private renderState(total: number, shown: number): void {
    const runs = this.ctx.runs;
    if (total > 0) {
      if (shown === 0) replaceChildren(this.stateBox, h("p", { class: "muted", text: "No run matches the filter.", attrs: { "data-testid": "runs-no-match" } }));
      else replaceChildren(this.stateBox);
      return;
    }
    if (runs.error) {
      replaceChildren(
        this.stateBox,
        h("p", { class: "error", text: cannotLoad("runs", runs.error, false) }),
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
