import { describe, expect, it } from "vitest";
import { environmentSummary, lookup } from "./environment";

describe("lookup", () => {
  it("returns the first present dotted path", () => {
    expect(lookup({ a: { b: 1 } }, ["x", "a.b"])).toBe(1);
    expect(lookup({ a: "" }, ["a"])).toBeUndefined();
  });
});

describe("environmentSummary", () => {
  it("names the versions, GPUs and doctor warnings the agent reports", () => {
    const s = environmentSummary({
      tensorflow: "2.17.0",
      keras_version: "3.5.0",
      build: { cuda_version: "12.3", cudnn_version: "8" },
      driver_version: "550.54",
      mixed_precision_policy: "mixed_float16",
      jit_compile: true,
      strategy: { name: "MirroredStrategy", num_replicas: 2 },
      num_replicas: 2,
      memory_growth: false,
      gpus: [{ index: 0, name: "NVIDIA A100", memory_total_bytes: 40 * 1024 ** 3, compute_capability: [8, 0] }],
      doctor: { warnings: ["cuDNN 8 does not match the TF build", { message: "memory growth off" }] },
    });
    const byKey = Object.fromEntries(s.rows.map((r) => [r.key, r.value]));
    expect(byKey).toMatchObject({
      tensorflow: "2.17.0",
      keras: "3.5.0",
      cuda: "12.3",
      cudnn: "8",
      driver: "550.54",
      mixed_precision: "mixed_float16",
      jit_compile: "on",
      strategy: "MirroredStrategy",
      replicas: "2",
      memory_growth: "off",
    });
    expect(s.gpus).toEqual([{ index: "0", name: "NVIDIA A100", memory: "40.0 GiB", capability: "8.0" }]);
    expect(s.warnings).toEqual(["cuDNN 8 does not match the TF build", "memory growth off"]);
  });
  it("is empty for an empty environment", () => {
    expect(environmentSummary({})).toEqual({ rows: [], gpus: [], warnings: [] });
    expect(environmentSummary(null)).toEqual({ rows: [], gpus: [], warnings: [] });
  });
});

describe("environmentSummary with the agent's report", () => {
  it("reads the agent's flat keys, per-device memory growth and doctor checks", () => {
    const s = environmentSummary({
      hostname: "node-3",
      tensorflow_version: "2.17.0",
      keras_version: "3.5.0",
      tf_build: { cuda_version: "12.3", cudnn_version: "8.9" },
      driver_version: "550.54",
      cuda_driver_version: "12.4",
      memory_growth: { "/physical_device:GPU:0": true, "/physical_device:GPU:1": false },
      model: { param_count: 1234567, dtype_policy: "float32" },
      strategy: "MirroredStrategy",
      replicas: 2,
      nvml: true,
      doctor: [
        { status: "pass", name: "driver", detail: "ok" },
        { status: "warn", name: "cudnn", detail: "cuDNN 8.9 not found", fix: "install cuDNN 8.9" },
      ],
    });
    const byKey = Object.fromEntries(s.rows.map((r) => [r.key, r.value]));
    expect(byKey).toMatchObject({
      host: "node-3",
      cuda: "12.3",
      cudnn: "8.9",
      cuda_driver: "12.4",
      memory_growth: "GPU:0: on, GPU:1: off",
      params: "1,234,567",
      strategy: "MirroredStrategy",
      replicas: "2",
    });
    expect(s.warnings).toEqual(["WARN cudnn: cuDNN 8.9 not found Fix: install cuDNN 8.9"]);
  });
  it("warns when NVML is unavailable", () => {
    expect(environmentSummary({ nvml: false, nvml_error: "libnvidia-ml.so.1 not found", gpus: [] }).warnings).toEqual([
      "NVML unavailable: libnvidia-ml.so.1 not found",
    ]);
  });
});

describe("pipeline rows", () => {
  it("shows what wrap found in the tf.data pipeline", () => {
    const s = environmentSummary({ input_pipeline: { prefetch: false, parallel_map: false, serial_map: true, cache: false, stages: ["BatchDataset", "MapDataset", "TensorSliceDataset"] } });
    expect(s.rows).toEqual([
      { key: "pipeline", label: "Input pipeline", value: "prefetch: no · parallel map: no · serial map: yes · cache: no" },
      { key: "pipeline_stages", label: "Pipeline stages", value: "BatchDataset ← MapDataset ← TensorSliceDataset" },
    ]);
  });
});

describe("agent report details", () => {
  it("leaves out empty values, names the optimizer and warns when TF sees no GPU", () => {
    const s = environmentSummary({
      memory_growth: {},
      optimizer: { class: "Adam", config: { learning_rate: 0.0010000000474974513 } },
      gpus: [{ index: 0, name: "A100" }],
      tf_gpus: [],
    });
    expect(s.rows).toEqual([{ key: "optimizer", label: "Optimizer", value: "Adam (learning rate 0.001)" }]);
    expect(s.warnings[0]).toMatch(/TensorFlow sees no GPU although the driver reports 1/);
  });
});
