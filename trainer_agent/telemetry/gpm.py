"""NVML GPM (GPU Performance Monitoring): what the SMs really do, on Hopper and newer GPUs.

NVML's `utilization.gpu` says only that some kernel ran during the sample period; GPM counts
what the streaming multiprocessors did. The rules of the API (nvml.h, `nvmlGpmMetricsGet`):

- only GPUs whose `nvmlGpmQueryDeviceSupport` says so (Hopper, compute capability 9.0, and
  newer); a GPU that says no gets no GPM field at all: null, never 0;
- a metric is the difference of two samples (`nvmlGpmSampleGet`) taken at least 100 ms
  apart: the GPU refreshes its counters every 100 ms, so closer samples hold the same
  counters and every metric reads 0. A read that comes sooner (a late tick followed by a
  prompt one) keeps the older sample and gives null, so the next window is longer;
- each metric has its own `nvmlReturn`: a value is trusted only when it is NVML_SUCCESS
  (and finite, within 0..100); anything else is null for that metric alone;
- the request is the binding's own `c_nvmlGpmMetricsGet_t`, whose metric array size changed
  between binding versions (210 in nvml.h 12.x, 477 in nvidia-ml-py 13): only its
  `numMetrics` first entries are used.

A MIG device's samples come from `nvmlGpmMigSampleGet` on its parent GPU with its GPU
instance id. Every call goes through the `Nvml` chokepoint. `STOKER_GPM=0` turns GPM
reading off.
"""

import logging
import math
import time
from collections.abc import Callable
from typing import Any

from trainer_agent.settings import agent_setting
from trainer_agent.telemetry.nvml import DeviceKey, Nvml

log = logging.getLogger("trainer_agent")

# Wire field → GPM metric id (nvml.h nvmlGpmMetricId_t).
GPM_METRICS: dict[str, int] = {
    "sm_util": 2,  # NVML_GPM_METRIC_SM_UTIL: share of SMs busy
    "sm_occupancy": 3,  # NVML_GPM_METRIC_SM_OCCUPANCY: active warps against the maximum
    "tensor_util": 5,  # NVML_GPM_METRIC_ANY_TENSOR_UTIL: any tensor pipe active
    "dram_bw_util": 10,  # NVML_GPM_METRIC_DRAM_BW_UTIL: DRAM bandwidth against its peak
    "fp32_util": 12,  # NVML_GPM_METRIC_FP32_UTIL: non-tensor FP32 pipe
    "fp16_util": 13,  # NVML_GPM_METRIC_FP16_UTIL: non-tensor FP16 pipe
}
GPM_FIELDS = tuple(GPM_METRICS)
MIN_WINDOW_S = 0.1  # the GPU's counter refresh period: samples must be at least this apart
HOPPER_MAJOR = 9
# Consecutive failed sample reads after which GPM is given up on a device (said once).
MAX_FAILURES = 3


def gpm_enabled() -> bool:
    """False when `STOKER_GPM` turns GPM off (0, false, no, off)."""
    return agent_setting("gpm")


def _empty() -> dict[str, float | None]:
    return dict.fromkeys(GPM_FIELDS)


class GpmReader:
    """GPM metrics of one GPU over the window since the previous read.

    `read()` returns every GPM field, each a percentage or None. Not started, unsupported,
    off or failed: all None.
    """

    def __init__(
        self, nvml: Nvml, index: DeviceKey, *, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self.nvml = nvml
        self.index = index
        self._clock = clock
        self.active = False
        self.reason: str | None = None  # why GPM is not read on this device, once known
        self._handle: Any = None  # the GPU's (a MIG device's parent's)
        self._instance: int | None = None  # a MIG device's GPU instance id
        self._samples: list[Any] = []  # [previous, spare]
        self._previous_at: float | None = None
        self._failures = 0
        self._request: Any = None
        self.window_s: float | None = None  # the last read's window

    def start(self) -> bool:
        """Check support and take the first sample; False (with `reason`) when GPM is off."""
        if not gpm_enabled():
            return self._off("turned off by STOKER_GPM")
        library = self.nvml.library
        if library is None or not hasattr(library, "c_nvmlGpmMetricsGet_t"):
            return self._off("this nvidia-ml-py has no GPM binding")
        self._handle = self.nvml.handle(self.index)
        if self._handle is None:
            return self._off("no handle")
        if isinstance(self.index, str):  # a MIG device: sampled through its parent
            mig, nvml = self._handle, self.nvml
            self._handle = nvml.call("nvmlDeviceGetDeviceHandleFromMigDeviceHandle", mig)
            self._instance = nvml.call("nvmlDeviceGetGpuInstanceId", mig)
            if self._handle is None or self._instance is None:
                return self._off("NVML gives no parent GPU or GPU instance of this MIG device")
        capability = self.nvml.info(self.index).compute_capability
        if capability is not None and int(capability.split(".")[0]) < HOPPER_MAJOR:
            return self._off(f"compute capability {capability} (GPM needs Hopper, 9.0, or newer)")
        support = self.nvml.call("nvmlGpmQueryDeviceSupport", self._handle)
        if support is None or not int(getattr(support, "isSupportedDevice", 0)):
            return self._off("the driver says this GPU has no GPM")
        samples = [self.nvml.call("nvmlGpmSampleAlloc") for _ in range(2)]
        if any(sample is None for sample in samples):
            self._free(samples)
            return self._off("nvmlGpmSampleAlloc failed")
        self._samples = samples
        request = library.c_nvmlGpmMetricsGet_t()
        self._request = request
        self.active = True
        if self._take(self._samples[0]):
            self._previous_at = self._clock()
        return self.active

    def read(self) -> dict[str, float | None]:
        """The GPM fields over the window since the previous sample (None where unknown)."""
        self.window_s = None
        if not self.active:
            return _empty()
        if self._previous_at is None:  # the first sample failed: try again as the first
            if self._take(self._samples[0]):
                self._previous_at = self._clock()
            return _empty()
        # Times are taken once a sample is in, so two samples are at least the window apart
        # even when taking one was slow (under load, a time noted before the call was ~30 ms
        # early and a window of 100 ms held 80: the counters had not refreshed).
        if self._clock() - self._previous_at < MIN_WINDOW_S:
            return _empty()  # too soon: the counters have not refreshed; keep the old sample
        previous, current = self._samples
        if not self._take(current):
            return _empty()
        taken_at = self._clock()
        values = self._metrics(previous, current)
        self._samples = [current, previous]
        self.window_s = taken_at - self._previous_at
        self._previous_at = taken_at
        return values

    def close(self) -> None:
        samples, self._samples = self._samples, []
        self.active = False
        self._free(samples)

    # --- internals ----------------------------------------------------------------------------
    def _take(self, sample: Any) -> bool:
        args: tuple[Any, ...]
        if self._instance is None:
            function, args = "nvmlGpmSampleGet", (self._handle, sample)
        else:
            function, args = "nvmlGpmMigSampleGet", (self._handle, self._instance, sample)
        if self.nvml.call(function, *args) is not None:
            self._failures = 0
            return True
        error = self.nvml.last_error(function)
        self._failures += 1
        if error == "NVMLError_NoPermission":
            self._give_up(
                "NVML refuses GPM samples (no permission: a MIG instance, or a container "
                "without profiling rights)"
            )
        elif error == "NVMLError_NotSupported" or self._failures >= MAX_FAILURES:
            self._give_up(f"{function} failed ({error})")
        return False

    def _metrics(self, sample1: Any, sample2: Any) -> dict[str, float | None]:
        request = self._request
        request.version = self.nvml.library.NVML_GPM_METRICS_GET_VERSION  # type: ignore[union-attr]
        request.numMetrics = len(GPM_METRICS)
        request.sample1 = sample1
        request.sample2 = sample2
        for i, metric_id in enumerate(GPM_METRICS.values()):
            request.metrics[i].metricId = metric_id
            request.metrics[i].nvmlReturn = 0
            request.metrics[i].value = 0.0
        if self.nvml.call("nvmlGpmMetricsGet", request) is None:
            return _empty()
        values = _empty()
        for i, name in enumerate(GPM_FIELDS):
            metric = request.metrics[i]
            if int(metric.nvmlReturn) != 0:  # this metric alone is unknown
                continue
            value = float(metric.value)
            if math.isfinite(value) and -0.5 <= value <= 100.5:
                values[name] = min(100.0, max(0.0, value))
        return values

    def _free(self, samples: list[Any]) -> None:
        for sample in samples:
            if sample is not None:
                self.nvml.call("nvmlGpmSampleFree", sample)

    def _off(self, reason: str) -> bool:
        self.reason = reason
        self.active = False
        return False

    def _give_up(self, reason: str) -> None:
        log.warning(
            "Stoker: GPU %s: %s; SM activity, occupancy, tensor and DRAM figures stay empty",
            self.index,
            reason,
        )
        self.close()
        self._off(reason)
