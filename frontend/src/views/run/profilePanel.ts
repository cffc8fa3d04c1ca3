// The run page's profiler panel (issue 19): "Profile N steps" asks the run's agent for a
// TensorFlow profiler capture, follows it (requested → capturing → uploading → ready or
// failed) and shows xprof's analysis beside Stoker's own input wait. All text goes in
// through text nodes (dom.h): names of ops and iterators come from the trace.

import type { ApiClient } from "../../api";
import { h, replaceChildren } from "../../dom";
import { formatMs, formatPercent } from "../../format";
import { errorMessage } from "../common";

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
  iterators?: { name: string; count: number | null; ms: number | null; self_ms: number | null; category: string | null }[];
  top_ops?: { where: string; type: string; name: string; count: number | null; self_ms: number }[];
}

/** `GET /runs/{id}/profiles/{pid}` (backend/api/profiles.py). */
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
}

const POLL_MS = 1000;
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
  private live = false;
  private timer: ReturnType<typeof setTimeout> | null = null;
  private downloadUrl: string | null = null;

  constructor(api: ApiClient, runId: number, signal: AbortSignal) {
    this.api = api;
    this.runId = runId;
    this.signal = signal;
    this.stepsInput.addEventListener("input", () => this.renderButton());
    this.button.addEventListener("click", () => void this.request());
    signal.addEventListener("abort", () => {
      if (this.timer !== null) clearTimeout(this.timer);
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
  }

  async load(): Promise<void> {
    try {
      const page = await this.api.getJson<{ data: Profile[] }>(`/runs/${this.runId}/profiles`, this.signal);
      if (this.signal.aborted) return;
      this.show(page.data[0] ?? null);
    } catch {
      /* an older server without profiles: the panel stays empty */
    }
  }

  /** A live `profile` message (the server broadcasts every status change). */
  applyLive(raw: Record<string, unknown>): void {
    if (typeof raw.id !== "number" || typeof raw.status !== "string" || typeof raw.analysis !== "object") return;
    if (this.profile !== null && raw.id < this.profile.id) return;
    const live = raw as unknown as Profile;
    // Stoker's share may be filled in on read only (GET): keep the one already held.
    const share = this.profile?.id === live.id ? this.profile.input_share_stoker : null;
    this.show({ ...live, input_share_stoker: live.input_share_stoker ?? share });
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
    const waitingForShare = profile?.status === "ready" && profile.input_share_stoker === null && profile.analysis.available;
    if (profile && (inProgress(profile) || waitingForShare)) {
      this.timer = setTimeout(() => void this.poll(profile.id), POLL_MS);
    }
  }

  private async poll(pid: number): Promise<void> {
    try {
      const fresh = await this.api.getJson<Profile>(`/runs/${this.runId}/profiles/${pid}`, this.signal);
      if (!this.signal.aborted) this.show(fresh);
    } catch (err) {
      if (this.signal.aborted) return;
      this.error = errorMessage(err);
      this.show(this.profile);
    }
  }

  private renderButton(): void {
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
      this.error ? h("p", { class: "error", text: this.error, attrs: { role: "alert", "data-testid": "profile-error" } }) : null,
      p === null ? h("p", { class: "muted", text: "Capture the TensorFlow profiler over the next steps of a live run, without touching the training script." }) : this.result(p),
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
    if (p.status !== "ready") return box;
    const a = p.analysis;
    if (!a.available) box.append(h("p", { class: "muted", text: a.message ?? "No analysis on this server." }));
    if (a.conclusion) box.append(h("p", { text: a.conclusion, attrs: { "data-testid": "profile-conclusion" } }));
    box.append(this.shares(p), this.overhead(p));
    if (a.breakdown_ms) box.append(this.breakdown(a.breakdown_ms));
    if (a.iterators?.length) {
      box.append(
        table("Input pipeline (per iterator)", ["Iterator", "Count", "Total", "Self"], a.iterators.map((it) => [it.name, String(it.count ?? ""), formatMs(it.ms), formatMs(it.self_ms)]), "profile-iterators"),
      );
    }
    if (a.top_ops?.length) {
      box.append(table("Top ops (self time)", ["Where", "Type", "Op", "Count", "Self"], a.top_ops.map((op) => [op.where, op.type, op.name, String(op.count ?? ""), formatMs(op.self_ms)]), "profile-ops"));
    }
    box.append(this.download(p));
    return box;
  }

  private shares(p: Profile): HTMLElement {
    const { input_share_profiler: prof, input_share_stoker: own } = p;
    const diff = prof !== null && own !== null ? `${((prof - own) * 100).toFixed(1)} points` : "–";
    return h(
      "dl",
      { class: "figures", attrs: { "data-testid": "profile-shares" } },
      h("dt", { text: "Input share (profiler)" }),
      h("dd", { text: formatPercent(prof) }),
      h("dt", { text: "Input wait (Stoker, same steps)" }),
      h("dd", { text: own === null ? "waiting for the steps…" : formatPercent(own) }),
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
    const rows = BREAKDOWN_LABELS.filter(([key]) => (ms[key] ?? 0) > 0 || key === "step_ms" || key === "input_ms").map(([key, label]) => [label, formatMs(ms[key])]);
    return table("Step-time breakdown (mean per step)", ["Part", "Time"], rows, "profile-breakdown");
  }

  private download(p: Profile): HTMLElement {
    if (p.trace_evicted) return h("p", { class: "muted", text: "The trace was evicted (the server's quota for stored traces)." });
    const link = h("a", { text: "Download the trace (.xplane.pb, opens in XProf or TensorBoard)", attrs: { href: "#", "data-testid": "profile-download" } });
    link.addEventListener("click", (ev) => {
      ev.preventDefault();
      void this.api.getBlob(`/runs/${this.runId}/profiles/${p.id}/trace`, this.signal).then((blob) => {
        if (this.downloadUrl) URL.revokeObjectURL(this.downloadUrl);
        this.downloadUrl = URL.createObjectURL(blob);
        const a = h("a", { attrs: { href: this.downloadUrl, download: `run${this.runId}-profile${p.id}.xplane.pb` } });
        a.click();
      });
    });
    return h("p", null, link);
  }
}

function table(caption: string, head: string[], rows: string[][], testId: string): HTMLElement {
  return h(
    "table",
    { class: "table", attrs: { "data-testid": testId } },
    h("caption", { text: caption }),
    h("thead", null, h("tr", null, ...head.map((c) => h("th", { text: c })))),
    h("tbody", null, ...rows.map((r) => h("tr", null, ...r.map((c) => h("td", { text: c }))))),
  );
}
