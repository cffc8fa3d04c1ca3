"""A GPU's energy over a run: NVML's counter, or power integrated where the counter is missing.

`nvmlDeviceGetTotalEnergyConsumption` gives millijoules since the driver loaded (Volta and
newer). The run's energy on a GPU is that counter minus its value at the run's first
reading. Where the driver has no counter (older GPUs, some virtual GPUs), or it stops
answering, the power readings are integrated instead (trapezoids between readings) and every
row says so (`energy_integrated`). A counter that goes backwards (the driver reloaded)
starts a new base, so the run's total never decreases.
"""

import time
from collections.abc import Callable

from trainer_agent.telemetry.nvml import DeviceKey, Nvml

ENERGY_FIELDS = ("energy_j", "energy_integrated")


class EnergyMeter:
    """Joules one GPU drew since the run's first reading."""

    def __init__(
        self, nvml: Nvml, index: DeviceKey, *, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self.nvml = nvml
        self.index = index
        self._clock = clock
        self._counter_works = True
        self._last_counter_mj: int | None = None
        self.total_j: float | None = None
        self._last_power: tuple[float, float] | None = None  # (monotonic s, watts)

    def read(self, power_w: float | None) -> dict[str, float | bool | None]:
        """The run's energy so far on this GPU, given this reading's power (W, or None)."""
        now = self._clock()
        counter = None
        if self._counter_works:
            handle = self.nvml.handle(self.index)
            counter = (
                self.nvml.call("nvmlDeviceGetTotalEnergyConsumption", handle)
                if handle is not None
                else None
            )
            if counter is None:
                self._counter_works = False  # integrate from here on
        integrated = counter is None
        if counter is not None:
            counter = int(counter)
            if self._last_counter_mj is None:
                self.total_j = self.total_j or 0.0
            elif counter >= self._last_counter_mj:
                self.total_j = (self.total_j or 0.0) + (counter - self._last_counter_mj) / 1000
            self._last_counter_mj = counter
        elif power_w is not None and self._last_power is not None:
            then, watts = self._last_power
            self.total_j = (self.total_j or 0.0) + (now - then) * (watts + power_w) / 2
        elif power_w is not None and self.total_j is None:
            self.total_j = 0.0
        if power_w is not None:
            self._last_power = (now, float(power_w))
        return {
            "energy_j": self.total_j,
            "energy_integrated": integrated if self.total_j is not None else None,
        }
