"""The one chokepoint for every NVML call (`nvidia-ml-py`, imported as `pynvml`).

NVML is initialized lazily, once, under one lock. A call the driver does not support
returns None (null on the wire); a function missing from the installed driver or library is
logged once and then returns None; other NVML errors are logged once per function and
return None. Static facts (names, UUIDs, totals, versions) are cached. Nothing here raises
into the caller.
"""

import contextlib
import logging
import os
import threading
from collections.abc import Callable
from dataclasses import dataclass
from types import ModuleType
from typing import Any

from trainer_agent.log_once import warn_once

log = logging.getLogger("trainer_agent")

# pynvml enum values (stable across NVML versions).
GPU_UTILIZATION_SAMPLES = 1
MEMORY_UTILIZATION_SAMPLES = 2
TEMPERATURE_GPU = 0
CLOCK_SM = 1
PCIE_TX = 0
PCIE_RX = 1
MIG_ENABLED = 1

# Calls whose failures the caller says in its own words (a MIG slot that is empty answers
# NotFound; a MIG device or GPU this process may not read answers NoPermission).
SAID_BY_CALLER = frozenset(
    {"nvmlDeviceGetHandleByIndex", "nvmlDeviceGetHandleByUUID",
     "nvmlDeviceGetMigDeviceHandleByIndex"}
)  # fmt: skip

# A GPU by its NVML index, or a MIG device by its UUID ("MIG-…").
DeviceKey = int | str


@dataclass(frozen=True)
class GpuInfo:
    index: DeviceKey  # NVML index (as `nvidia-smi` numbers GPUs), or a MIG device's UUID
    name: str | None
    uuid: str | None
    memory_total_bytes: int | None
    compute_capability: str | None


def _text(value: Any) -> str | None:
    if value is None:
        return None
    return value.decode() if isinstance(value, bytes) else str(value)


class Nvml:
    """Thread-safe NVML access with lazy init; every method returns None on failure.

    The agent's one NVML chokepoint, by design (every call under one lock, "not supported"
    read as None, a missing symbol said once, static facts cached): hence one class, past 300
    lines, for every device reading the samplers take.

    Args:
        library: A module with pynvml's API; defaults to importing `pynvml`.
    """

    def __init__(self, library: ModuleType | None = None) -> None:
        self._library = library
        self._lock = threading.Lock()
        self._state = "new"  # new → ready | unavailable
        self.unavailable_reason: str | None = None
        self._handles: dict[DeviceKey, Any] = {}
        self._infos: dict[DeviceKey, GpuInfo] = {}
        self._parents: dict[str, int | None] = {}
        self._system: dict[str, Any] = {}
        self._last_sample_us: dict[tuple[DeviceKey, int], int] = {}
        self._last_errors: dict[str, str] = {}
        # index → whether the last reading found this process in the GPU's process list
        # (None: the list could not be read).
        self._runs_here: dict[DeviceKey, bool | None] = {}

    # --- init -----------------------------------------------------------------------------
    def available(self) -> bool:
        """Initialize NVML on first use; False (with the reason kept) when there is no driver."""
        with self._lock:
            return self._ensure_init()

    def _ensure_init(self) -> bool:
        if self._state == "new":
            try:
                if self._library is None:
                    import pynvml

                    self._library = pynvml
                self._library.nvmlInit()
                self._state = "ready"
            except Exception as error:  # no driver, no library, wrong version
                self._state = "unavailable"
                self.unavailable_reason = f"{type(error).__name__}: {error}"
        return self._state == "ready"

    def warn_unavailable_once(self) -> None:
        warn_once(
            "nvml:unavailable",
            "Stoker: no NVIDIA driver/NVML here (%s); GPU metrics are off, host metrics and "
            "step timing still flow",
            self.unavailable_reason,
        )

    def shutdown(self) -> None:
        with self._lock:
            if self._state == "ready":
                with contextlib.suppress(Exception):
                    self._library.nvmlShutdown()  # type: ignore[union-attr]
            self._state = "new"
            self._handles.clear()

    # --- the chokepoint -------------------------------------------------------------------
    def call(self, function: str, *args: Any) -> Any:
        """`pynvml.<function>(*args)`, or None when NVML cannot answer."""
        with self._lock:
            return self._call(function, *args)

    def _call(self, function: str, *args: Any) -> Any:
        if not self._ensure_init():
            return None
        library = self._library
        fn: Callable[..., Any] | None = getattr(library, function, None)
        if fn is None:
            warn_once(
                f"nvml:{function}",
                "Stoker: this pynvml has no %s; that field stays empty",
                function,
            )
            return None
        try:
            result = fn(*args)
        except Exception as error:
            name = type(error).__name__
            self._last_errors[function] = name
            if function.startswith("nvmlGpm") or function in SAID_BY_CALLER:
                return None  # trainer_agent.telemetry.gpm (GPM), or the caller, says what it means
            if name == "NVMLError_NotSupported":
                return None
            if name == "NVMLError_FunctionNotFound":
                warn_once(
                    f"nvml:{function}",
                    "Stoker: the NVIDIA driver has no %s; that field stays empty",
                    function,
                )
                return None
            warn_once(f"nvml:{function}:{name}", "Stoker: NVML %s failed: %s", function, error)
            return None
        self._last_errors.pop(function, None)
        return result

    def last_error(self, function: str) -> str | None:
        """The exception class name of `function`'s last failure (`NVMLError_NoPermission`),
        None when its last call succeeded."""
        return self._last_errors.get(function)

    @property
    def library(self) -> ModuleType | None:
        """The NVML binding once NVML is initialized (its structs and constants), else None."""
        return self._library if self.available() else None

    # --- devices --------------------------------------------------------------------------
    def device_count(self) -> int:
        return self.call("nvmlDeviceGetCount") or 0

    def handle(self, index: DeviceKey) -> Any:
        """A GPU's handle by NVML index, or a MIG device's by its UUID; None when NVML will
        not give it (`last_error` says why)."""
        with self._lock:
            if index not in self._handles:
                if isinstance(index, str):
                    handle = self._call("nvmlDeviceGetHandleByUUID", index.encode())
                else:
                    handle = self._call("nvmlDeviceGetHandleByIndex", index)
                if handle is None:
                    return None
                self._handles[index] = handle
            return self._handles[index]

    def mig_devices(self, index: int) -> list[str]:
        """UUIDs of the MIG devices of GPU `index` ([] when it is not in MIG mode, or NVML
        will not list them: `last_error` of nvmlDeviceGetMigDeviceHandleByIndex says why)."""
        handle = self.handle(index)
        mode = self.call("nvmlDeviceGetMigMode", handle) if handle is not None else None
        if not mode or int(mode[0]) != MIG_ENABLED:
            return []
        uuids: list[str] = []
        for slot in range(self.call("nvmlDeviceGetMaxMigDeviceCount", handle) or 0):
            mig = self.call("nvmlDeviceGetMigDeviceHandleByIndex", handle, slot)
            if mig is None:
                if self.last_error("nvmlDeviceGetMigDeviceHandleByIndex") == "NVMLError_NotFound":
                    continue  # an empty slot
                break
            uuid = _text(self.call("nvmlDeviceGetUUID", mig))
            if uuid:
                with self._lock:
                    self._handles.setdefault(uuid, mig)
                self._parents[uuid] = index
                uuids.append(uuid)
        return uuids

    def parent_index(self, key: DeviceKey) -> int | None:
        """The NVML index of the GPU a device key is on (a MIG device's parent GPU)."""
        if isinstance(key, int):
            return key
        if key not in self._parents:
            mig = self.handle(key)
            parent = (
                self.call("nvmlDeviceGetDeviceHandleFromMigDeviceHandle", mig)
                if mig is not None
                else None
            )
            index = self.call("nvmlDeviceGetIndex", parent) if parent is not None else None
            if index is None and mig is not None:
                return None  # not known yet; asked again next time
            self._parents[key] = None if index is None else int(index)
        return self._parents[key]

    def visible_mig_uuids(self) -> list[str]:
        """The MIG devices `CUDA_VISIBLE_DEVICES` names (`MIG-<uuid>`), in its order."""
        visible = os.environ.get("CUDA_VISIBLE_DEVICES") or ""
        return [e.strip() for e in visible.split(",") if e.strip().startswith("MIG-")]

    def visible_indices(self, *, all_gpus: bool = False) -> list[int]:
        """NVML indices of the GPUs this process can use (`CUDA_VISIBLE_DEVICES`), or all."""
        count = self.device_count()
        everything = list(range(count))
        visible = os.environ.get("CUDA_VISIBLE_DEVICES")
        if all_gpus or visible is None:
            return everything
        uuids = {i: (self.info(i).uuid or "") for i in everything}
        chosen: list[int] = []
        for entry in (e.strip() for e in visible.split(",")):
            if not entry:
                break
            if entry.lstrip("-").isdigit():
                index = int(entry)
                if index < 0 or index >= count:
                    break  # CUDA ignores this entry and everything after it
                chosen.append(index)
                continue
            matches = [i for i, uuid in uuids.items() if uuid.startswith(entry)]
            if len(matches) != 1:
                break
            chosen.append(matches[0])
        return list(dict.fromkeys(chosen))

    def info(self, index: DeviceKey) -> GpuInfo:
        """Static facts about one GPU, cached."""
        cached = self._infos.get(index)
        if cached is not None:
            return cached
        handle = self.handle(index)
        memory = self.call("nvmlDeviceGetMemoryInfo", handle) if handle is not None else None
        capability = (
            self.call("nvmlDeviceGetCudaComputeCapability", handle) if handle is not None else None
        )
        info = GpuInfo(
            index=index,
            name=_text(self.call("nvmlDeviceGetName", handle)) if handle is not None else None,
            uuid=_text(self.call("nvmlDeviceGetUUID", handle)) if handle is not None else None,
            memory_total_bytes=int(memory.total) if memory is not None else None,
            compute_capability=f"{capability[0]}.{capability[1]}" if capability else None,
        )
        if handle is not None:
            self._infos[index] = info
        return info

    def driver_version(self) -> str | None:
        if "driver" not in self._system:
            self._system["driver"] = _text(self.call("nvmlSystemGetDriverVersion"))
        return self._system["driver"]

    def cuda_driver_version(self) -> str | None:
        """The newest CUDA version the driver supports, as "12.4"."""
        if "cuda" not in self._system:
            raw = self.call("nvmlSystemGetCudaDriverVersion")
            self._system["cuda"] = f"{raw // 1000}.{raw % 1000 // 10}" if raw else None
        return self._system["cuda"]

    def _processes(self, index: DeviceKey, handle: Any, pid: int) -> list[Any] | None:
        """The GPU's compute processes (None when NVML cannot list them); notes whether
        `pid` is one of them."""
        processes = self.call("nvmlDeviceGetComputeRunningProcesses", handle)
        self._runs_here[index] = (
            any(p.pid == pid for p in processes) if processes is not None else None
        )
        return processes

    def check_processes(self, index: DeviceKey, pid: int) -> bool | None:
        """Whether `pid` runs on GPU `index` now (None: NVML cannot list its processes)."""
        handle = self.handle(index)
        if handle is None:
            return None
        self._processes(index, handle, pid)
        return self._runs_here[index]

    def runs_here(self, index: DeviceKey) -> bool | None:
        """Whether the last `reading(index, pid)` found that pid among the GPU's compute
        processes; None when NVML could not list them (or no reading was taken)."""
        return self._runs_here.get(index)

    # --- dynamic readings -----------------------------------------------------------------
    def utilization(self, index: DeviceKey) -> tuple[float | None, float | None]:
        """(GPU, memory controller) utilization in percent since the last call.

        Averages NVML's own sample buffer (`nvmlDeviceGetSamples`) over the interval; falls
        back to the single reading of `nvmlDeviceGetUtilizationRates`.
        """
        handle = self.handle(index)
        if handle is None:
            return None, None
        gpu = self._sampled_mean(index, handle, GPU_UTILIZATION_SAMPLES)
        memory = self._sampled_mean(index, handle, MEMORY_UTILIZATION_SAMPLES)
        if gpu is None or memory is None:
            rates = self.call("nvmlDeviceGetUtilizationRates", handle)
            if rates is not None:
                gpu = float(rates.gpu) if gpu is None else gpu
                memory = float(rates.memory) if memory is None else memory
        return gpu, memory

    def _sampled_mean(self, index: DeviceKey, handle: Any, kind: int) -> float | None:
        key = (index, kind)
        result = self.call("nvmlDeviceGetSamples", handle, kind, self._last_sample_us.get(key, 0))
        if not result:
            return None
        _, samples = result
        if not samples:
            return None
        self._last_sample_us[key] = max(int(s.timeStamp) for s in samples)
        return sum(float(s.sampleValue.uiVal) for s in samples) / len(samples)

    def reading(self, index: DeviceKey, pid: int) -> dict[str, Any]:
        """One snapshot of a GPU's (or MIG device's) dynamic fields, in wire units (see
        docs/protocol.md). A MIG device answers for its own memory and processes; NVML has
        no utilization, power, clocks or temperature of one (they are the whole GPU's)."""
        handle = self.handle(index)
        if handle is None:
            return {}
        util, mem_util = self.utilization(index)
        memory = self.call("nvmlDeviceGetMemoryInfo", handle)
        power_mw = self.call("nvmlDeviceGetPowerUsage", handle)
        limit_mw = self.call("nvmlDeviceGetEnforcedPowerLimit", handle)
        tx_kbs = self.call("nvmlDeviceGetPcieThroughput", handle, PCIE_TX)
        rx_kbs = self.call("nvmlDeviceGetPcieThroughput", handle, PCIE_RX)
        processes = self._processes(index, handle, pid)
        own = [p.usedGpuMemory for p in processes or [] if p.pid == pid and p.usedGpuMemory]
        return {
            "util": util,
            "mem_util": mem_util,
            "mem_used": int(memory.used) if memory is not None else None,
            "mem_total": int(memory.total) if memory is not None else None,
            "proc_mem": sum(own) if processes is not None else None,
            "temp_c": self.call("nvmlDeviceGetTemperature", handle, TEMPERATURE_GPU),
            "power_w": power_mw / 1000 if power_mw is not None else None,
            "power_limit_w": limit_mw / 1000 if limit_mw is not None else None,
            "sm_clock_mhz": self.call("nvmlDeviceGetClockInfo", handle, CLOCK_SM),
            "throttle": self.call("nvmlDeviceGetCurrentClocksEventReasons", handle),
            "pcie_tx_bps": tx_kbs * 1024 if tx_kbs is not None else None,
            "pcie_rx_bps": rx_kbs * 1024 if rx_kbs is not None else None,
        }


@dataclass
class Devices:
    """The GPUs and MIG devices this process may use, as Stoker chooses them (see
    `find_devices`), and those NVML would not give."""

    keys: list[DeviceKey]  # readable GPUs (NVML indices) and MIG devices (UUIDs), in order
    refused: dict[DeviceKey, str]  # a device NVML will not give → its error class name
    mig_unlisted: dict[int, str]  # a GPU in MIG mode whose MIG devices NVML will not list

    def in_use(self, used: set[DeviceKey], *, all_gpus: bool = False) -> list[DeviceKey]:
        """The devices a run samples: those NVML's process list showed this process on
        (`used`); until it shows any, every GPU and the first MIG device (CUDA enumerates
        one MIG device per process); every device with `all_gpus`."""
        if all_gpus:
            return list(self.keys)
        if used:
            return [k for k in self.keys if k in used]
        migs = [k for k in self.keys if isinstance(k, str)]
        return [k for k in self.keys if isinstance(k, int) or k == migs[0]]


def find_devices(nvml: Nvml, *, all_gpus: bool = False) -> Devices:
    """The devices `CUDA_VISIBLE_DEVICES` leaves this process (every GPU without it, or with
    `all_gpus`): a MIG device it names stands for itself (the first: CUDA enumerates one), a
    GPU in MIG mode for its MIG devices (the whole GPU where NVML will not list them)."""
    found = Devices([], {}, {})
    named = nvml.visible_mig_uuids()
    if named and not all_gpus:
        candidates: list[DeviceKey] = [named[0]]
    else:
        candidates = list(nvml.visible_indices(all_gpus=all_gpus))
    for key in candidates:
        if nvml.handle(key) is None:
            function = (
                "nvmlDeviceGetHandleByUUID"
                if isinstance(key, str)
                else "nvmlDeviceGetHandleByIndex"
            )
            found.refused[key] = nvml.last_error(function) or ""
            continue
        if isinstance(key, str):
            found.keys.append(key)
            continue
        migs = nvml.mig_devices(key)
        error = nvml.last_error("nvmlDeviceGetMigDeviceHandleByIndex")
        if not migs and error is not None and error != "NVMLError_NotFound":
            found.mig_unlisted[key] = error
        found.keys.extend(migs or [key])
    return found


def devices_in_use(nvml: Nvml, *, all_gpus: bool = False) -> tuple[list[DeviceKey], Devices]:
    """The devices a run in this process samples now (`Devices.in_use` after one look at
    NVML's process lists), and all that `find_devices` found."""
    found = find_devices(nvml, all_gpus=all_gpus)
    pid = os.getpid()
    used = {key for key in found.keys if nvml.check_processes(key, pid)}
    return found.in_use(used, all_gpus=all_gpus), found


def said(error: str | None) -> str:
    """An NVML error class name in words: `NVMLError_NoPermission` → "no permission"."""
    if not error:
        return "no answer"
    name = error.removeprefix("NVMLError_")
    return "no permission" if name == "NoPermission" else name


_shared: Nvml | None = None
_shared_lock = threading.Lock()


def shared_nvml() -> Nvml:
    """The process-wide NVML chokepoint (NVML is initialized at most once per process)."""
    global _shared
    with _shared_lock:
        if _shared is None:
            _shared = Nvml()
        return _shared
