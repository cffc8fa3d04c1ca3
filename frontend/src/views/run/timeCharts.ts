// The run page's "By wall-clock time" group: GPU utilization (starved
// stretches shaded), GPU memory, temperature/power/clocks (throttling shaded)
// and host CPU/RAM. The charts share one cursor and zoom together. Device and
// host samples are one SeriesResource: polled while the run is live, refined
// on zoom.

import type { ApiClient } from "../../api/client";
import { telemetryChart, telemetrySpec, type TelemetryKind } from "../../charts/chartSpecs";
import { h, setAttrs, setText } from "../../app/dom";
import { ChartGroup, LiveChart, type ZoomRange } from "../../charts/liveChart";
import { shouldRefine, spliceSamples, visibleCount } from "../../state/refine";
import { thinnedSamplesNote } from "../../state/retention";
import { lastSampleTime, mergeSamples, throttleRanges, type ShadeRange } from "../../state/samples";
import { SeriesResource } from "../../state/seriesResource";
import type { Run, SamplesData } from "../../api/types";
import { cannotLoad } from "../loading";
import { chartPanel, Debounce, followButtonState, type ChartBox } from "./panels";

const KINDS: TelemetryKind[] = ["gpu", "memory", "thermal", "host"];
const GPU_KINDS: TelemetryKind[] = ["gpu", "memory", "thermal"];
const EMPTY: SamplesData = { device: [], host: [] };

export class TimeCharts {
  readonly el: HTMLElement;
  readonly samples: SeriesResource<SamplesData>;
  private readonly boxes: Record<TelemetryKind, ChartBox>;
  private readonly charts = new Map<TelemetryKind, LiveChart<SamplesData>>();
  private readonly note: HTMLElement;
  /** Once the samples are read and hold no GPU: one line instead of three empty GPU charts. */
  private readonly noGpuNote: HTMLElement;
  private readonly followButton: HTMLButtonElement;
  private readonly group = new ChartGroup();
  private readonly refine = new Debounce(200, () => void this.samples.refine());
  private run: Run | null = null;
  private following = true;
  private throttles: ShadeRange[] = [];
  private starvedTime: ShadeRange[] = [];
  private zoom: ZoomRange | null = null;
  /** Retention thinned a compacted run's samples: said once zoomed past them. */
  private readonly retentionNoteEl: HTMLElement;

  constructor(api: ApiClient, runId: number, signal: AbortSignal) {
    this.samples = new SeriesResource<SamplesData>(
      {
        fetchOverview: (maxPoints, sig) => api.getSamples(runId, { maxPoints }, sig),
        fetchNewer: (held, sig) => {
          const since = lastSampleTime(held);
          return since === null ? null : api.getSamples(runId, { sinceT: since, maxPoints: 5000 }, sig);
        },
        merge: (held, newer) => mergeSamples(held, newer).data,
        wantsDetail: (held, r, width) => {
          const first = held.device[0] ?? held.host[0];
          return first !== undefined && shouldRefine(first.t, first.downsampled, r.min, r.max, width);
        },
        fetchDetail: (r, width, sig) => api.getSamples(runId, { sinceT: r.min - 1e-6, untilT: r.max, maxPoints: Math.max(200, width) }, sig),
        splice: (base, detail, r) => spliceSamples(base, detail, r.min, r.max),
      },
      { widthPx: () => this.charts.get("gpu")?.widthPx ?? 600, signal, onChange: () => this.render() },
    );
    this.followButton = h("button", {
      class: "follow on",
      text: "Live",
      attrs: { type: "button", "aria-pressed": "true", "data-testid": "time-follow-button" },
      on: { click: () => this.charts.get("gpu")?.resumeFollow() ?? this.charts.values().next().value?.resumeFollow() },
    });
    this.boxes = {
      gpu: chartPanel("GPU utilization", "gpu-util-heading", "gpu-util-chart", "GPU utilization over time, per GPU"),
      memory: chartPanel("GPU memory", "memory-heading", "memory-chart", "GPU memory over time: NVML used, TensorFlow allocator current and peak, total"),
      thermal: chartPanel("Temperature, power, clocks", "thermal-heading", "thermal-chart", "GPU temperature, power and SM clock over time; throttling shaded"),
      host: chartPanel("Host CPU and memory", "host-heading", "host-chart", "Host and process CPU and memory over time"),
    };
    this.note = h("p", { class: "muted empty-note", attrs: { "data-testid": "samples-note", hidden: true } });
    this.noGpuNote = h(
      "p",
      { class: "panel no-gpu", attrs: { "data-testid": "gpu-empty", hidden: true } },
      h("strong", { text: "No GPU samples." }),
      " The agent read no GPU (no GPU here, or NVML unavailable to it), so there are no GPU utilization, memory or temperature charts; step time, input wait and the diagnosis are measured all the same.",
    );
    this.retentionNoteEl = h("span", { class: "retention-note", attrs: { role: "status", hidden: true, "data-testid": "samples-retention-note" } });
    this.el = h(
      "div",
      { class: "chart-group", attrs: { "aria-label": "Charts by wall-clock time", role: "region" } },
      h("div", { class: "group-head" }, h("h2", { class: "group-title", text: "By wall-clock time" }), this.retentionNoteEl, h("div", { class: "spacer" }), this.followButton),
      this.note,
      this.noGpuNote,
      h("div", { class: "chart-grid" }, ...KINDS.map((k) => this.boxes[k].section)),
    );
  }

  /** Called once the page is in the document (the charts need their width). */
  mount(syncKey: string): void {
    for (const kind of KINDS) {
      this.charts.set(
        kind,
        new LiveChart(this.boxes[kind].box, telemetrySpec(kind), {
          height: 220,
          emptyText: "Waiting for samples…",
          syncKey,
          group: this.group,
          onZoom: (range) => this.onZoom(range),
          onFollowChange: (f) => this.showFollow(f),
          ...(kind === "thermal" ? { shade: () => this.throttles } : {}),
          ...(kind === "gpu" ? { shade: () => this.starvedTime } : {}),
        }),
      );
    }
  }

  /** Starved stretches in wall-clock time, shaded on the GPU utilization chart. */
  setStarved(ranges: ShadeRange[]): void {
    this.starvedTime = ranges;
    this.charts.get("gpu")?.redraw();
  }

  update(run: Run): void {
    this.run = run;
    this.showFollow(this.following);
  }

  destroy(): void {
    this.refine.cancel();
    for (const c of this.charts.values()) c.destroy();
  }

  private onZoom(range: ZoomRange | null): void {
    this.zoom = range;
    this.showRetentionNote();
    this.samples.setZoom(range);
    this.refine.schedule();
  }

  private render(): void {
    const state = this.samples.state;
    if (state === "error") {
      this.note.hidden = false;
      setText(this.note, cannotLoad("device and host samples", null, true));
      setAttrs(this.note, { "data-state": state });
    } else {
      this.note.hidden = true;
    }
    const data = this.samples.data ?? EMPTY;
    const noGpu = state === "ok" && data.device.length === 0;
    this.noGpuNote.hidden = !noGpu;
    for (const kind of GPU_KINDS) this.boxes[kind].section.hidden = noGpu;
    this.throttles = throttleRanges(data.device);
    for (const [kind, chart] of this.charts) {
      const box = this.boxes[kind];
      const c = telemetryChart(kind, data);
      setAttrs(box.box, { "data-state": state, "data-series": c.series.length });
      if (c.series.length === 0)
        chart.setEmptyText(
          kind === "host"
            ? "No host samples."
            : data.device.length === 0
              ? "No GPU samples (no GPU, or NVML unavailable to the agent)."
              : "The GPU did not report these readings.",
        );
      if (c.series.length > 0) chart.setData(data);
    }
    this.showRetentionNote();
    setText(this.boxes.gpu.info, data.device.length > 0 ? `${data.device.length} GPU${data.device.length > 1 ? "s" : ""}` : "");
    setText(this.boxes.thermal.info, this.throttles.length > 0 ? `throttled ${this.throttles.length}×` : "");
    this.boxes.thermal.box.setAttribute("data-throttle-ranges", String(this.throttles.length));
  }

  private showRetentionNote(): void {
    const data = this.samples.data ?? EMPTY;
    const track = data.device[0] ?? data.host[0];
    const z = this.zoom;
    const visible = track && z ? visibleCount(track.t, z.min, z.max) : 0;
    const note = thinnedSamplesNote(Boolean(this.run?.compacted_at), z, visible, this.charts.get("gpu")?.widthPx ?? 600);
    this.retentionNoteEl.hidden = note === null;
    setText(this.retentionNoteEl, note ?? "");
  }

  private showFollow(follow: boolean): void {
    this.following = follow;
    followButtonState(this.followButton, follow, this.run?.status === "running", "samples");
  }
}
