// The profile panel's rows in the pipeline's words: the server ties each of xprof's
// iterator rows to the stage the pipeline view shows, marks the iterators Stoker's `wrap`
// adds (its input-wait stamp), and ties a Python call made inside the input pipeline to
// the user's function that makes it (backend/stoker_server/ingest/profile_labels.py).
// Pure: tested by profileRows.test.ts.

import { stageLabel } from "./pipeline";

export type Owner = "user" | "stoker" | "tf.data";

/** The stage a row belongs to, as the server labelled it. */
export interface RowStage {
  position: number | null;
  kind: string | null;
  name: string | null;
  function: string | null;
  owner: Owner;
}

export interface IteratorRow {
  name: string;
  count: number | null;
  ms: number | null;
  self_ms: number | null;
  category: string | null;
  stage?: RowStage | null;
}

export interface OpRow {
  where: string;
  type: string;
  name: string;
  count: number | null;
  self_ms: number;
  stage?: RowStage | null;
  /** The user's function that makes this Python call (null: none, or several could). */
  function?: string | null;
  /** Several of the pipeline's functions call Python: which they are. */
  functions?: string[];
}

export const STOKER_STAMP = "Stoker's input-wait stamp";
const NOT_YOURS = "added by wrap, not in your pipeline";

/** "stage 4: map and batch 'slow_decode'": the pipeline view's words, with its position. */
export function stageText(stage: RowStage): string {
  if (stage.kind === null || stage.position === null) return stage.owner === "stoker" ? `${STOKER_STAMP} (${NOT_YOURS})` : "";
  return `stage ${stage.position}: ${stageLabel({ kind: stage.kind, function: stage.function, name: stage.name })}`;
}

/** The last part of an iterator's path ("MapAndBatch"), for a row no stage explains. */
export function lastPart(path: string): string {
  const parts = path.split("::");
  return parts[parts.length - 1] ?? path;
}

/** What an iterator row is called: its stage, a part of Stoker's stamp, or its last name. */
export function iteratorText(row: IteratorRow): string {
  const stage = row.stage ?? null;
  if (stage !== null && stage.owner === "stoker" && stage.position === null) return `${STOKER_STAMP}: ${lastPart(row.name)} (${NOT_YOURS})`;
  return stage === null ? lastPart(row.name) : stageText(stage) || lastPart(row.name);
}

/** Where an op runs, in the pipeline's words ("" when the analysis cannot tell). */
export function opPlace(op: OpRow): string {
  if (op.function) return op.stage ? `in ${op.function} (${stageText(op.stage)})` : `in ${op.function}`;
  if (op.functions && op.functions.length > 1) return `in one of ${op.functions.join(", ")}`;
  if (op.type === "Dataset" && op.stage) return stageText(op.stage);
  return "";
}

/** A row's owner, for its styling: Stoker's and tf.data's rows are not the user's. */
export function ownerOf(row: { stage?: RowStage | null }): Owner {
  return row.stage?.owner ?? "user";
}

/** `name` cut where a line may break without splitting a word: after "::", "/", "_", "," and
 *  "." (TensorFlow's names have no spaces); each piece goes in with a <wbr> after it. */
export function breakPoints(name: string): string[] {
  const pieces = name.split(/(?<=::|\/|_|,|\.)/);
  return pieces.filter((piece) => piece.length > 0);
}
