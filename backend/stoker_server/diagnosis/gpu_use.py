"""A GPU that looks busy but is under-used: four findings with evidence and advice.

From the run's summary (NVML utilization, GPM means, peak memory) and its environment (the
GPUs' compute capability and memory, TensorFlow's precision policy, XLA, steps per
execution, memory growth), the checklist TensorFlow users already read:

1. **launch-bound**: utilization high but few SMs busy (many small kernels);
2. **tensor cores idle**: a GPU with Tensor Cores whose tensor pipes stay idle while the
   policy is float32;
3. **out of memory ahead**: TensorFlow's allocator peak near the device's memory;
4. **memory growth off**: NVML shows nearly all memory taken while the allocator uses little
   (TensorFlow reserved it at start; other processes cannot share the GPU).

Each needs its evidence: without GPM (before Hopper, or GPM off) findings 1 and 2 stay
silent, never guessed from utilization alone. Each finding is one rule (`RULES`): a function
of the run's figures (`GpuFacts`) that returns its finding, or None where it does not hold.
"""

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from stoker_server.diagnosis.verdict import Evidence, GpuFinding
from trainer_agent.figures import percent_text

LAUNCH_BOUND_UTIL = 80.0  # NVML utilization at least this ...
LAUNCH_BOUND_SM = 40.0  # ... while fewer SMs than this are busy (GPM)
TENSOR_IDLE = 2.0  # tensor pipes active less than this share of the time (GPM)
TENSOR_IDLE_MIN_UTIL = 50.0  # ... on a GPU that is busy at least this much
OOM_AHEAD = 0.90  # allocator peak at least this share of the device's memory
RESERVED_ALL = 0.90  # NVML used at least this share ...
ALLOCATOR_LITTLE = 0.50  # ... while the allocator's peak is below this share

__all__ = ["RULES", "GpuFacts", "GpuFinding", "gpu_findings"]


def _number(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return float(value)


def _gpus(environment: dict[str, Any]) -> list[dict[str, Any]]:
    gpus = environment.get("gpus")
    return [g for g in gpus if isinstance(g, dict)] if isinstance(gpus, list) else []


def _capability(environment: dict[str, Any]) -> float | None:
    values = []
    for gpu in _gpus(environment):
        try:
            major, minor = str(gpu.get("compute_capability")).split(".")[:2]
            values.append(int(major) + int(minor) / 10)
        except (ValueError, AttributeError):
            continue
    return min(values) if values else None


def _memory_total(environment: dict[str, Any]) -> float | None:
    totals = [_number(g.get("memory_total_bytes")) for g in _gpus(environment)]
    known = [t for t in totals if t]
    return min(known) if known else None


def _policy(environment: dict[str, Any]) -> str | None:
    policy = environment.get("mixed_precision_policy")
    if isinstance(policy, str):
        return policy
    model = environment.get("model")
    if isinstance(model, dict) and isinstance(model.get("dtype_policy"), str):
        return model["dtype_policy"]
    return None


def _ev(key: str, value: float, text: str) -> Evidence:
    return Evidence(key=key, value=value, text=text)


def _of(part: float, total: float) -> str:
    """`part` of `total` in percent, as every surface writes a percent: "95 %"."""
    return percent_text(part / total * 100)


def _gib(value: float) -> str:
    return f"{value / 2**30:.1f} GiB"


@dataclass(frozen=True)
class GpuFacts:
    """The figures the rules read, from a run's summary and environment; None where unknown."""

    util: float | None  # NVML utilization, mean %
    sm: float | None  # GPM SM activity, mean %
    tensor: float | None  # GPM tensor-pipe activity, mean %
    occupancy: float | None  # GPM SM occupancy, mean %
    capability: float | None  # the lowest compute capability of the run's GPUs
    policy: str | None  # the Keras precision policy
    jit: Any  # jit_compile as reported
    steps_per_execution: float | None
    memory_total: float | None  # the smallest GPU's memory, bytes
    tf_peak: float | None  # TensorFlow's allocator peak, bytes
    used_peak: float | None  # NVML's memory used peak, bytes
    memory_growth: Any  # memory growth per GPU as reported

    @classmethod
    def of(cls, summary: dict[str, Any], environment: dict[str, Any]) -> "GpuFacts":
        return cls(
            util=_number(summary.get("gpu_util_mean")),
            sm=_number(summary.get("sm_util_mean")),
            tensor=_number(summary.get("tensor_util_mean")),
            occupancy=_number(summary.get("sm_occupancy_mean")),
            capability=_capability(environment),
            policy=_policy(environment),
            jit=environment.get("jit_compile"),
            steps_per_execution=_number(environment.get("steps_per_execution")),
            memory_total=_memory_total(environment),
            tf_peak=_number(summary.get("peak_tf_memory_bytes")),
            used_peak=_number(summary.get("peak_memory_bytes")),
            memory_growth=environment.get("memory_growth"),
        )


def launch_bound(run: GpuFacts) -> GpuFinding | None:
    """Utilization high but few SMs busy: many small kernels."""
    util, sm, occupancy = run.util, run.sm, run.occupancy
    if util is None or sm is None or util < LAUNCH_BOUND_UTIL or sm >= LAUNCH_BOUND_SM:
        return None
    evidence = [
        _ev("gpu_util_mean", util, f"GPU utilization {percent_text(util)} (NVML: some kernel ran)"),
        _ev("sm_util_mean", sm, f"but only {percent_text(sm)} of the SMs were busy (GPM)"),
    ]
    if occupancy is not None:
        evidence.append(
            _ev("sm_occupancy_mean", occupancy, f"SM occupancy {percent_text(occupancy)}")
        )
    advice = ["Use larger batches: each kernel then has enough work to fill the SMs."]
    if run.jit is not True:
        advice.append(
            "Compile with XLA (`model.compile(..., jit_compile=True)`): it fuses small ops "
            "into fewer, larger kernels."
        )
    spe = run.steps_per_execution
    if spe is None or spe <= 1:
        advice.append(
            "Set `steps_per_execution` in `compile` (e.g. 32) to cut per-step launch and "
            "host overhead."
        )
    return GpuFinding(
        key="launch_bound",
        title="Busy but under-used: many small kernels (launch-bound)",
        evidence=evidence,
        advice=advice,
    )


def tensor_cores_idle(run: GpuFacts) -> GpuFinding | None:
    """A busy GPU with Tensor Cores whose tensor pipes stay idle under a float32 policy."""
    capability, tensor, util, policy = run.capability, run.tensor, run.util, run.policy
    if (
        capability is None
        or capability < 7.0
        or tensor is None
        or tensor >= TENSOR_IDLE
        or util is None
        or util < TENSOR_IDLE_MIN_UTIL
        or policy not in (None, "float32")
    ):
        return None
    mixed = "mixed_bfloat16" if capability >= 8.0 else "mixed_float16"
    return GpuFinding(
        key="tensor_cores_idle",
        title="Tensor Cores idle: the model computes in float32",
        evidence=[
            Evidence(
                key="tensor_util_mean",
                value=tensor,
                text=f"tensor pipes active {tensor:.1f} % of the time (GPM)",
            ),
            Evidence(
                key="compute_capability",
                value=capability,
                text=f"the GPU has Tensor Cores (compute capability {capability:.1f})",
            ),
            Evidence(
                key="mixed_precision_policy",
                value=policy,
                text=f"precision policy {policy or 'not reported (float32 unless set)'}",
            ),
        ],
        advice=[
            f"Turn on mixed precision: `keras.mixed_precision.set_global_policy('{mixed}')`"
            " (or 'mixed_float16'), keeping the output layer in float32; `fit` scales "
            "the loss itself.",
        ],
    )


def oom_ahead(run: GpuFacts) -> GpuFinding | None:
    """TensorFlow's allocator peak near the device's memory."""
    total, tf_peak = run.memory_total, run.tf_peak
    if not total or tf_peak is None or tf_peak < OOM_AHEAD * total:
        return None
    return GpuFinding(
        key="oom_ahead",
        title="Out of memory ahead: TensorFlow's allocator peak is near the GPU's memory",
        evidence=[
            Evidence(
                key="peak_tf_memory_bytes",
                value=tf_peak,
                text=f"allocator peak {_gib(tf_peak)} of {_gib(total)} ({_of(tf_peak, total)})",
            ),
        ],
        advice=[
            "Use a smaller batch size, or mixed precision (activations in 16 bits take "
            "half the memory), before a larger model or batch runs out of memory.",
        ],
    )


def memory_growth_off(run: GpuFacts) -> GpuFinding | None:
    """Nearly all memory taken (NVML) while the allocator used little: TensorFlow reserved it
    at start. (Never together with `oom_ahead`: the allocator's peak is below half.)"""
    total, used_peak, tf_peak = run.memory_total, run.used_peak, run.tf_peak
    if (
        not total
        or used_peak is None
        or tf_peak is None
        or used_peak < RESERVED_ALL * total
        or tf_peak >= ALLOCATOR_LITTLE * total
    ):
        return None
    growth = run.memory_growth
    off = isinstance(growth, dict) and growth and not any(growth.values())
    evidence = [
        Evidence(
            key="peak_memory_bytes",
            value=used_peak,
            text=f"NVML shows {_gib(used_peak)} of {_gib(total)} taken ({_of(used_peak, total)})",
        ),
        Evidence(
            key="peak_tf_memory_bytes",
            value=tf_peak,
            text=f"while TensorFlow's allocator used at most {_gib(tf_peak)} "
            f"({_of(tf_peak, total)})",
        ),
    ]
    if off:
        evidence.append(Evidence(key="memory_growth", value=False, text="memory growth is off"))
    return GpuFinding(
        key="memory_growth_off",
        title="Memory reserved, not used: TensorFlow took nearly all GPU memory at start",
        evidence=evidence,
        advice=[
            "Turn on memory growth before TensorFlow uses the GPU "
            "(`tf.config.experimental.set_memory_growth(gpu, True)` for each GPU), or cap "
            "it with a logical device's `memory_limit`, so other processes can share the "
            "GPU.",
        ],
    )


# The findings, in the order they are shown.
RULES: tuple[Callable[[GpuFacts], GpuFinding | None], ...] = (
    launch_bound,
    tensor_cores_idle,
    oom_ahead,
    memory_growth_off,
)


def gpu_findings(summary: dict[str, Any], environment: dict[str, Any]) -> list[GpuFinding]:
    """The findings that hold for this run (none for a healthy one)."""
    facts = GpuFacts.of(summary, environment)
    return [finding for rule in RULES if (finding := rule(facts)) is not None]
