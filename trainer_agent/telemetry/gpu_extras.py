"""What a device row gains beyond `Nvml.reading`: GPM metrics and the run's energy.

`DeviceExtras` is made by the sampler's `DeviceSource` when it finds the GPUs (on the sampler
thread) and read once per GPU per tick. GPM readers are kept per process and device, not per
run: a `fit()` per epoch would otherwise allocate (and leave behind) two GPM samples per GPU
each time, and a new reader's first window would start at the run's start; energy meters are
per run (a run's energy starts at its first reading).

Also here: saying once that this process was given no GPU (`NVIDIA_VISIBLE_DEVICES=void` in
a container, `CUDA_VISIBLE_DEVICES` hiding every GPU), so a run without GPU rows says why.
"""

import logging
import os
import threading
import weakref

from trainer_agent.log_once import warn_once
from trainer_agent.telemetry.energy import ENERGY_FIELDS, EnergyMeter
from trainer_agent.telemetry.gpm import GPM_FIELDS, GpmReader
from trainer_agent.telemetry.nvml import DeviceKey, Nvml

log = logging.getLogger("trainer_agent")

EXTRA_FIELDS = GPM_FIELDS + ENERGY_FIELDS

# NVML chokepoint → (pid, device) → reader; weak, so a chokepoint's readers go with it.
_readers: "weakref.WeakKeyDictionary[Nvml, dict[tuple[int, DeviceKey], GpmReader]]" = (
    weakref.WeakKeyDictionary()
)
_readers_lock = threading.Lock()


def gpm_reader(nvml: Nvml, index: DeviceKey) -> GpmReader:
    """The process's GPM reader of one GPU or MIG device, started at its first use."""
    key = (os.getpid(), index)
    with _readers_lock:
        readers = _readers.setdefault(nvml, {})
        reader = readers.get(key)
        if reader is None:
            reader = readers[key] = GpmReader(nvml, index)
            if not reader.start() and reader.reason:
                log.debug("Stoker: GPU %s has no GPM figures: %s", index, reader.reason)
        return reader


class DeviceExtras:
    """GPM and energy fields of each GPU a run samples."""

    def __init__(self, nvml: Nvml, indices: list[DeviceKey]) -> None:
        self.nvml = nvml
        self._gpm = {index: gpm_reader(nvml, index) for index in indices}
        self._energy = {index: EnergyMeter(nvml, index) for index in indices}

    def read(
        self, index: DeviceKey, power_w: float | None, *, close_gpm: bool = True
    ) -> dict[str, float | bool | None]:
        """GPM over the window since the last closed one (null with `close_gpm` False: the
        window stays open) and the run's energy so far."""
        reader = self._gpm.get(index)
        values: dict[str, float | bool | None] = (
            dict(reader.read()) if reader is not None and close_gpm else dict.fromkeys(GPM_FIELDS)
        )
        meter = self._energy.get(index)
        if meter is not None:
            values.update(meter.read(power_w))
        else:
            values.update(dict.fromkeys(ENERGY_FIELDS))
        return values


def say_why_no_gpu(nvml: Nvml) -> None:
    """One line, once per process, when NVML works but this process was given no GPU."""
    nvidia = os.environ.get("NVIDIA_VISIBLE_DEVICES")
    cuda = os.environ.get("CUDA_VISIBLE_DEVICES")
    if nvidia is not None and nvidia.strip().lower() in ("void", "none", ""):
        why = f"NVIDIA_VISIBLE_DEVICES={nvidia!r}: this container was given no GPU"
    elif cuda is not None and cuda.strip().startswith("MIG-"):
        return  # the sampler said why it cannot read that MIG device
    elif cuda is not None and nvml.device_count() > 0:
        why = f"CUDA_VISIBLE_DEVICES={cuda!r} hides every GPU from this process"
    elif nvml.device_count() == 0:
        why = "NVML sees no GPU"
    else:
        return
    warn_once("no-gpu", "Stoker: %s; no GPU rows (host rows and step timing still flow)", why)
