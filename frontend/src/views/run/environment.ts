// The run's environment, as the agent reports it, turned into the rows of the
// environment panel. The agent's key names are read flexibly (a few spellings
// and nestings each), so that the panel keeps working while the agent grows.
// Pure, unit-tested.

import { formatValue } from "../../app/format";
import { formatBytes } from "../../state/samples";

type Obj = Record<string, unknown>;

function isObj(v: unknown): v is Obj {
  return typeof v === "object" && v !== null && !Array.isArray(v);
}

/** The first present value among dotted paths. */
export function lookup(env: unknown, paths: string[]): unknown {
  for (const p of paths) {
    let cur: unknown = env;
    for (const part of p.split(".")) {
      if (!isObj(cur) || !(part in cur)) {
        cur = undefined;
        break;
      }
      cur = cur[part];
    }
    if (cur !== undefined && cur !== null && cur !== "") return cur;
  }
  return undefined;
}

export interface EnvRow {
  key: string;
  label: string;
  value: string;
}

export interface GpuInfo {
  index: string;
  name: string;
  memory: string;
  capability: string;
}

export interface EnvSummary {
  rows: EnvRow[];
  gpus: GpuInfo[];
  warnings: string[];
}

const FIELDS: { key: string; label: string; paths: string[]; format?: (v: unknown) => string }[] = [
  { key: "tensorflow", label: "TensorFlow", paths: ["tensorflow_version", "tf_version", "versions.tensorflow", "tensorflow", "versions.tensorflow", "tf.version"] },
  { key: "keras", label: "Keras", paths: ["keras", "keras_version", "versions.keras", "tf.keras_version"] },
  { key: "python", label: "Python", paths: ["python", "python_version", "versions.python"] },
  { key: "cuda", label: "CUDA (build)", paths: ["cuda_version", "cuda", "build.cuda_version", "tf_build.cuda_version", "build_info.cuda_version", "versions.cuda"] },
  { key: "cudnn", label: "cuDNN (build)", paths: ["cudnn_version", "cudnn", "build.cudnn_version", "tf_build.cudnn_version", "build_info.cudnn_version", "versions.cudnn"] },
  { key: "driver", label: "Driver", paths: ["driver_version", "driver", "nvidia_driver", "nvml.driver_version", "versions.driver"] },
  { key: "cuda_driver", label: "CUDA (driver)", paths: ["cuda_driver_version"] },
  { key: "mixed_precision", label: "Mixed precision", paths: ["mixed_precision_policy", "mixed_precision.policy", "mixed_precision", "dtype_policy", "precision_policy"] },
  { key: "jit_compile", label: "XLA / jit_compile", paths: ["jit_compile", "xla", "model.jit_compile", "xla_jit"] },
  { key: "strategy", label: "Distribution strategy", paths: ["strategy", "distribution_strategy", "distribute.strategy", "strategy.name"] },
  { key: "replicas", label: "Replicas", paths: ["num_replicas", "replicas", "num_replicas_in_sync", "strategy.num_replicas", "distribute.num_replicas"] },
  { key: "memory_growth", label: "Memory growth", paths: ["memory_growth", "gpu_memory_growth", "tf.memory_growth"] },
  { key: "steps_per_execution", label: "Steps per execution", paths: ["steps_per_execution"] },
  { key: "params", label: "Parameters", paths: ["model.param_count", "param_count"], format: (v) => (typeof v === "number" ? v.toLocaleString("en-US") : formatValue(v)) },
  { key: "determinism", label: "Op determinism", paths: ["op_determinism"] },
  {
    key: "optimizer",
    label: "Optimizer",
    paths: ["optimizer"],
    format: (v) => {
      if (!isObj(v)) return formatValue(v);
      const lr = isObj(v.config) ? v.config.learning_rate : undefined;
      const name = formatValue(v.class ?? v.name ?? "?");
      return typeof lr === "number" ? `${name} (learning rate ${Number(lr.toPrecision(4))})` : name;
    },
  },
  { key: "host", label: "Host", paths: ["hostname", "host", "platform.node"] },
  { key: "platform", label: "Platform", paths: ["platform", "os", "platform.system"] },
];

function text(v: unknown): string {
  if (typeof v === "boolean") return v ? "on" : "off";
  if (isObj(v) && typeof v.name === "string") return v.name;
  // Per-device booleans ({"/physical_device:GPU:0": true}): one word when they agree.
  if (isObj(v) && Object.keys(v).length > 0 && Object.values(v).every((x) => typeof x === "boolean" || x === null)) {
    const vals = Object.values(v);
    if (vals.every((x) => x === vals[0])) return vals[0] === null ? "unknown" : vals[0] ? "on" : "off";
    return Object.entries(v)
      .map(([k, x]) => `${k.replace(/^\/physical_device:/, "")}: ${x === null ? "?" : x ? "on" : "off"}`)
      .join(", ");
  }
  return formatValue(v);
}

function gpusOf(env: unknown): GpuInfo[] {
  const raw = lookup(env, ["gpus", "devices", "gpu", "nvml.gpus", "hardware.gpus"]);
  const list = Array.isArray(raw) ? raw : [];
  return list.map((g, i) => {
    if (!isObj(g)) return { index: String(i), name: formatValue(g), memory: "—", capability: "—" };
    const mem = lookup(g, ["memory_total_bytes", "memory_bytes", "memory_total", "total_memory", "memory"]);
    const cc = lookup(g, ["compute_capability", "cc", "capability"]);
    const idx = lookup(g, ["index", "id"]);
    return {
      index: idx === undefined ? String(i) : formatValue(idx),
      name: formatValue(lookup(g, ["name", "device_name", "model"]) ?? "GPU"),
      memory: typeof mem === "number" ? formatBytes(mem) : mem === undefined ? "—" : formatValue(mem),
      capability: Array.isArray(cc) ? cc.join(".") : cc === undefined ? "—" : formatValue(cc),
    };
  });
}

/** Doctor findings: strings, `{message}` objects, or doctor checks `{status, name, detail, fix}` (passes left out). */
function warningsOf(env: unknown): string[] {
  const raw = lookup(env, ["doctor.warnings", "doctor.checks", "warnings", "doctor_warnings", "doctor"]);
  const list = Array.isArray(raw) ? raw : typeof raw === "string" ? [raw] : [];
  const out: string[] = [];
  for (const w of list) {
    if (!isObj(w)) {
      out.push(formatValue(w));
      continue;
    }
    if (typeof w.status === "string") {
      if (/^(pass|ok|info)$/i.test(w.status)) continue;
      const head = [w.name, w.detail].filter((x) => typeof x === "string" && x).join(": ");
      const fix = typeof w.fix === "string" && w.fix ? ` Fix: ${w.fix}` : "";
      out.push(`${w.status.toUpperCase()} ${head}${fix}`.trim());
      continue;
    }
    out.push(formatValue(w.message ?? w.text ?? w));
  }
  // NVML sees GPUs but TensorFlow does not: the usual CUDA/cuDNN mismatch.
  const nvmlGpus = lookup(env, ["gpus"]);
  const tfGpus = lookup(env, ["tf_gpus"]);
  if (Array.isArray(nvmlGpus) && nvmlGpus.length > 0 && Array.isArray(tfGpus) && tfGpus.length === 0) {
    out.push(
      `TensorFlow sees no GPU although the driver reports ${nvmlGpus.length}: training runs on the CPU. Check the CUDA/cuDNN libraries against the TF build (run stoker doctor).`,
    );
  }
  const nvmlError = lookup(env, ["nvml_error"]);
  if (lookup(env, ["nvml"]) === false && nvmlError !== undefined) out.push(`NVML unavailable: ${formatValue(nvmlError)}`);
  return out.filter((w) => w !== "");
}

const PIPELINE_FLAGS: [string, string][] = [
  ["prefetch", "prefetch"],
  ["parallel_map", "parallel map"],
  ["serial_map", "serial map"],
  ["cache", "cache"],
  ["interleave", "interleave"],
];

/** What `cb.wrap(dataset)` found in the tf.data pipeline: flags, then the stages (outermost first). */
export function pipelineRows(p: unknown): EnvRow[] {
  if (!isObj(p)) return [];
  const rows: EnvRow[] = [];
  const flags = PIPELINE_FLAGS.filter(([k]) => typeof p[k] === "boolean").map(([k, label]) => `${label}: ${p[k] ? "yes" : "no"}`);
  if (flags.length > 0) rows.push({ key: "pipeline", label: "Input pipeline", value: flags.join(" · ") });
  if (Array.isArray(p.stages) && p.stages.length > 0) {
    rows.push({ key: "pipeline_stages", label: "Pipeline stages", value: p.stages.map((x) => formatValue(x)).join(" ← ") });
  }
  return rows;
}

function isEmpty(v: unknown): boolean {
  return (Array.isArray(v) && v.length === 0) || (isObj(v) && Object.keys(v).length === 0);
}

export function environmentSummary(env: unknown): EnvSummary {
  const rows: EnvRow[] = [];
  for (const f of FIELDS) {
    const v = lookup(env, f.paths);
    if (v === undefined || isEmpty(v)) continue;
    rows.push({ key: f.key, label: f.label, value: f.format ? f.format(v) : text(v) });
  }
  rows.push(...pipelineRows(lookup(env, ["input_pipeline", "pipeline"])));
  return { rows, gpus: gpusOf(env), warnings: warningsOf(env) };
}
