// The run's tf.data pipeline (`GET /runs/{id}/pipeline`): parsing the
// answer and the figures the pipeline view shows. Pure: tested by pipeline.test.ts.

/** A user's function a stage runs, where it is written. */
export interface StageFunction {
  name: string;
  file?: string | null;
  line?: number | null;
  calls_python?: boolean;
}

export interface PipelineStage {
  position: number;
  kind: string;
  name: string;
  /** The user's functions, "a+b" when tf.data fused several into this stage. */
  function: string | null;
  functions?: StageFunction[];
  /** The iterator's name in profiler traces. */
  path?: string;
  parallelism: number | null;
  ms_per_element: number | null;
  elements: number;
  buffered: number;
  buffer_size: number | null;
  bytes_per_element: number | null;
}

export interface PipelineBottleneck {
  position: number;
  kind: string;
  name: string;
  function: string | null;
  reason: string;
  fix: string;
}

export interface PipelineAnswer {
  run_id: number;
  t: number | null;
  source: "autotune_model" | "unavailable";
  stages: PipelineStage[];
  bottleneck: PipelineBottleneck | null;
  read_us?: number | null;
  capacity_steps_per_s?: (number | null)[];
  demand_steps_per_s?: number | null;
}

/** The answer, or null when it does not look like one. */
export function parsePipeline(raw: unknown): PipelineAnswer | null {
  if (!raw || typeof raw !== "object") return null;
  const answer = raw as Partial<PipelineAnswer>;
  if (!Array.isArray(answer.stages) || (answer.source !== "autotune_model" && answer.source !== "unavailable")) return null;
  return answer as PipelineAnswer;
}

/** Who added a stage the user did not write: the agent marks its name "stoker:" (the
 *  prefetch Stoker's wrap appends) or "tf.data:" (the prefetch tf.data injects). */
export function addedBy(stage: { name?: string | null }): "Stoker" | "tf.data" | null {
  const name = stage.name ?? "";
  if (name.startsWith("stoker:")) return "Stoker";
  if (name.startsWith("tf.data:")) return "tf.data";
  return null;
}

/** "map 'decode'", "prefetch", or "prefetch (added by Stoker)": what users call the stage. */
export function stageLabel(stage: { kind: string; function: string | null; name?: string | null }): string {
  const kind = stage.kind.replace(/_/g, " ");
  const label = stage.function ? `${kind} '${stage.function}'` : kind;
  const by = addedBy(stage);
  return by ? `${label} (added by ${by}, not in your pipeline)` : label;
}

/** "slow_decode at train.py:42 (calls Python)": where the stage's functions are written. */
export function writtenAt(stage: { functions?: StageFunction[] }): string {
  return (stage.functions ?? [])
    .filter((f) => f.file && f.line)
    .map((f) => `${f.name} at ${(f.file ?? "").split(/[\\/]/).pop()}:${f.line}${f.calls_python ? " (calls Python)" : ""}`)
    .join(", ");
}

/** Buffer fill 0..1, or null for a stage without a buffer. */
export function bufferFill(stage: PipelineStage): number | null {
  if (!stage.buffer_size || stage.buffer_size <= 0) return null;
  return Math.min(1, Math.max(0, stage.buffered / stage.buffer_size));
}

/** A stage's capacity against the demand: 1 = just keeps up; null when unknown. */
export function capacityRatio(capacity: number | null | undefined, demand: number | null | undefined): number | null {
  if (capacity == null || demand == null || !(demand > 0)) return null;
  return capacity / demand;
}

/** "12.5 steps/s", "1.2k steps/s", "—". */
export function formatRate(perSecond: number | null | undefined): string {
  if (perSecond == null || !Number.isFinite(perSecond)) return "—";
  if (perSecond >= 1000) return `${(perSecond / 1000).toFixed(perSecond >= 10000 ? 0 : 1)}k steps/s`;
  return `${perSecond >= 100 ? perSecond.toFixed(0) : perSecond.toPrecision(3)} steps/s`;
}

/** Width of a capacity bar, 0..100 %: log scale from 1/10 of the demand (0) to 100x (100). */
export function capacityBarPct(ratio: number | null): number {
  if (ratio === null || ratio <= 0) return 0;
  const pct = ((Math.log10(ratio) + 1) / 3) * 100;
  return Math.max(2, Math.min(100, pct));
}

/** A stage's capacity as the view writes it: its rate, or why it has none. `laterIdle`: a
 * stage after it had produced no element yet, so how many of its elements make a step (and
 * so its rate in steps) is not known. */
export function capacityText(
  stage: Pick<PipelineStage, "elements" | "ms_per_element">,
  capacity: number | null,
  laterIdle = false,
): string {
  if (capacity != null && Number.isFinite(capacity)) return formatRate(capacity);
  if (stage.elements === 0 || stage.ms_per_element === null) return "not timed yet";
  return laterIdle ? "not known yet" : "—";
}

export const NOT_TIMED =
  "tf.data had no time per element for this stage when its model was read: the stage had produced no element yet (a shuffle filling its buffer, a cache being filled, the stages after them)";
export const NOT_KNOWN =
  "How many of this stage's elements make a step is known once the stages after it have produced an element; when the model was read they had not";

/** Whether a stage after `position` had produced no element when the model was read. */
export function laterIdle(stages: Pick<PipelineStage, "position" | "elements">[], position: number): boolean {
  return stages.some((s) => s.position > position && s.elements === 0);
}

/** The line under the stages: what the bars compare, or why there are none. `waiting`: some
 * stages had produced nothing yet when the model was read. */
export function pipelineLegend(demandStepsPerS: number | null, waiting = false): string {
  const later = waiting
    ? " Stages still filling (a shuffle buffer, a cache) and those after them get their figures from a later read, every few seconds while the run lives."
    : "";
  if (demandStepsPerS === null) {
    return `No bars for this read: it came before enough steps to set their pace, which is what the bars compare each stage with.${later}`;
  }
  return `Bars: the steps per second each stage could feed (log scale), against the ${formatRate(demandStepsPerS)} the steps would take when fed (the mark); a stage short of the mark starves the steps. Buffer: the elements ready when the model was read.${later}`;
}
