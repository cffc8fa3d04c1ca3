// Names for the shapes of the public Stoker API (`/api/v1`). They are aliases of
// the types generated from the server's OpenAPI schema (api.gen.ts, made by
// `npm run gen:api` from the committed openapi.json). What the schema does not
// describe is hand-written in apiLoose.ts and re-exported from here.

import type { components } from "./api.gen";

type Schemas = components["schemas"];

export type RunStatus = Schemas["RunStatus"];
export type RunSummary = Schemas["RunSummary"];
export type WorkerSummary = Schemas["WorkerSummary"];
export type EpochMetricSummary = Schemas["EpochMetricSummary"];
export type Run = Schemas["RunPublic"];
export type RunsPage = Schemas["RunsPublic"];
export type RunUpdate = Schemas["RunUpdate"];
export type StepsResponse = Schemas["StepSeries"];
export type CompareResponse = Schemas["RunComparison"];
export type CompareRun = Schemas["ComparedRun"];

export type Verdict = Schemas["Verdict"];
export type Evidence = Schemas["Evidence"];
export type GpuFinding = Schemas["GpuFinding"];
/**
 * A diagnosis as the UI holds it (`GET /runs/{id}/diagnosis`, live `verdict`),
 * after parseDiagnosis: the fields the banner needs, the rest optional.
 */
export type Diagnosis = Pick<Schemas["Diagnosis"], "verdict" | "verdict_label" | "input_wait_share" | "advice"> &
  Partial<Pick<Schemas["Diagnosis"], "run_id" | "window_s" | "window_label" | "steps_in_window">> & {
    source: "measured" | "fallback";
    /** Evidence objects; plain strings are read too. */
    evidence: (Evidence | string)[];
  };

export type AlertMetric = Schemas["AlertMetric"];
export type Comparison = Schemas["Comparison"];
export type AlertScope = Schemas["AlertScope"];
export type AlertState = Schemas["AlertState"];
export type AlertChannel = Schemas["BrowserChannel"] | Schemas["WebhookChannel"];
export type AlertRuleInput = Schemas["AlertRuleCreate"];
export type AlertRule = Schemas["AlertRulePublic"];
export type Alert = Schemas["AlertPublic"];
export type RunEvent = Schemas["RunEventPublic"];
export type StarvedRanges = Schemas["StarvedRanges"];
export type DeviceSeries = Schemas["DeviceSeries"];
export type HostSeries = Schemas["HostSeries"];
export type MetricSeries = Schemas["MetricSeries"];
export type DiskUse = Schemas["DiskPublic"];
export type TuneGroup = Schemas["TuneGroupPublic"];
export type TuneRow = Schemas["TuneRow"];
export type TuneTrial = Schemas["TuneTrialPublic"];

export interface ListPage<T> {
  data: T[];
  count: number;
}

export type {
  ClientMessage,
  LiveMessage,
  MetricAggregation,
  MetricTrack,
  SamplesData,
  SampleTrack,
  StepColumns,
} from "./apiLoose";
