"""The four busy-but-under-used findings (stoker_server.diagnosis.gpu_use) on scripted runs: each
fires on its case with its evidence and advice, none on a healthy run or without GPM."""

import pytest

from stoker_server.diagnosis.gpu_use import gpu_findings

GIB = 2**30
H100 = {"gpus": [{"index": 0, "compute_capability": "9.0", "memory_total_bytes": 80 * GIB}]}
HEALTHY = {
    "gpu_util_mean": 97.0, "sm_util_mean": 85.0, "sm_occupancy_mean": 40.0,
    "tensor_util_mean": 55.0, "dram_bw_util_mean": 30.0,
    "peak_memory_bytes": 30 * GIB, "peak_tf_memory_bytes": 26 * GIB,
}  # fmt: skip
MIXED = {**H100, "mixed_precision_policy": "mixed_bfloat16", "memory_growth": {"GPU:0": True}}


def _keys(summary: dict, environment: dict) -> list[str]:
    return [f.key for f in gpu_findings(summary, environment)]


def test_a_healthy_run_has_no_finding() -> None:
    assert _keys(HEALTHY, MIXED) == []


def test_launch_bound_fires_on_high_utilization_with_few_busy_sms() -> None:
    summary = {**HEALTHY, "sm_util_mean": 18.0}
    environment = {**MIXED, "jit_compile": False, "steps_per_execution": 1}
    (finding,) = gpu_findings(summary, environment)
    assert finding.key == "launch_bound"
    assert {e.key for e in finding.evidence} >= {"gpu_util_mean", "sm_util_mean"}
    advice = " ".join(finding.advice)
    assert "larger batches" in advice and "jit_compile=True" in advice
    assert "steps_per_execution" in advice
    # What the run already does is not advised again.
    done = gpu_findings(summary, {**MIXED, "jit_compile": True, "steps_per_execution": 32})
    assert "jit_compile" not in " ".join(done[0].advice)
    assert "steps_per_execution" not in " ".join(done[0].advice)


@pytest.mark.parametrize("policy", ["float32", None])
def test_tensor_cores_idle_fires_in_float32_on_a_tensor_core_gpu(policy: str | None) -> None:
    summary = {**HEALTHY, "tensor_util_mean": 0.4}
    environment = {**H100, "memory_growth": {"GPU:0": True}}
    if policy:
        environment["mixed_precision_policy"] = policy
    (finding,) = gpu_findings(summary, environment)
    assert finding.key == "tensor_cores_idle"
    assert "mixed_bfloat16" in finding.advice[0]
    # Mixed precision already on, or a GPU without Tensor Cores: silent.
    assert _keys(summary, MIXED) == []
    pascal = {"gpus": [{"compute_capability": "6.1", "memory_total_bytes": 80 * GIB}]}
    assert _keys(summary, pascal) == []


def test_oom_ahead_fires_when_the_allocator_peak_nears_the_device_memory() -> None:
    summary = {**HEALTHY, "peak_memory_bytes": 79 * GIB, "peak_tf_memory_bytes": 76 * GIB}
    (finding,) = gpu_findings(summary, MIXED)
    assert finding.key == "oom_ahead"
    assert "smaller batch" in finding.advice[0]
    assert "95 %" in finding.evidence[0].text


def test_memory_growth_off_fires_when_nvml_is_full_and_the_allocator_uses_little() -> None:
    summary = {**HEALTHY, "peak_memory_bytes": 78 * GIB, "peak_tf_memory_bytes": 3 * GIB}
    environment = {**MIXED, "memory_growth": {"GPU:0": False}}
    (finding,) = gpu_findings(summary, environment)
    assert finding.key == "memory_growth_off"
    assert "set_memory_growth" in finding.advice[0]
    assert any(e.key == "memory_growth" for e in finding.evidence)


def test_without_gpm_nothing_is_guessed_from_utilization() -> None:
    summary = {
        "gpu_util_mean": 99.0, "sm_util_mean": None, "tensor_util_mean": None,
        "peak_memory_bytes": 10 * GIB, "peak_tf_memory_bytes": 9 * GIB,
    }  # fmt: skip
    assert _keys(summary, {**H100, "mixed_precision_policy": "float32"}) == []
