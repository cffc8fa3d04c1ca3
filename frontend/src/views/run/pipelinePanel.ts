// The run page's input pipeline view: the stages of the run's tf.data
// pipeline from the source to the model, from tf.data's own autotuning model, with
// each stage's capacity (steps/s it could feed, against what the steps would take
// when fed) and buffer fill; the stage that starves the steps is highlighted with
// its fix. Re-read every few seconds while the run is live.
// Every user-controlled text (function names, reasons) goes through textContent.

import type { ApiClient } from "../../api/client";
import { h, replaceChildren, setText } from "../../app/dom";
import { formatPercent } from "../../app/format";
import { errorMessage } from "../common";
import { cannotLoad, LivePoll } from "../loading";
import {
  bufferFill,
  capacityBarPct,
  capacityRatio,
  capacityText,
  formatRate,
  laterIdle,
  NOT_KNOWN,
  NOT_TIMED,
  pipelineLegend,
  type PipelineAnswer,
  type PipelineStage,
  parsePipeline,
  stageLabel,
  writtenAt,
} from "./pipeline";

export const PIPELINE_POLL_MS = 4000;

export class PipelinePanel {
  readonly el: HTMLElement;
  private readonly body: HTMLElement;
  private readonly info: HTMLElement;
  private readonly error: HTMLElement;
  private readonly poll = new LivePoll(() => void this.load(), PIPELINE_POLL_MS);
  private loading = false;
  /** Why the last read failed, or null. */
  private failure: string | null = null;

  constructor(
    private readonly api: ApiClient,
    private readonly runId: number,
    private readonly signal: AbortSignal,
  ) {
    this.info = h("span", { class: "chart-info muted" });
    this.body = h("div", { class: "pipeline-body" });
    this.error = h("p", { class: "error", attrs: { role: "status", hidden: true, "data-testid": "pipeline-error" } });
    this.el = h(
      "section",
      { class: "panel pipeline-panel", attrs: { "aria-labelledby": `pipeline-${runId}`, "data-testid": "pipeline-view" } },
      h("div", { class: "panel-head" }, h("h2", { text: "Input pipeline", attrs: { id: `pipeline-${runId}` } }), this.info),
      this.error,
      this.body,
    );
    this.el.hidden = true; // until there is an answer (or an error) worth showing
  }

  /** Poll while the run is live; one last read when it ends. */
  setLive(live: boolean): void {
    this.poll.setLive(live);
    this.showFailure();
  }

  destroy(): void {
    this.poll.stop();
  }

  async load(): Promise<void> {
    if (this.loading || this.signal.aborted) return;
    this.loading = true;
    try {
      const raw = await this.api.getJson<unknown>(`/runs/${this.runId}/pipeline`, this.signal);
      if (this.signal.aborted) return;
      this.failure = null;
      this.showFailure();
      const answer = parsePipeline(raw);
      if (answer) this.render(answer);
    } catch (err) {
      if (this.signal.aborted) return; // left the page
      this.failure = errorMessage(err);
      this.showFailure();
    } finally {
      this.loading = false;
    }
  }

  /** The last read's failure (the figures of the answer before it stay); while live the next poll reads again. */
  private showFailure(): void {
    this.error.hidden = this.failure === null;
    if (this.failure === null) return;
    setText(this.error, cannotLoad("the input pipeline", this.failure, this.poll.polling));
    this.el.hidden = false;
  }

  render(answer: PipelineAnswer): void {
    this.el.hidden = false;
    this.el.dataset.source = answer.source;
    if (answer.source === "unavailable" || answer.stages.length === 0) {
      this.info.textContent = "";
      replaceChildren(
        this.body,
        h("p", {
          class: "muted",
          attrs: { "data-testid": "pipeline-unavailable" },
          text:
            answer.t === null
              ? "No pipeline figures yet: they come from tf.data's autotuning model of a tf.data input (TF 2.13 or later), read every few seconds."
              : "tf.data's autotune model is unavailable for this run (autotuning off, an older TensorFlow, or an input that is not tf.data). Everything else works as before.",
        }),
      );
      return;
    }
    const demand = answer.demand_steps_per_s ?? null;
    this.info.textContent =
      demand !== null ? `the steps would take ${formatRate(demand)} when fed` : "stages from tf.data's autotuning model";
    const rows = answer.stages.map((stage, i) =>
      this.stageRow(
        stage,
        answer.capacity_steps_per_s?.[i] ?? null,
        demand,
        answer.bottleneck?.position === stage.position,
        laterIdle(answer.stages, stage.position),
      ),
    );
    const list = h(
      "ol",
      { class: "pipeline-stages", attrs: { "aria-label": "Pipeline stages, from the source to the model" } },
      ...rows,
      h("li", { class: "pipeline-model muted", text: "→ model (one element a step)" }),
    );
    const waiting = answer.stages.some((s) => s.elements === 0);
    const legend = h("p", { class: "pipeline-legend muted", text: pipelineLegend(demand, waiting), attrs: { "data-testid": "pipeline-legend" } });
    const children: Node[] = [list, legend];
    const b = answer.bottleneck;
    if (b) {
      children.unshift(
        h(
          "div",
          { class: "pipeline-bottleneck", attrs: { "data-testid": "pipeline-bottleneck", role: "note" } },
          h("strong", { text: `Bottleneck: stage ${b.position} (${stageLabel(b)})` }),
          h("p", { text: b.reason }),
          h("p", { class: "pipeline-fix", text: `Try: ${b.fix}` }),
        ),
      );
    }
    replaceChildren(this.body, ...children);
  }

  private stageRow(stage: PipelineStage, capacity: number | null, demand: number | null, isBottleneck: boolean, idleAfter: boolean): HTMLElement {
    const ratio = capacityRatio(capacity, demand);
    const fill = bufferFill(stage);
    const barFill = h("span", { class: "bar-fill" });
    barFill.style.width = `${capacityBarPct(ratio)}%`;
    const short = ratio !== null && ratio < 1;
    const timed = capacity != null && Number.isFinite(capacity);
    const details = [
      `${stage.name}`,
      stage.parallelism ? `${stage.parallelism} thread${stage.parallelism === 1 ? "" : "s"}` : "",
      stage.ms_per_element !== null ? `${stage.ms_per_element.toPrecision(3)} ms/element` : "",
      `${stage.elements} elements`,
      writtenAt(stage),
    ].filter(Boolean);
    return h(
      "li",
      {
        class: `pipeline-stage${isBottleneck ? " bottleneck" : ""}${short ? " short" : ""}`,
        attrs: { "data-position": stage.position, "data-bottleneck": isBottleneck ? "true" : "false", "data-testid": "pipeline-stage" },
      },
      h("span", { class: "stage-pos muted", text: String(stage.position) }),
      h("span", { class: "stage-label", text: stageLabel(stage) }),
      h("span", { class: "stage-details muted", text: details.join(" · ") }),
      h(
        "span",
        {
          class: "stage-capacity",
          attrs: {
            title: timed
              ? "Steps per second this stage could feed (bar: against the demand, log scale; the mark is the demand)"
              : stage.elements === 0 || stage.ms_per_element === null
                ? NOT_TIMED
                : idleAfter
                  ? NOT_KNOWN
                  : null,
          },
        },
        // A bar only where there is a figure and a demand to compare it with (the legend says why not).
        timed && demand !== null ? h("span", { class: "bar" }, barFill, h("span", { class: "bar-mark" })) : null,
        h("span", { class: `bar-text${timed ? "" : " muted"}`, text: capacityText(stage, capacity, idleAfter) }),
      ),
      h(
        "span",
        { class: "stage-buffer", attrs: { title: "Buffer fill when the model was read" } },
        fill === null
          ? h("span", { class: "muted", text: "no buffer" })
          : h("span", { text: `buffer ${stage.buffered}/${stage.buffer_size} (${formatPercent(fill)})` }),
      ),
    );
  }
}
