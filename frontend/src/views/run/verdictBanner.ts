// The run page's verdict banner: the diagnosis (from `GET /runs/{id}/diagnosis`
// and live `verdict` messages, the newer one winning) with its evidence and
// advice; before one is known, what the run summary alone says.

import { h, replaceChildren, setAttrs } from "../../app/dom";
import { formatCount, formatInputWait } from "../../app/format";
import type { Diagnosis, GpuFinding, Run } from "../../api/types";
import {
  deviceWord,
  evidenceText,
  inputWaitLabel,
  inputWaitLevel,
  parseDiagnosis,
  parseGpuFindings,
  summaryWindow,
  VerdictGeneration,
  verdictHeadline,
  verdictTone,
  verdictWords,
} from "../../state/verdict";
import type { AppContext } from "../common";
import { cannotLoad } from "../loading";
import { ProveIt } from "./proveIt";

export class VerdictBanner {
  readonly el: HTMLElement;
  private diagnosis: Diagnosis | null = null;
  /** The busy-but-under-used findings of the last REST read (live verdicts carry none). */
  private findings: GpuFinding[] = [];
  private state: "loading" | "ok" | "error" = "loading";
  private lastLive = 0;
  /** Bumped by every live verdict: a REST answer to an older request is dropped. */
  private readonly gen = new VerdictGeneration();
  private readonly ctx: AppContext;
  private readonly runId: number;
  private readonly signal: AbortSignal;
  private readonly run: () => Run | null;
  /** "Prove it": the `stoker tune` command that measures the advice (kept open across renders). */
  private readonly proveIt = new ProveIt();

  constructor(ctx: AppContext, runId: number, signal: AbortSignal, run: () => Run | null) {
    this.ctx = ctx;
    this.runId = runId;
    this.signal = signal;
    this.run = run;
    this.el = h("section", {
      class: "verdict-banner tone-info",
      attrs: { "data-testid": "verdict-banner", "data-verdict": "loading", "aria-live": "polite", "aria-label": "Diagnosis" },
    });
  }

  get known(): boolean {
    return this.diagnosis !== null;
  }

  /** Milliseconds since the last live verdict (Infinity before one). */
  sinceLive(): number {
    return Date.now() - this.lastLive;
  }

  applyLive(diagnosis: Diagnosis): void {
    this.lastLive = Date.now();
    this.gen.live();
    this.diagnosis = diagnosis;
    this.state = "ok";
    this.render();
  }

  async load(): Promise<void> {
    const token = this.gen.begin();
    try {
      const raw = await this.ctx.api.getDiagnosis(this.runId, this.signal);
      if (this.signal.aborted) return;
      this.findings = parseGpuFindings(raw);
      // A live verdict applied while this request was in flight is newer: keep it.
      if (!this.gen.accepts(token)) {
        this.render();
        return;
      }
      const d = parseDiagnosis(raw);
      this.diagnosis = d;
      this.state = d ? "ok" : "error";
      if (d) this.ctx.runs.setVerdict(this.runId, { verdict: d.verdict, label: d.verdict_label ?? "" });
    } catch {
      if (this.signal.aborted) return;
      // A failed request must not replace a live verdict that arrived meanwhile.
      if (!this.gen.accepts(token) && this.diagnosis) return;
      this.state = "error";
    }
    this.render();
  }

  render(): void {
    const d = this.diagnosis;
    if (d) renderDiagnosis(this.el, d, this.run());
    else renderWithoutDiagnosis(this.el, this.state, this.run());
    if (this.findings.length > 0) this.el.append(renderGpuFindings(this.findings));
    if (d && d.advice.length > 0) {
      this.proveIt.update(this.run());
      this.el.append(this.proveIt.el);
    }
  }
}

/** "Busy but under-used" findings: each with its evidence and what to try. */
function renderGpuFindings(findings: GpuFinding[]): HTMLElement {
  return h(
    "div",
    { class: "gpu-findings", attrs: { "data-testid": "gpu-findings" } },
    ...findings.map((f) =>
      h(
        "div",
        { class: "gpu-finding", attrs: { "data-finding": f.key } },
        h("h3", { text: f.title }),
        h("ul", { class: "finding-evidence" }, ...f.evidence.map((e) => h("li", { text: evidenceText(e) }))),
        h("ul", { class: "finding-advice" }, ...f.advice.map((a) => h("li", { text: `Try: ${a}` }))),
      ),
    ),
  );
}

function renderDiagnosis(b: HTMLElement, d: Diagnosis, run: Run | null): void {
  const tone = verdictTone(d.verdict);
  b.className = `verdict-banner tone-${tone}`;
  // What the figure covers, as the server says: "last 30 s" live, "whole run" once ended.
  const label = d.window_label ?? (d.window_s !== undefined ? `last ${Math.round(d.window_s)} s` : null);
  setAttrs(b, { "data-verdict": d.verdict, "data-source": d.source, "data-window": label });
  const steps = d.steps_in_window !== undefined ? ` (${formatCount(d.steps_in_window)} steps)` : "";
  replaceChildren(
    b,
    h(
      "div",
      { class: "verdict-head" },
      h("span", { class: `badge verdict tone-${tone}`, text: verdictWords(d.verdict_label), attrs: { "data-testid": "verdict-words" } }),
      h("h2", { class: "verdict-title", text: verdictHeadline(d.verdict, d.verdict_label, deviceWord(run)), attrs: { "data-testid": "verdict-title" } }),
    ),
    h(
      "p",
      { class: "verdict-meta" },
      d.input_wait_share !== null
        ? h(
            "span",
            null,
            "Input wait: ",
            h("span", { class: "wait-figure", text: formatInputWait(d.input_wait_share), attrs: { "data-testid": "verdict-wait" } }),
            " of step time",
          )
        : null,
      label ? ` over the ${label}${steps}` : "",
      d.source === "fallback"
        ? h("span", {
            class: "fallback-note",
            text: " · inferred from GPU utilization and host CPU (input wait not measured: wrap the dataset with cb.wrap(...))",
            attrs: { "data-testid": "verdict-fallback" },
          })
        : null,
    ),
    d.evidence.length > 0
      ? h(
          "div",
          { class: "verdict-col" },
          h("h3", { text: "Evidence" }),
          h("ul", { attrs: { "data-testid": "verdict-evidence" } }, ...d.evidence.map((e) => h("li", { text: evidenceText(e) }))),
        )
      : null,
    d.advice.length > 0
      ? h(
          "div",
          { class: "verdict-col" },
          h("h3", { text: "What to try" }),
          h("ul", { attrs: { "data-testid": "verdict-advice" } }, ...d.advice.map((a) => h("li", { text: a }))),
        )
      : null,
  );
}

/** No diagnosis: say why, and what the summary alone says. */
function renderWithoutDiagnosis(b: HTMLElement, state: "loading" | "ok" | "error", run: Run | null): void {
  const s = run?.summary;
  const level = inputWaitLevel(s?.verdict);
  b.className = `verdict-banner tone-info`;
  setAttrs(b, { "data-verdict": state === "loading" ? "loading" : "unavailable", "data-source": "summary" });
  const why = state === "loading" ? "Diagnosing…" : cannotLoad("the diagnosis", null, false);
  replaceChildren(
    b,
    h("div", { class: "verdict-head" }, h("h2", { class: "verdict-title", text: why, attrs: { "data-testid": "verdict-title" } })),
    level !== "unknown"
      ? h("p", {
          class: "verdict-meta",
          text: `From the run summary: input wait ${formatInputWait(s?.input_wait_share)} of step time over the ${run ? summaryWindow(run) : "whole run"} — ${inputWaitLabel(s)}.`,
        })
      : null,
  );
}
