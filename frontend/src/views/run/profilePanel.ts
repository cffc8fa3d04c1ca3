// The run page's profiler panel: "Profile N steps" asks the run's agent for a
// TensorFlow profiler capture, follows it (requested → capturing → uploading → ready or
// failed) and shows xprof's analysis beside Stoker's own input wait. All text goes in
// through text nodes (dom.h): names of ops and iterators come from the trace.
// A capture of several workers (a distributed run) also lists each worker's own figures
// (profileWorkers.ts) and marks the one that starves the job.

import type { AccessStore } from "../../state/access";
import type { ApiClient } from "../../api/client";
import { h, replaceChildren } from "../../app/dom";
import { formatInputWait, formatMs } from "../../app/format";
import { type ProfileWorker, keepWorkerShares, waitingForWorkerShares, workerRows, starvingWorker } from "./profileWorkers";
import { breakPoints, type IteratorRow, iteratorText, type OpRow, opPlace, ownerOf } from "./profileRows";
import { errorMessage } from "../common";
import { cannotLoad } from "../loading";

type ProfileStatus = "requested" | "capturing" | "uploading" | "ready" | "failed";

interface ProfileStep {
  step: number | null;
  step_ms: number | null;
  input_ms: number | null;
  host_compute_ms: number | null;
  device_compute_ms: number | null;
}

interface Analysis {
  available?: boolean;
  message?: string;
  conclusion?: string | null;
  step_ms_average?: number | null;
  breakdown_ms?: Record<string, number | null>;
  steps?: ProfileStep[];
  iterators?: IteratorRow[];
  top_ops?: OpRow[];
}

/** `GET /runs/{id}/profiles/{pid}` (backend/stoker_server/api/profiles.py). */
export interface Profile {
  id: number;
  run_id: number;
  status: ProfileStatus;
  steps: number;
  first_step: number | null;
  last_step: number | null;
  error: string | null;
  trace_bytes: number | null;
  trace_evicted: boolean;
  overhead: { step_s_before?: number | null; step_s_during?: number | null; ratio?: number | null; start_s?: number; stop_s?: number };
  analysis: Analysis;
  input_share_profiler: number | null;
  input_share_stoker: number | null;
  workers?: ProfileWorker[];
  /** The alert whose rule asked for this capture; null when a user did. */
  alert_id?: number | null;
}

const POLL_MS = 1000;
/** A failed read of the run's profiles is retried this often while the run is live. */
const RETRY_MS = 5000;
const PROGRESS: Record<ProfileStatus, string> = {
  requested: "Asked the agent; the capture starts at the next step…",
  capturing: "Capturing",
  uploading: "Uploading the trace and analysing it…",
  ready: "Ready",
  failed: "Failed",
};
const BREAKDOWN_LABELS: [string, string][] = [
  ["step_ms", "Step"],
  ["input_ms", "Input"],
  ["host_compute_ms", "Host compute"],
  ["device_compute_ms", "Device compute"],
  ["kernel_launch_ms", "Kernel launch"],
  ["collectives_ms", "Collectives"],
  ["other_ms", "Other"],
];

function inProgress(p: Profile | null): boolean {
  return p !== null && p.status !== "ready" && p.status !== "failed";
}

/** A capture of several workers (the single-worker view is unchanged). */
function workersOf(p: Profile): ProfileWorker[] | null {
  return p.workers && p.workers.length > 1 ? p.workers : null;
}

export class ProfilePanel {
  readonly el = h("section", { class: "panel profile-panel", attrs: { "data-testid": "profile-panel", "aria-labelledby": "profile-heading" } });
  private readonly api: ApiClient;
  private readonly runId: number;
  private readonly signal: AbortSignal;
  private readonly stepsInput = h("input", {
    attrs: { type: "number", min: 1, max: 200, value: 20, "aria-label": "Steps to profile", "data-testid": "profile-steps" },
  });
  private readonly button = h("button", { attrs: { type: "button", "data-testid": "profile-button" } });
  private readonly body = h("div", { attrs: { "data-testid": "profile-body", "aria-live": "polite" } });
  private profile: Profile | null = null;
  private error: string | null = null;
  /** Why the run's profiles could not be read (null once read). */
  private loadError: string | null = null;
  private live = false;
  private timer: ReturnType<typeof setTimeout> | null = null;
  private retryTimer: ReturnType<typeof setTimeout> | null = null;
  private downloadUrl: string | null = null;
  private readonly access: AccessStore;

  constructor(api: ApiClient, runId: number, signal: AbortSignal, access: AccessStore) {
    this.api = api;
    this.runId = runId;
    this.signal = signal;
    this.access = access;
    const unsubscribe = access.subscribe(() => this.renderButton());
    signal.addEventListener("abort", unsubscribe);
    this.stepsInput.addEventListener("input", () => this.renderButton());
    this.button.addEventListener("click", () => void this.request());
    signal.addEventListener("abort", () => {
      if (this.timer !== null) clearTimeout(this.timer);
      if (this.retryTimer !== null) clearTimeout(this.retryTimer);
      if (this.downloadUrl) URL.revokeObjectURL(this.downloadUrl);
    });
    replaceChildren(
      this.el,
      h(
        "div",
        { class: "panel-head" },
        h("h2", { text: "Profiler", attrs: { id: "profile-heading" } }),
        h("div", { class: "spacer" }),
        this.stepsInput,
        this.button,
      ),
      this.body,
    );
    this.render();
  }

  /** Whether the run has a live agent (only then can it be profiled). */
  setLive(live: boolean): void {
    if (this.live === live) return;
    this.live = live;
    this.renderButton();
    if (live && this.loadError !== null) this.retryLoad();
  }

  async load(): Promise<void> {
    if (this.retryTimer !== null) clearTimeout(this.retryTimer);
    this.retryTimer = null;
    try {
      const page = await this.api.getJson<{ data: Profile[] }>(`/runs/${this.runId}/profiles`, this.signal);
      if (this.signal.aborted) return;
      this.loadError = null;
      const latest = page.data[0] ?? null;
      // A live status change of a newer capture may have come in meanwhile: keep it.
      if (latest === null && this.profile !== null) this.render();
      else if (latest === null || this.profile === null || latest.id >= this.profile.id) this.show(latest);
      else this.render();
    } catch (err) {
      if (this.signal.aborted) return; // left the page
      this.loadError = errorMessage(err);
      this.render();
      if (this.live) this.retryLoad();
    }
  }

  /** Read the profiles again soon (while the run is live; its page reads them once). */
  private retryLoad(): void {
    if (this.retryTimer !== null || this.signal.aborted) return;
    this.retryTimer = setTimeout(() => {
      this.retryTimer = null;
      void this.load();
    }, RETRY_MS);
  }

  /** A live `profile` message (the server broadcasts every status change). */
  applyLive(raw: Record<string, unknown>): void {
    if (typeof raw.id !== "number" || typeof raw.status !== "string" || typeof raw.analysis !== "object") return;
    if (this.profile !== null && raw.id < this.profile.id) return;
    const live = raw as unknown as Profile;
    // Stoker's share may be filled in on read only (GET): keep the one already held.
    const held = this.profile?.id === live.id ? this.profile : null;
    const workers = Array.isArray(live.workers) ? keepWorkerShares(live.workers, held?.workers ?? []) : live.workers;
    this.show({ ...live, input_share_stoker: live.input_share_stoker ?? held?.input_share_stoker ?? null, workers });
  }

  private steps(): number {
    const n = Math.round(Number(this.stepsInput.value));
    return Number.isFinite(n) && n >= 1 ? n : 20;
  }

  private async request(): Promise<void> {
    this.error = null;
    this.button.disabled = true;
    try {
      const created = await this.api.sendJson<Profile>("POST", `/runs/${this.runId}/profiles`, { steps: this.steps() }, this.signal);
      this.show(created);
    } catch (err) {
      if (this.signal.aborted) return;
      this.error = errorMessage(err);
      this.render();
    }
  }

  private show(profile: Profile | null): void {
    this.profile = profile;
    this.render();
    if (this.timer !== null) clearTimeout(this.timer);
    this.timer = null;
    // Stoker's own share arrives once the captured steps are stored: keep reading until then.
    const waitingForShare =
      profile?.status === "ready" &&
      ((profile.input_share_stoker === null && profile.analysis.available) || waitingForWorkerShares(workersOf(profile) ?? []));
    if (profile && (inProgress(profile) || waitingForShare)) {
      this.timer = setTimeout(() => void this.poll(profile.id), POLL_MS);
    }
  }

  private async poll(pid: number): Promise<void> {
    try {
      const fresh = await this.api.getJson<Profile>(`/runs/${this.runId}/profiles/${pid}`, this.signal);
      if (this.signal.aborted) return;
      this.loadError = null;
      this.show(fresh);
    } catch (err) {
      if (this.signal.aborted) return;
      this.error = errorMessage(err);
      this.show(this.profile);
    }
  }

  private renderButton(): void {
    // Starting a capture inside someone's training is the admin's (the viewer reads them).
    const allowed = this.access.canAdmin;
    this.button.hidden = !allowed;
    this.stepsInput.hidden = !allowed;
    const n = this.steps();
    this.button.textContent = `Profile ${n} step${n === 1 ? "" : "s"}`;
    this.button.disabled = !this.live || inProgress(this.profile);
    this.button.title = this.live ? "Capture a TensorFlow profile of the next steps" : "Only a live run can be profiled";
  }

  private render(): void {
    this.renderButton();
    const p = this.profile;
    replaceChildren(
      this.body,
      this.loadError
        ? h("p", { class: "error", text: cannotLoad("the run's profiles", this.loadError, this.live), attrs: { role: "status", "data-testid": "profile-load-error" } })
        : null,
      this.error ? h("p", { class: "error", text: this.error, attrs: { role: "alert", "data-testid": "profile-error" } }) : null,
      p !== null
        ? this.result(p)
        : this.loadError === null
          ? h("p", { class: "muted", text: "Capture the TensorFlow profiler over the next steps of a live run, without touching the training script." })
          : null,
    );
  }

  private result(p: Profile): HTMLElement {
    const status =
      p.status === "capturing" ? `${PROGRESS.capturing} ${p.steps} steps from step ${p.first_step ?? "?"}…` : `${PROGRESS[p.status]}`;
    const box = h(
      "div",
      { attrs: { "data-testid": "profile-result", "data-status": p.status } },
      h("p", { class: p.status === "failed" ? "error" : "muted", text: p.status === "failed" ? p.error ?? "The capture failed." : status, attrs: { "data-testid": "profile-status" } }),
    );
    if (p.alert_id != null)
      box.append(
        h("p", { class: "muted", text: `Captured by alert #${p.alert_id}, when it fired (its rule's action; see Alert history).`, attrs: { "data-testid": "profile-alert", "data-alert-id": p.alert_id } }),
      );
    const workers = workersOf(p);
    if (workers) box.append(this.workersTable(p, workers));
    if (p.status !== "ready") return box;
    const a = p.analysis;
    if (workers) box.append(...mergedHeading(workers.length));
    if (!a.available) box.append(h("p", { class: "muted", text: a.message ?? "No analysis on this server." }));
    if (a.conclusion) box.append(h("p", { text: a.conclusion, attrs: { "data-testid": "profile-conclusion" } }));
    // With several workers each one's overhead and trace are in the workers table.
    box.append(this.shares(p));
    if (!workers) box.append(this.overhead(p));
    if (a.breakdown_ms) box.append(this.breakdown(a.breakdown_ms));
    if (a.iterators?.length) box.append(iteratorTable(a.iterators));
    if (a.top_ops?.length) box.append(opTable(a.top_ops));
    if (!workers) box.append(this.download(p));
    return box;
  }

  /** Each worker's own figures (its trace analysed alone), the starving one marked. */
  private workersTable(p: Profile, workers: ProfileWorker[]): HTMLElement {
    const rows = workerRows(workers, p.trace_evicted);
    // [label, numeric]: numeric columns are right-aligned, their headings too.
    const head: [string, boolean][] = [
      ["Rank", false],
      ["Status", false],
      ["Steps captured", true],
      ["Input share (profiler)", true],
      ["Input wait (Stoker)", true],
      ["Difference", true],
      ["Capture overhead", true],
      ["Trace", true],
      ["", false],
    ];
    const body = rows.map((r) => {
      const rank = h("td", null, h("span", { text: String(r.rank) }));
      if (r.starving) rank.append(" ", h("span", { class: "badge starving-badge", text: "starves the job", attrs: { "data-testid": "profile-starving" } }));
      const cells: HTMLElement[] = [rank, h("td", { text: r.status })];
      if (r.problem !== null) {
        cells.push(h("td", { class: "error", text: r.problem, attrs: { colspan: head.length - 2, "data-testid": "profile-worker-problem" } }));
      } else {
        cells.push(
          h("td", { class: "num", text: r.steps.text, attrs: { title: r.steps.title || null } }),
          h("td", { class: "num", text: r.profilerShare }),
          h("td", { class: "num", text: r.stokerShare }),
          h("td", { class: "num", text: r.difference }),
          h("td", { class: "num", text: r.overhead.text, attrs: { title: r.overhead.title || null } }),
          h("td", { class: "num", text: r.trace }),
          h("td", null, r.downloadable ? this.workerDownload(p, r.rank) : null),
        );
      }
      return h(
        "tr",
        { class: r.starving ? "starving" : undefined, attrs: { "data-testid": "profile-worker", "data-rank": r.rank, "data-starving": r.starving ? "true" : null } },
        ...cells,
      );
    });
    const starving = starvingWorker(workers);
    const note =
      starving === null
        ? null
        : h("p", {
            class: "profile-starving-note",
            attrs: { "data-testid": "profile-starving-note" },
            text:
              `Rank ${starving.rank} waits longest on its input (${formatInputWait(starving.share)} of its step time, ` +
              `${starving.source === "profiler" ? "the profiler's share" : "Stoker's measure"}): in a synchronous job the other workers wait for it.`,
          });
    const evicted = p.trace_evicted ? h("p", { class: "muted", text: "The traces were evicted (the server's quota for stored traces)." }) : null;
    return h(
      "div",
      { class: "profile-workers-box" },
      h(
        "div",
        { class: "table-wrap" },
        h(
          "table",
          { class: "table profile-workers", attrs: { "data-testid": "profile-workers" } },
          h("caption", { text: `Workers (${workers.length}): each one's trace analysed alone` }),
          h("thead", null, h("tr", null, ...head.map(([c, num]) => h("th", { class: num ? "num" : undefined, text: c, attrs: { scope: "col" } })))),
          h("tbody", null, ...body),
        ),
      ),
      note,
      evicted,
    );
  }

  private workerDownload(p: Profile, rank: number): HTMLElement {
    const link = h("a", {
      text: "Download",
      attrs: { href: "#", "data-testid": "profile-worker-download", title: `Download rank ${rank}'s trace (.xplane.pb; open the workers' traces together in XProf or TensorBoard)`, "aria-label": `Download rank ${rank}'s trace` },
    });
    link.addEventListener("click", (ev) => {
      ev.preventDefault();
      this.fetchTrace(`/runs/${this.runId}/profiles/${p.id}/trace?rank=${rank}`, `run${this.runId}-profile${p.id}-rank${rank}.xplane.pb`);
    });
    return link;
  }

  private fetchTrace(path: string, filename: string): void {
    void this.api
      .getBlob(path, this.signal)
      .then((blob) => {
        if (this.downloadUrl) URL.revokeObjectURL(this.downloadUrl);
        this.downloadUrl = URL.createObjectURL(blob);
        const a = h("a", { attrs: { href: this.downloadUrl, download: filename } });
        a.click();
      })
      .catch((err: unknown) => {
        if (this.signal.aborted) return;
        this.error = `Cannot download the trace (${errorMessage(err)})`;
        this.render();
      });
  }

  private shares(p: Profile): HTMLElement {
    const { input_share_profiler: prof, input_share_stoker: own } = p;
    const diff = prof !== null && own !== null ? `${((prof - own) * 100).toFixed(1)} points` : "–";
    return h(
      "dl",
      { class: "figures", attrs: { "data-testid": "profile-shares" } },
      h("dt", { text: "Input share (profiler)" }),
      h("dd", { text: formatInputWait(prof) }),
      h("dt", { text: "Input wait (Stoker, same steps)" }),
      h("dd", { text: own === null ? "waiting for the steps…" : formatInputWait(own) }),
      h("dt", { text: "Difference" }),
      h("dd", { text: diff }),
    );
  }

  private overhead(p: Profile): HTMLElement {
    const o = p.overhead;
    const ratio = typeof o.ratio === "number" ? `${((o.ratio - 1) * 100).toFixed(1)}%` : "–";
    const text =
      `Capture overhead: median step ${formatMs((o.step_s_during ?? null) === null ? null : (o.step_s_during as number) * 1000)} during vs ` +
      `${formatMs((o.step_s_before ?? null) === null ? null : (o.step_s_before as number) * 1000)} before (${ratio}); ` +
      `start ${formatMs((o.start_s ?? 0) * 1000)}, stop ${formatMs((o.stop_s ?? 0) * 1000)}; trace ${((p.trace_bytes ?? 0) / 1024).toFixed(0)} KiB`;
    return h("p", { class: "muted", text, attrs: { "data-testid": "profile-overhead" } });
  }

  private breakdown(ms: Record<string, number | null>): HTMLElement {
    const rows = BREAKDOWN_LABELS.filter(([key]) => (ms[key] ?? 0) > 0 || key === "step_ms" || key === "input_ms").map(([key, label]) =>
      h("tr", null, h("td", { text: label }), h("td", { class: "num", text: formatMs(ms[key]) })),
    );
    return table("Step-time breakdown (mean per step)", [["Part", false], ["Time", true]], rows, "profile-breakdown");
  }

  private download(p: Profile): HTMLElement {
    if (p.trace_evicted) return h("p", { class: "muted", text: "The trace was evicted (the server's quota for stored traces)." });
    const link = h("a", { text: "Download the trace (.xplane.pb, opens in XProf or TensorBoard)", attrs: { href: "#", "data-testid": "profile-download" } });
    link.addEventListener("click", (ev) => {
      ev.preventDefault();
      this.fetchTrace(`/runs/${this.runId}/profiles/${p.id}/trace`, `run${this.runId}-profile${p.id}.xplane.pb`);
    });
    return h("p", null, link);
  }
}

/** With several workers, the profile's own analysis is of all their traces together. */
function mergedHeading(count: number): HTMLElement[] {
  return [
    h("h3", { class: "profile-merged", text: `All ${count} workers together`, attrs: { "data-testid": "profile-merged" } }),
    h("p", {
      class: "muted",
      text:
        "xprof's analysis of the workers' traces as one capture: the iterator and op tables sum the workers; " +
        "the step breakdown and the input shares are of the steps it aligned across the workers, as the lowest rank took them.",
    }),
  ];
}

/** A table of the analysis: a caption, headings ([label, numeric]) and its rows. */
function table(caption: string, head: [string, boolean][], rows: HTMLElement[], testId: string): HTMLElement {
  return h(
    "div",
    { class: "table-wrap profile-table-wrap" },
    h(
      "table",
      { class: "table profile-table", attrs: { "data-testid": testId } },
      h("caption", { text: caption }),
      h("thead", null, h("tr", null, ...head.map(([c, num]) => h("th", { class: num ? "num" : undefined, text: c, attrs: { scope: "col" } })))),
      h("tbody", null, ...rows),
    ),
  );
}

/** A TensorFlow name that breaks only between its parts (never inside a word). */
function nameCell(name: string, props: { class?: string; title?: string } = {}): HTMLElement {
  const cell = h("td", { class: `name${props.class ? ` ${props.class}` : ""}`, attrs: { title: props.title ?? name } });
  for (const piece of breakPoints(name)) cell.append(piece, h("wbr"));
  return cell;
}

/** xprof's iterators, each named by the pipeline stage it is (its path on hover). */
function iteratorTable(iterators: IteratorRow[]): HTMLElement {
  const rows = iterators.map((it) => {
    const owner = ownerOf(it);
    return h(
      "tr",
      { class: `owner-${owner}`, attrs: { "data-testid": "profile-iterator", "data-owner": owner } },
      nameCell(iteratorText(it), { class: "stage", title: it.name }),
      h("td", { class: "num", text: String(it.count ?? "") }),
      h("td", { class: "num", text: formatMs(it.ms) }),
      h("td", { class: "num", text: formatMs(it.self_ms) }),
    );
  });
  return table("Input pipeline (per stage, as the profiler timed it)", [["Stage", false], ["Count", true], ["Total", true], ["Self", true]], rows, "profile-iterators");
}

/** The ops by self time; a pipeline iterator is named by its stage, a Python call inside the
 *  pipeline by the user's function that makes it. */
function opTable(ops: OpRow[]): HTMLElement {
  const rows = ops.map((op) => {
    const place = opPlace(op);
    const name = op.type === "Dataset" ? iteratorText({ ...op, ms: null, category: null }) : op.name;
    return h(
      "tr",
      { class: `owner-${ownerOf(op)}`, attrs: { "data-testid": "profile-op" } },
      h("td", { text: op.where }),
      h("td", { text: op.type }),
      nameCell(name, { title: op.name }),
      op.type === "Dataset" ? h("td", { class: "muted" }) : nameCell(place, { class: "place" }),
      h("td", { class: "num", text: String(op.count ?? "") }),
      h("td", { class: "num", text: formatMs(op.self_ms) }),
    );
  });
  return table(
    "Top ops (self time)",
    [["Where", false], ["Type", false], ["Op", false], ["In", false], ["Count", true], ["Self", true]],
    rows,
    "profile-ops",
  );
}
