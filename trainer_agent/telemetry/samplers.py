"""The sampler thread: GPU readings through NVML and host readings through psutil, on a timer.

Each run's `Sampler` wakes every `interval_s` on a drift-free `time.monotonic` schedule (a
late wake-up skips the missed ticks instead of bursting) and appends one row per GPU and one
host row to its run's recorder. One named thread per process (`stoker-sampler`) runs every
open run's sampler and sleeps in `Condition.wait` the rest of the time: a run that starts
adds its sampler to that thread instead of starting a thread of its own (a thread start
costs the training thread 1-3 ms while the new thread takes the GIL, at every `fit()`).
No driver: one warning, and host rows still flow.
"""

import logging
import os
import sys
import threading
import time
from collections.abc import Callable
from typing import Any

from trainer_agent.capture.pipeline_model import PipelineSource
from trainer_agent.capture.recorder import Recorder
from trainer_agent.log_once import warn_once
from trainer_agent.telemetry.gpu_extras import EXTRA_FIELDS, DeviceExtras, say_why_no_gpu
from trainer_agent.telemetry.nvml import DeviceKey, Devices, Nvml, find_devices, said

log = logging.getLogger("trainer_agent")

MIN_INTERVAL_S = 0.1
# CPU percentages over a shorter interval than this are noise (the first tick comes right
# after the start); they are sent as null.
MIN_CPU_INTERVAL_S = MIN_INTERVAL_S / 2
DEVICE_FIELDS = (
    "util", "mem_util", "mem_used", "mem_total", "proc_mem", "tf_mem_current", "tf_mem_peak",
    "temp_c", "power_w", "power_limit_w", "sm_clock_mhz", "throttle", "pcie_tx_bps",
    "pcie_rx_bps", *EXTRA_FIELDS,
)  # fmt: skip


def tf_memory_info(logical_index: int) -> tuple[int | None, int | None]:
    """TensorFlow's allocator (current, peak) bytes on `GPU:<i>`, when TF already runs on GPUs.

    Never imports TensorFlow and never initializes its runtime (that would break a later
    `set_memory_growth` in the user's code).
    """
    tf = sys.modules.get("tensorflow")
    if tf is None:
        return None, None
    try:
        from tensorflow.python.eager import context

        if context.context()._context_handle is None:  # runtime not initialized yet
            return None, None
        info = tf.config.experimental.get_memory_info(f"GPU:{logical_index}")
        return int(info["current"]), int(info["peak"])
    except Exception:
        return None, None


class DeviceSource:
    """One row per GPU (or MIG device) this process uses (or every GPU with `all_gpus`).

    The devices are those `CUDA_VISIBLE_DEVICES` leaves this process (all without it): a GPU
    in MIG mode stands for its MIG devices, and a MIG device that variable names stands for
    itself (CUDA enumerates one MIG device per process: the first named). Once NVML's process
    list shows this process on some of them, only those get rows: a framework creates its
    context on a device only when it starts using it, so until then (and where the list never
    shows this pid, as in a container with its own pid namespace) every visible GPU, and the
    first MIG device, get rows. A MIG device's rows carry its parent GPU's index. A device
    NVML will not give (NoPermission) is said once and left out.
    """

    def __init__(
        self,
        nvml: Nvml,
        *,
        all_gpus: bool = False,
        tf_memory: Callable[[int], tuple[int | None, int | None]] = tf_memory_info,
    ) -> None:
        self.nvml = nvml
        self._all_gpus = all_gpus
        self._tf_memory = tf_memory
        self._keys: list[DeviceKey] | None = None
        self._found: Devices | None = None
        self._used: set[DeviceKey] = set()  # devices the process list showed this process on
        self._extras: DeviceExtras | None = None
        self._pid = os.getpid()

    def start(self) -> bool:
        """Find the devices; False (after one warning) when NVML is not usable."""
        if not self.nvml.available():
            self.nvml.warn_unavailable_once()
            return False
        self._keys = self._find_devices()
        if not self._keys:
            say_why_no_gpu(self.nvml)
        self._extras = DeviceExtras(self.nvml, self._keys)
        return True

    def _find_devices(self) -> list[DeviceKey]:
        found = find_devices(self.nvml, all_gpus=self._all_gpus)
        for key, error in found.refused.items():
            what = f"MIG device {key}" if isinstance(key, str) else f"GPU {key}"
            warn_once(
                f"no-handle-{key}",
                "Stoker: NVML will not read %s (%s); it gets no rows, training goes on",
                what,
                said(error),
            )
        for index, error in found.mig_unlisted.items():
            warn_once(
                f"mig-{index}",
                "Stoker: GPU %d is in MIG mode and NVML will not give its MIG devices (%s); "
                "it gets whole-GPU rows",
                index,
                said(error),
            )
        self._found = found
        return found.keys

    @property
    def indices(self) -> list[DeviceKey]:
        """The devices that get rows now (GPU indices, MIG device UUIDs)."""
        if self._found is None:
            return []
        return self._found.in_use(self._used, all_gpus=self._all_gpus)

    def sample(self, t: float, recorder: Recorder, *, close_gpm: bool = True) -> None:
        """One row per device; `close_gpm=False` leaves the GPM window open (its fields null)."""
        shown = set(self.indices)
        readings: list[tuple[int, DeviceKey, dict[str, Any]]] = []
        for logical, key in enumerate(self._keys or []):
            if key in shown:
                reading = self.nvml.reading(key, self._pid)
                if reading:
                    readings.append((logical, key, reading))
            else:  # unused so far: only whether this process starts using it
                self.nvml.check_processes(key, self._pid)
        self._note_processes()
        shown = set(self.indices)
        for logical, key, reading in readings:
            index = self.nvml.parent_index(key)
            if key not in shown or index is None:
                continue
            reading["tf_mem_current"], reading["tf_mem_peak"] = self._tf_memory(
                0 if isinstance(key, str) else logical
            )
            if self._extras is not None:
                reading.update(self._extras.read(key, reading.get("power_w"), close_gpm=close_gpm))
            recorder.device.append(t, index, *(reading.get(name) for name in DEVICE_FIELDS))

    def _note_processes(self) -> None:
        seen = {k for k in self._keys or [] if self.nvml.runs_here(k)}
        if seen - self._used:
            self._used |= seen
            others = [k for k in self._keys or [] if k not in self._used]
            if others and not self._all_gpus:
                log.info(
                    "Stoker: this process runs on %s; %s (visible, unused) get no rows",
                    _devices(sorted(self._used, key=str)),
                    _devices(others),
                )


def _devices(keys: list[DeviceKey]) -> str:
    gpus = [str(k) for k in keys if isinstance(k, int)]
    migs = [k for k in keys if isinstance(k, str)]
    words = [f"GPU {', '.join(gpus)}"] if gpus else []
    if migs:
        words.append(f"MIG device {', '.join(migs)}")
    return " and ".join(words)


class HostSource:
    """Process and system CPU (percent of the whole machine), process RSS, host memory."""

    def __init__(self) -> None:
        import psutil

        self._psutil = psutil
        self._process = _this_process(psutil)
        self._cpus = psutil.cpu_count() or 1
        # The process's CPU time from the C library costs a microsecond, where psutil's
        # `Process.cpu_percent` parses /proc (about 70 µs a tick).
        self._cpu_s = time.process_time()
        self._cpu_at = time.monotonic()
        # The first cpu_percent(None) call only starts the measurement interval.
        psutil.cpu_percent(None)

    def _cpu_percents(self) -> tuple[float | None, float | None]:
        """(process, system) CPU percent since the last reading, or None for both."""
        cpu_s, at = time.process_time(), time.monotonic()
        elapsed_s = at - self._cpu_at
        if elapsed_s < MIN_CPU_INTERVAL_S:
            return None, None
        process = (cpu_s - self._cpu_s) / elapsed_s / self._cpus * 100
        self._cpu_s, self._cpu_at = cpu_s, at
        return min(100.0, process), self._psutil.cpu_percent(None)

    def sample(self, t: float, recorder: Recorder) -> None:
        proc_cpu, sys_cpu = self._cpu_percents()
        rss = self._process.memory_info().rss
        memory = self._psutil.virtual_memory()
        recorder.host.append(t, proc_cpu, sys_cpu, rss, memory.used, memory.total)


class Sampler:
    """Runs the sources every `interval_s` on the process's `stoker-sampler` thread."""

    def __init__(
        self,
        recorder: Recorder,
        *,
        interval_s: float = 1.0,
        device: DeviceSource | None = None,
        host: HostSource | None = None,
        pipeline: PipelineSource | None = None,
        clock: Callable[[], float] = time.time,
        make_host: Callable[[], HostSource] | None = None,
    ) -> None:
        self._recorder = recorder
        self.interval_s = max(MIN_INTERVAL_S, float(interval_s))
        self._device = device
        self._device_started = device is None
        self._host = host
        # Made by the first reading, on the sampler thread, not on the thread that starts
        # the run (psutil reads /proc: ~0.2 ms of a fit's start on the training thread).
        self._make_host = make_host
        self.pipeline = pipeline  # reads on its own, slower interval
        self._clock = clock
        self._closed = False
        # Steps longer than the interval: the last such step's length and when the sampler
        # thread last took a reading at a step's end (monotonic), to line GPM windows up.
        self._long_step_s = 0.0
        self._boundary_at: float | None = None

    def start(self) -> None:
        _shared_thread().add(self)

    def close(self, timeout_s: float = 2.0) -> None:
        """Stop sampling after one last reading (taken on the sampler thread; given up after
        `timeout_s` when that thread is stuck, e.g. in a driver call)."""
        if self._closed:
            return
        self._closed = True
        _shared_thread().finish(self, timeout_s)

    def step_ended(self, duration_s: float) -> None:
        """A step was recorded (on the training thread). Where steps outlast the interval, a
        GPM window of one interval would hold part of a step (its input wait, or its
        compute): the sampler thread then takes a reading at once, closing the GPM window
        at the step's end, and the timed readings in between leave it open, so each window
        spans whole steps."""
        if duration_s < self.interval_s or self._closed:
            if self._long_step_s:  # steps are short again (after a long first step, say)
                self._long_step_s = 0.0
            return
        self._long_step_s = duration_s
        _shared_thread().step_boundary(self)

    def tick(self, *, boundary: bool = False) -> None:
        """One reading; on the sampler thread (the first one finds the GPUs)."""
        try:
            if not self._device_started:
                self._device_started = True
                if self._device is not None and not self._device.start():
                    self._device = None
            if self._make_host is not None:
                make, self._make_host = self._make_host, None
                try:
                    self._host = make()
                except Exception as error:  # psutil missing or refused
                    log.warning("Stoker: host metrics are off (%s)", error)
            now = time.monotonic()
            if boundary:
                self._boundary_at = now
            # Steps still longer than the interval (the next boundary is due): only a step's
            # end closes the window; otherwise every reading does.
            aligned = (
                self._long_step_s > 0
                and self._boundary_at is not None
                and now - self._boundary_at <= 2 * self._long_step_s + self.interval_s
            )
            self.sample_once(close_gpm=boundary or not aligned)
        except Exception:
            log.exception("Stoker sampler failed; training continues without device metrics")

    def sample_once(self, *, close_gpm: bool = True) -> None:
        t = self._clock()
        for source in (self._device, self._host, self.pipeline):
            if source is None:
                continue
            try:
                if source is self._device:
                    self._device.sample(t, self._recorder, close_gpm=close_gpm)
                else:
                    source.sample(t, self._recorder)
            except Exception:
                log.debug("sampling failed", exc_info=True)


class _SamplerThread:
    """The one thread that runs every open run's `Sampler`, each on its own schedule."""

    def __init__(self) -> None:
        self._changed = threading.Condition()
        self._next_tick: dict[Sampler, float] = {}
        # Samplers to take a last reading of and drop, with the event their `close` waits on.
        self._finishing: list[tuple[Sampler, threading.Event]] = []
        # Samplers whose run just ended a step longer than their interval: a reading now.
        self._boundaries: set[Sampler] = set()
        self._thread = threading.Thread(target=self._run, name="stoker-sampler", daemon=True)
        self._thread.start()

    @property
    def alive(self) -> bool:
        return self._thread.is_alive()

    def add(self, sampler: Sampler) -> None:
        with self._changed:
            self._next_tick[sampler] = time.monotonic()  # the first reading right away
            self._changed.notify()

    def step_boundary(self, sampler: Sampler) -> None:
        with self._changed:
            if sampler in self._next_tick:
                self._boundaries.add(sampler)
                self._changed.notify()

    def finish(self, sampler: Sampler, timeout_s: float) -> None:
        done = threading.Event()
        with self._changed:
            if self._next_tick.pop(sampler, None) is None:
                return  # never started
            self._finishing.append((sampler, done))
            self._changed.notify()
        done.wait(timeout_s)

    def _run(self) -> None:
        while True:
            with self._changed:
                now = time.monotonic()
                finishing, self._finishing = self._finishing, []
                boundaries, self._boundaries = self._boundaries, set()
                due = [s for s, at in self._next_tick.items() if at <= now or s in boundaries]
                if not finishing and not due:
                    wake = min(self._next_tick.values(), default=None)
                    self._changed.wait(None if wake is None else wake - now)
                    continue
            for sampler, done in finishing:
                sampler.tick()  # a last reading at the end of the run
                done.set()
            for sampler in due:
                sampler.tick(boundary=sampler in boundaries)
            now = time.monotonic()
            with self._changed:
                for sampler in due:
                    at = self._next_tick.get(sampler)
                    if at is None:
                        continue  # closed meanwhile
                    # A reading at a step's end sets the schedule's phase: the next timed
                    # reading comes one interval after it.
                    at = now if sampler in boundaries else at
                    at += sampler.interval_s
                    if at < now:  # late (suspended, overloaded): skip, do not burst
                        at = now + sampler.interval_s
                    self._next_tick[sampler] = at


_shared_lock = threading.Lock()
_shared: tuple[int, _SamplerThread] | None = None


def _shared_thread() -> _SamplerThread:
    """The process's sampler thread, started at its first use (again in a forked child)."""
    global _shared
    with _shared_lock:
        if _shared is None or _shared[0] != os.getpid() or not _shared[1].alive:
            _shared = (os.getpid(), _SamplerThread())
        return _shared[1]


def _forget_shared_thread() -> None:
    """In a forked child: the parent's thread is not there, and its lock may be held."""
    global _shared, _shared_lock
    _shared, _shared_lock = None, threading.Lock()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_forget_shared_thread)

_processes: dict[int, object] = {}


def _this_process(psutil: Any) -> Any:
    """psutil's handle of this process, made once per process (it reads /proc to make it)."""
    pid = os.getpid()
    process = _processes.get(pid)
    if process is None:
        process = _processes[pid] = psutil.Process(pid)
    return process
