"""One command that checks Stoker on a real NVIDIA GPU, or on the CPU against the
fake NVML (`--fake`, what CI runs).

No TensorFlow: the agent's `Monitor` is driven from a PyTorch loop (on the GPU) or a plain
Python loop (with `--fake`). Sections, each printed as a table and judged PASS/FAIL:

1. NVML readings: Stoker's sampler (`Nvml.reading`, the code every device row comes from)
   against `nvidia-smi --query-gpu` at the same moments (utilization, memory used, power,
   temperature, SM clock). With `--fake` the fake's scripted values stand in for nvidia-smi.
2. GPM plausibility: an idle GPU, a large bf16 matmul loop and a device-to-device copy loop,
   each read by Stoker's `GpmReader` over the phase: tensor activity must be high only for
   the matmul, DRAM bandwidth high for the copy. Skipped (said so) without GPM.
3. Starvation truth: one run of a model of a few ms a step, first fed by a loader that
   sleeps per batch, then fed from GPU memory. Stoker's measured input-wait share of the
   starved phase against (period starved - period fed) / period starved, and NVML
   utilization dropping accordingly.
4. The default "utilization below 70 %" rule (a shorter `for`) firing during the starved
   phase and resolving after it.
5. Energy per phase on that run (Stoker's `energy_j` between the first and last readings
   inside each phase against NVML's power integrated over them, or the fake's scripted power
   x time), and the run's energy burned while starved from GET /runs/{id}/energy.
6. The agent's cost at GPU speed: steps/s of a 1-2 ms step with and without `Monitor`,
   paired rounds.

The server runs here (`stoker serve` on a free loopback port, fast detector settings) when
its packages are installed, or `--server URL` names one; without one, sections 3-5 are
skipped and the agent spools (`stoker upload` sends the runs later). Exit status 1 when a
check fails. Target: at most 8 minutes on an H100; about a minute with `--fake`.

Usage: python -m bench.gpu_check [--fake] [--server URL | --no-server] [--quick]
"""

import argparse
import contextlib
import csv
import io
import itertools
import json
import os
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent

GIB = 2**30
FAKE_GPU = {
    "name": "NVIDIA H100 80GB HBM3 (fake)", "cc_major": 9, "cc_minor": 0, "gpm": 1,
    "mem_total": 80 * GIB, "mem_used": 2 * GIB, "power_limit_mw": 700_000,
}  # fmt: skip
# What the fake GPU reports in each phase (GPM metric ids: 2 SM, 3 occupancy, 5 tensor,
# 10 DRAM bandwidth, 12 FP32, 13 FP16).
FAKE_PHASES: dict[str, dict[str, Any]] = {
    "idle": {"util": 0, "power_mw": 70_000, "temp_c": 34, "sm_clock": 345,
             "gpm2": 0.2, "gpm3": 0.1, "gpm5": 0.0, "gpm10": 0.3, "gpm12": 0.0, "gpm13": 0.0},
    "matmul": {"util": 100, "power_mw": 650_000, "temp_c": 61, "sm_clock": 1980,
               "gpm2": 96.0, "gpm3": 24.0, "gpm5": 71.0, "gpm10": 28.0, "gpm12": 1.0,
               "gpm13": 0.5},
    "copy": {"util": 100, "power_mw": 420_000, "temp_c": 55, "sm_clock": 1980,
             "gpm2": 35.0, "gpm3": 30.0, "gpm5": 0.0, "gpm10": 88.0, "gpm12": 0.1,
             "gpm13": 0.0},
    "starved": {"util": 31, "power_mw": 150_000, "temp_c": 45, "sm_clock": 1980,
                "gpm2": 20.0, "gpm3": 10.0, "gpm5": 9.0, "gpm10": 6.0},
    "fed": {"util": 97, "power_mw": 480_000, "temp_c": 58, "sm_clock": 1980,
            "gpm2": 70.0, "gpm3": 30.0, "gpm5": 35.0, "gpm10": 25.0},
}  # fmt: skip


# --- reporting ----------------------------------------------------------------------------
@dataclass
class Report:
    results: list[tuple[str, str, str]] = field(default_factory=list)  # (section, verdict, text)
    started: float = field(default_factory=time.monotonic)

    def check(self, section: str, ok: bool, text: str) -> bool:
        self.results.append((section, "PASS" if ok else "FAIL", text))
        print(f"  [{'PASS' if ok else 'FAIL'}] {text}", flush=True)
        return ok

    def info(self, section: str, text: str) -> None:
        self.results.append((section, "INFO", text))
        print(f"  [INFO] {text}", flush=True)

    def skip(self, section: str, text: str) -> None:
        self.results.append((section, "SKIP", text))
        print(f"  [SKIP] {text}", flush=True)

    @property
    def failed(self) -> bool:
        return any(verdict == "FAIL" for _, verdict, _ in self.results)


def heading(text: str) -> None:
    print(f"\n== {text}", flush=True)


def table(header: list[str], rows: list[list[Any]]) -> None:
    cells = [header, *[[_cell(v) for v in row] for row in rows]]
    widths = [max(len(row[i]) for row in cells) for i in range(len(header))]
    for row in cells:
        print(
            "  "
            + "  ".join(
                c.rjust(w) if i else c.ljust(w)
                for i, (c, w) in enumerate(zip(row, widths, strict=True))
            )
        )


def _cell(value: Any) -> str:
    if value is None:
        return "—"
    if isinstance(value, float):
        return f"{value:.3g}" if abs(value) < 1000 else f"{value:.0f}"
    return str(value)


# --- the device: a real GPU through PyTorch, or the fake NVML and a CPU loop ----------------
class Device:
    """What each section needs from the machine."""

    fake = False

    def name(self) -> str:
        raise NotImplementedError

    def phase(self, name: str) -> None:
        """The fake scripts its GPU for this phase; a real GPU just does the work."""

    def reference(self) -> dict[str, float | None]:
        """The reference reading (nvidia-smi, or the fake's script) right now."""
        raise NotImplementedError

    def work(self, kind: str, seconds: float) -> None:
        """Keep the GPU busy with `kind` (idle, matmul, copy) for `seconds`."""
        raise NotImplementedError

    def step(self) -> Callable[[Any], Any]:
        """One training step of a few ms on a batch; returns a loss."""
        raise NotImplementedError

    def batches(self, n: int, delay_s: float) -> Iterator[Any]:
        """n batches; each arrives `delay_s` after it is asked for (0: from GPU memory)."""
        raise NotImplementedError

    def tiny_step(self) -> Callable[[], None]:
        """A 1-2 ms step for the cost measurement."""
        raise NotImplementedError

    def sync(self) -> None:
        pass


class FakeDevice(Device):
    fake = True

    def __init__(self, workdir: Path) -> None:
        from tests.harness.fake_nvml import FakeNvml, build

        library = build(workdir / "fake-nvml")
        self.fake_nvml = FakeNvml(library, workdir / "nvml-control.txt")
        self.current: dict[str, Any] = {}
        self.loader_s = 0.0  # the time the starving loader spent producing batches
        self.phase("idle")
        self.fake_nvml.preload()
        os.environ.update(self.fake_nvml.env())
        os.environ.pop("CUDA_VISIBLE_DEVICES", None)

    def name(self) -> str:
        return f"{FAKE_GPU['name']} on the CPU (fake libnvidia-ml.so.1, real nvidia-ml-py)"

    def phase(self, name: str) -> None:
        self.current = {**FAKE_GPU, **FAKE_PHASES[name], "proc_pid": os.getpid(),
                        "proc_mem": 1 * GIB}  # fmt: skip
        self.fake_nvml.write(gpu0=self.current)

    def reference(self) -> dict[str, float | None]:
        c = self.current
        return {
            "util": float(c["util"]), "mem_used": float(c["mem_used"]),
            "power_w": c["power_mw"] / 1000, "temp_c": float(c["temp_c"]),
            "sm_clock_mhz": float(c["sm_clock"]),
        }  # fmt: skip

    def work(self, kind: str, seconds: float) -> None:
        self.phase(kind)
        end = time.monotonic() + seconds
        while time.monotonic() < end:
            time.sleep(0.01)

    # Busy waits, not sleeps: on a loaded machine every wake-up from a sleep waits for a core,
    # a fixed delay per sleep that would make the starved phase's steps (two sleeps) slower
    # than the fed phase's (one) and bias the truth; time-slicing a busy thread stretches
    # both phases alike.
    def step(self) -> Callable[[Any], Any]:
        def run(batch: Any) -> float:
            _busy(0.003)  # the device computing
            return 1.0

        return run

    def batches(self, n: int, delay_s: float) -> Iterator[Any]:
        for i in range(n):
            if delay_s:
                started = time.perf_counter()
                _busy(delay_s)  # a slow decoder
                self.loader_s += time.perf_counter() - started
            yield i

    def tiny_step(self) -> Callable[[], None]:
        def run() -> None:
            time.sleep(0.0015)  # the training thread waits for the GPU, as in synchronize()

        return run


def _busy(seconds: float) -> None:
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        pass


class TorchDevice(Device):
    def __init__(self) -> None:
        import torch

        if not torch.cuda.is_available():
            raise SystemExit("gpu_check: PyTorch sees no CUDA GPU (use --fake on a CPU machine)")
        self.torch = torch
        self.dev = torch.device("cuda:0")
        torch.backends.cuda.matmul.allow_tf32 = False
        self.big_a = torch.randn(8192, 8192, device=self.dev, dtype=torch.bfloat16)
        self.big_b = torch.randn(8192, 8192, device=self.dev, dtype=torch.bfloat16)
        self.copy_src = torch.empty(2 * GIB // 4, device=self.dev, dtype=torch.float32)
        self.copy_dst = torch.empty_like(self.copy_src)
        self.w = torch.randn(4096, 4096, device=self.dev)
        self.x_gpu = torch.randn(512, 4096, device=self.dev)
        self.x_cpu = torch.randn(512, 4096).pin_memory()
        self.small = torch.randn(1024, 1024, device=self.dev)

    def name(self) -> str:
        return self.torch.cuda.get_device_name(0)

    def reference(self) -> dict[str, float | None]:
        query = "utilization.gpu,memory.used,power.draw,temperature.gpu,clocks.sm"
        index = os.environ.get("CUDA_VISIBLE_DEVICES", "0").split(",")[0] or "0"
        out = subprocess.run(
            ["nvidia-smi", f"--query-gpu={query}", "--format=csv,noheader,nounits", "-i", index],
            capture_output=True, text=True, timeout=10, check=True,
        ).stdout.strip()  # fmt: skip
        util, mem, power, temp, clock = (_float(v) for v in out.split(","))
        return {
            "util": util, "mem_used": None if mem is None else mem * 2**20, "power_w": power,
            "temp_c": temp, "sm_clock_mhz": clock,
        }  # fmt: skip

    def work(self, kind: str, seconds: float) -> None:
        end = time.monotonic() + seconds
        torch = self.torch
        while time.monotonic() < end:
            if kind == "matmul":
                for _ in range(8):
                    torch.matmul(self.big_a, self.big_b)
            elif kind == "copy":
                for _ in range(8):
                    self.copy_dst.copy_(self.copy_src)
            else:
                time.sleep(0.05)
            torch.cuda.synchronize()

    def step(self) -> Callable[[Any], Any]:
        torch = self.torch

        def run(batch: Any) -> Any:
            h = torch.relu(batch @ self.w)
            for _ in range(6):
                h = torch.relu(h @ self.w)
            return h.mean()

        return run

    def batches(self, n: int, delay_s: float) -> Iterator[Any]:
        if not delay_s:
            for _ in range(n):
                yield self.x_gpu
            return
        from torch.utils.data import DataLoader, Dataset

        x_cpu = self.x_cpu

        class Sleepy(Dataset):
            def __len__(self) -> int:
                return n

            def __getitem__(self, i: int) -> Any:
                time.sleep(delay_s)  # a slow decoder
                return x_cpu

        for batch in DataLoader(Sleepy(), batch_size=None, num_workers=0):
            yield batch.to(self.dev, non_blocking=True)

    def tiny_step(self) -> Callable[[], None]:
        torch = self.torch

        def run() -> None:
            h = self.small
            for _ in range(20):
                h = torch.tanh(h @ self.small)
            torch.cuda.synchronize()

        return run

    def sync(self) -> None:
        self.torch.cuda.synchronize()


def _float(text: str) -> float | None:
    try:
        return float(text.strip())
    except ValueError:
        return None


# --- the server --------------------------------------------------------------------------
class Server:
    def __init__(self, url: str | None, workdir: Path) -> None:
        self.process: subprocess.Popen[bytes] | None = None
        self.url = url
        self.workdir = workdir

    def start(self) -> str | None:
        """The server's URL, starting one here when none was given; None when it cannot run."""
        if self.url:
            return self.url
        try:
            import fastapi  # noqa: F401
            import sqlmodel  # noqa: F401
            import uvicorn  # noqa: F401
        except ImportError:
            return None
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        env = {
            **os.environ, "STOKER_DETECTOR_TICK_S": "0.2", "STOKER_ALERT_VALUE_WINDOW_S": "1",
            "STOKER_ENERGY_PRICE_KWH": os.environ.get("STOKER_ENERGY_PRICE_KWH", "0.30"),
        }  # fmt: skip
        log = (self.workdir / "server.log").open("ab")
        self.process = subprocess.Popen(
            [sys.executable, "-m", "stoker_server.cli", "serve", "--port", str(port),
             "--data-dir", str(self.workdir / "server")],
            stdout=log, stderr=subprocess.STDOUT, env=env, cwd=REPO,
        )  # fmt: skip
        url = f"http://127.0.0.1:{port}"
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                return None
            with contextlib.suppress(Exception):
                if self.get(url, "/healthz") is not None:
                    self.url = url
                    return url
            time.sleep(0.2)
        return None

    @staticmethod
    def get(url: str, path: str, **params: Any) -> Any:
        import httpx

        response = httpx.get(f"{url}{path}", params=params, timeout=10)
        response.raise_for_status()
        if response.headers.get("content-type", "").startswith("application/json"):
            return response.json()
        return response.text

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=15)
            except subprocess.TimeoutExpired:
                self.process.kill()


# --- sections ----------------------------------------------------------------------------
def _visibility() -> str:
    """The variables that choose the GPUs, as set here."""
    names = ("CUDA_VISIBLE_DEVICES", "NVIDIA_VISIBLE_DEVICES")
    return "(" + ", ".join(f"{n}={os.environ.get(n)!r}" for n in names) + ")"


def nvml_readings(device: Device, report: Report, samples: int) -> None:
    heading("1. NVML readings: Stoker's sampler against nvidia-smi at the same moments")
    from trainer_agent.telemetry.nvml import shared_nvml

    nvml = shared_nvml()
    if not nvml.available():
        report.check("nvml", False, f"NVML does not load: {nvml.unavailable_reason}")
        return
    visible = nvml.visible_indices()
    if not visible:
        report.check("nvml", False, "no whole GPU visible to this process " + _visibility())
        return
    index = visible[0]
    busy = threading.Event()

    def load() -> None:
        while not busy.is_set():
            device.work("matmul", 0.2)

    if device.fake:
        device.phase("matmul")
        worker = None
    else:
        worker = threading.Thread(target=load, daemon=True)
        worker.start()
        time.sleep(1.0)
    rows, worst = (
        [],
        {"util": 0.0, "mem_used": 0.0, "power_w": 0.0, "temp_c": 0.0, "sm_clock_mhz": 0.0},
    )
    try:
        nvml.utilization(index)  # start the utilization window
        for _ in range(samples):
            time.sleep(0.5)
            ours = nvml.reading(index, os.getpid())
            ref = device.reference()
            for key in worst:
                a, b = ours.get(key), ref.get(key)
                if a is None or b is None:
                    continue
                # Memory against the GPU's size: nvidia-smi and NVML's v1 call may count
                # the driver's reserved memory differently (a few hundred MiB).
                total = float(ours.get("mem_total") or max(b, 1.0))
                scale = {"util": 100.0, "mem_used": total, "power_w": max(b, 1.0),
                         "temp_c": 1.0, "sm_clock_mhz": max(b, 1.0)}[key]  # fmt: skip
                worst[key] = max(worst[key], abs(a - b) / scale)
            rows.append([
                ours.get("util"), ref["util"], _gib(ours.get("mem_used")), _gib(ref["mem_used"]),
                ours.get("power_w"), ref["power_w"], ours.get("temp_c"), ref["temp_c"],
                ours.get("sm_clock_mhz"), ref["sm_clock_mhz"],
            ])  # fmt: skip
    finally:
        busy.set()
        if worker is not None:
            worker.join()
    table(
        ["util %", "smi", "mem GiB", "smi", "power W", "smi", "temp °C", "smi", "SM MHz", "smi"],
        rows,
    )
    # Utilization windows differ (NVML's buffer mean against nvidia-smi's last period).
    report.check(
        "nvml",
        worst["util"] <= 0.15,
        f"utilization within 15 pp (worst {worst['util'] * 100:.1f} pp)",
    )
    report.check(
        "nvml",
        worst["mem_used"] <= 0.02,
        f"memory used within 2 % of the GPU's memory (worst {worst['mem_used'] * 100:.2f} %)",
    )
    report.check(
        "nvml",
        worst["power_w"] <= 0.10,
        f"power within 10 % (worst {worst['power_w'] * 100:.1f} %)",
    )
    report.check(
        "nvml", worst["temp_c"] <= 2, f"temperature within 2 °C (worst {worst['temp_c']:.0f} °C)"
    )
    report.check(
        "nvml",
        worst["sm_clock_mhz"] <= 0.05,
        f"SM clock within 5 % (worst {worst['sm_clock_mhz'] * 100:.1f} %)",
    )


def _gib(value: float | None) -> float | None:
    return None if value is None else value / GIB


def gpm_plausibility(device: Device, report: Report, seconds: float) -> None:
    heading("2. GPM plausibility: idle, bf16 matmul loop, device-to-device copy loop")
    from trainer_agent.telemetry.gpm import GpmReader
    from trainer_agent.telemetry.nvml import shared_nvml

    nvml = shared_nvml()
    visible = nvml.visible_indices() if nvml.available() else [0]
    keys = visible or nvml.visible_mig_uuids()[:1]  # a MIG device, through its parent
    if not keys:
        report.check("gpm", False, "no GPU visible to this process " + _visibility())
        return
    reader = GpmReader(nvml, keys[0])
    if not reader.start():
        report.skip("gpm", f"no GPM on this GPU: {reader.reason}")
        return
    phases: dict[str, dict[str, float | None]] = {}
    try:
        for kind in ("idle", "matmul", "copy"):
            device.work(kind, 0.3)  # settle into the phase
            reader.read()  # the window starts here
            device.work(kind, seconds)
            phases[kind] = reader.read()
    finally:
        reader.close()
    fields = ("sm_util", "sm_occupancy", "tensor_util", "dram_bw_util", "fp16_util", "fp32_util")
    table(["phase", *fields], [[k, *(v.get(f) for f in fields)] for k, v in phases.items()])
    tensor = {k: v.get("tensor_util") or 0.0 for k, v in phases.items()}
    dram = {k: v.get("dram_bw_util") or 0.0 for k, v in phases.items()}
    report.check(
        "gpm",
        tensor["matmul"] >= 20
        and tensor["matmul"] >= 3 * max(tensor["idle"], tensor["copy"], 1.0),
        f"tensor activity high only for the matmul ({tensor['matmul']:.1f} % against idle "
        f"{tensor['idle']:.1f} %, copy {tensor['copy']:.1f} %)",
    )  # fmt: skip
    report.check(
        "gpm", dram["copy"] >= 50 and dram["copy"] >= dram["idle"] + 40,
        f"DRAM bandwidth high for the copy ({dram['copy']:.1f} % against idle "
        f"{dram['idle']:.1f} %)",
    )  # fmt: skip


@dataclass
class PhaseRun:
    run_id: int | None = None
    bounds: dict[str, tuple[float, float, int, int]] = field(default_factory=dict)  # t0, t1, steps


def starved_then_fed(
    device: Device, report: Report, server: str | None, seconds: float
) -> PhaseRun:
    heading("3-4. Starvation truth and the low-utilization rule: one run, starved by a sleeping")
    print("  loader, then fed from GPU memory")
    import trainer_agent
    from trainer_agent import Monitor

    step = device.step()
    # Calibrate: the fed step period, then a loader delay of 3x it (starved share ~ 2/3).
    t0 = time.perf_counter()
    for batch in device.batches(50, 0.0):
        step(batch)
    device.sync()
    fed_period = (time.perf_counter() - t0) / 50
    delay = max(0.003, 3 * fed_period)
    result = PhaseRun()
    name = f"gpu-check-{int(time.time())}"
    if server is not None:
        _shorten_low_util_rule(server)
    periods: dict[str, float] = {}
    loader: dict[str, float] = {}  # with --fake: the loader's own share of the phase's time
    watch = AlertWatch(server, name)
    with Monitor(run_name=name, project="gpu-check", server=server or "http://127.0.0.1:9",
                 sample_interval_s=0.1) as mon:  # fmt: skip
        step_index = 0
        for phase, phase_delay in (("starved", delay), ("fed", 0.0)):
            device.phase(phase)
            # The starved phase lasts until the rule fired (its `for` is 2 s; at most 30 s).
            longest = 30.0 if phase == "starved" and server is not None else seconds
            first = step_index
            start_wall, start = time.time(), time.perf_counter()
            loader_before = getattr(device, "loader_s", 0.0)
            n = 0
            for i, batch in enumerate(mon.iterate(device.batches(10**7, phase_delay))):
                loss = step(batch)
                if i % 50 == 49:
                    mon.log(loss=float(loss))  # a sync, as logging a loss is
                step_index += 1
                n += 1
                elapsed = time.perf_counter() - start
                if elapsed >= longest or (elapsed >= seconds and (phase == "fed" or watch.fired)):
                    break
            device.sync()
            periods[phase] = (time.perf_counter() - start) / n
            loader[phase] = (getattr(device, "loader_s", 0.0) - loader_before) / (
                time.perf_counter() - start
            )
            result.bounds[phase] = (start_wall, time.time(), first, step_index)
        device.phase("idle")
    watch.stop()
    if server is not None:
        report.check(
            "alert", watch.fired_after is not None,
            "'utilization below 70 %' firing during the starved phase"
            + (f", {watch.fired_after:.1f} s after it began" if watch.fired_after else ""),
        )  # fmt: skip
    trainer_agent.flush()
    truth = (periods["starved"] - periods["fed"]) / periods["starved"]
    print(
        f"  fed step period {fed_period * 1000:.2f} ms (calibration); "
        f"loader delay {delay * 1000:.2f} ms"
    )
    print(f"  period starved {periods['starved'] * 1000:.2f} ms, "
          f"fed {periods['fed'] * 1000:.2f} ms: "
          f"truth {truth * 100:.1f} %")  # fmt: skip
    if server is None:
        report.skip("starvation", "no server: the run is in the spool (stoker upload sends it)")
        return result
    run = _find_run(server, name)
    result.run_id = run["id"]
    measured = _phase_shares(server, run["id"], result.bounds)
    util = _phase_means(server, run["id"], result.bounds, "util")
    table(
        ["phase", "steps", "period ms", "measured wait %", "NVML util %"],
        [
            [p, b[3] - b[2], periods[p] * 1000, _pct(measured.get(p)), util.get(p)]
            for p, b in result.bounds.items()
        ],
    )  # fmt: skip
    share = measured.get("starved")
    if device.fake:
        # On a shared CPU the two phases run under different loads, so their periods do not
        # tell the truth to 5 pp; the loader's own clock, in the same phase, does.
        truth = loader["starved"]
        print(f"  the loader's own clock: {truth * 100:.1f} % of the starved phase (the truth "
              "judged with --fake; the periods' figure above is said, not judged)")  # fmt: skip
    report.check(
        "starvation", share is not None and abs(share - truth) <= 0.05,
        f"measured input wait {_pct(share)} % against truth {truth * 100:.1f} % (within 5 pp)",
    )  # fmt: skip
    fed_share = measured.get("fed")
    fed_text = f"fed phase waits {_pct(fed_share)} % (≤ 5 %)"
    if device.fake:  # on a loaded CPU, time the process sat descheduled in next() counts
        report.info("starvation", fed_text.replace(" (≤ 5 %)", ""))
    else:
        report.check("starvation", fed_share is not None and fed_share <= 0.05, fed_text)
    us, uf = util.get("starved"), util.get("fed")
    report.check(
        "starvation", us is not None and uf is not None and uf - us >= 20,
        f"NVML utilization drops while starved ({us} % against {uf} % fed)",
    )  # fmt: skip
    _wait_for_alert(server, name, "resolved", 30.0, report)
    return result


class AlertWatch:
    """Polls the server, off the training thread, for the run's low-utilization alert firing."""

    def __init__(self, server: str | None, name: str) -> None:
        self.server, self.name = server, name
        self.fired = False
        self.fired_after: float | None = None
        self._stop = threading.Event()
        self._started = time.monotonic()
        self._thread = threading.Thread(target=self._run, daemon=True)
        if server is not None:
            self._thread.start()

    def _run(self) -> None:
        assert self.server is not None
        run_id = None
        while not self._stop.wait(0.25):
            with contextlib.suppress(Exception):
                if run_id is None:
                    runs = Server.get(self.server, "/api/v1/runs", limit=50)["data"]
                    run_id = next((r["id"] for r in runs if r["name"] == self.name), None)
                    continue
                alerts = Server.get(self.server, "/api/v1/alerts", run_id=run_id)["data"]
                if any(_low_util(a) and a["state"] == "firing" for a in alerts):
                    self.fired_after = time.monotonic() - self._started
                    self.fired = True
                    return

    def stop(self) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join()


def _low_util(alert: dict[str, Any]) -> bool:
    return "utilization" in str(alert.get("rule_name", "")).lower()


def _pct(share: float | None) -> float | None:
    return None if share is None else round(share * 100, 1)


def _shorten_low_util_rule(server: str) -> None:
    import httpx

    rules = Server.get(server, "/api/v1/alert-rules")["data"]
    rule = next((r for r in rules if r.get("builtin") == "low_gpu_util"), None)
    if rule is not None:
        httpx.patch(
            f"{server}/api/v1/alert-rules/{rule['id']}",
            json={"for_s": 2.0, "keep_firing_for_s": 1.0},
            timeout=10,
        )


def _find_run(server: str, name: str) -> dict[str, Any]:
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        for run in Server.get(server, "/api/v1/runs", limit=50)["data"]:
            if run["name"] == name:
                return run
        time.sleep(0.2)
    raise RuntimeError(f"run {name} not found on {server}")


def _wait_for_alert(server: str, name: str, state: str, timeout_s: float, report: Report) -> None:
    started = time.monotonic()
    run = _find_run(server, name)
    while time.monotonic() - started < timeout_s:
        alerts = Server.get(server, "/api/v1/alerts", run_id=run["id"])["data"]
        low = [a for a in alerts if _low_util(a)]
        if any(a["state"] == state for a in low):
            report.check(
                "alert",
                True,
                f"'utilization below 70 %' {state} after {time.monotonic() - started:.1f} s",
            )
            return
        time.sleep(0.2)
    report.check("alert", False, f"'utilization below 70 %' not {state} within {timeout_s:.0f} s")


def _steps(server: str, run_id: int) -> list[dict[str, Any]]:
    text = Server.get(server, f"/api/v1/runs/{run_id}/steps.csv")
    rows = []
    for row in csv.DictReader(io.StringIO(text)):
        rows.append({
            "step": float(row["step"]), "t": float(row["t"]), "dur": float(row["dur"]),
            "wait": float(row["wait"]) if row.get("wait") not in (None, "") else None,
        })  # fmt: skip
    return rows


def _phase_shares(
    server: str, run_id: int, bounds: dict[str, tuple[float, float, int, int]]
) -> dict[str, float | None]:
    steps = _steps(server, run_id)
    shares: dict[str, float | None] = {}
    for phase, (_, _, first, last) in bounds.items():
        inside = [s for s in steps if first + 5 <= s["step"] < last and s["wait"] is not None]
        total = sum(s["dur"] for s in inside)
        shares[phase] = sum(s["wait"] or 0.0 for s in inside) / total if total > 0 else None
    return shares


def _device_rows(server: str, run_id: int, fields: str) -> dict[str, list[Any]]:
    data = Server.get(server, f"/api/v1/runs/{run_id}/samples", fields=fields, max_points=100000)
    return data["series"][0] if data["series"] else {}


def _phase_means(
    server: str, run_id: int, bounds: dict[str, tuple[float, float, int, int]], name: str
) -> dict[str, float | None]:
    rows = _device_rows(server, run_id, name)
    means: dict[str, float | None] = {}
    for phase, (t0, t1, _, _) in bounds.items():
        values = [
            v
            for t, v in zip(rows.get("t", []), rows.get(name, []), strict=False)
            if t0 + 0.5 <= t <= t1 and v is not None
        ]
        means[phase] = round(statistics.fmean(values), 1) if values else None
    return means


def energy_per_phase(device: Device, report: Report, server: str | None, run: PhaseRun) -> None:
    heading("5. Energy per phase on that run")
    if server is None or run.run_id is None:
        report.skip("energy", "no server")
        return
    rows = _device_rows(server, run.run_id, "energy_j,power_w")
    t, energy, power = rows.get("t", []), rows.get("energy_j", []), rows.get("power_w", [])
    known = [(a, e, p) for a, e, p in zip(t, energy, power, strict=False) if e is not None]
    if len(known) < 4:
        report.check("energy", False, "no energy in the device rows")
        return
    table_rows, worst = [], 0.0
    how = "scripted power x time" if device.fake else "NVML power integrated"
    for phase, (t0, t1, _, _) in run.bounds.items():
        # The readings inside the phase: a window across a bound mixes two phases' power.
        inside = [(a, e, p) for a, e, p in known if t0 <= a <= t1]
        if len(inside) < 2:
            report.check("energy", False, f"fewer than two readings in the {phase} phase")
            return
        seconds = inside[-1][0] - inside[0][0]
        joules = inside[-1][1] - inside[0][1]
        if device.fake:
            truth = FAKE_PHASES[phase]["power_mw"] / 1000 * seconds
        else:
            watts = [(a, p) for a, _, p in inside if p is not None]
            truth = sum((b[0] - a[0]) * (a[1] + b[1]) / 2 for a, b in itertools.pairwise(watts))
        error = abs(joules - truth) / truth if truth else 1.0
        worst = max(worst, error)
        table_rows.append([phase, seconds, joules, truth, error * 100])
    table(["phase", "seconds", "Stoker J", f"{how} J", "error %"], table_rows)
    report.check(
        "energy", worst <= 0.05, f"energy per phase within 5 % (worst {worst * 100:.1f} %)"
    )
    split = Server.get(server, f"/api/v1/runs/{run.run_id}/energy")
    cost = (
        f", {split['currency']}{split['starved_cost']:.4f} at {split['price_per_kwh']}/kWh"
        if split.get("starved_cost") is not None
        else ""
    )
    print(f"  run energy {split['total_j']:.0f} J: burned while starved "
          f"{split['starved_j']:.0f} J, computing "
          f"{split['computing_j']:.0f} J, no step running {split['other_j']:.0f} J"
          f"{' (integrated from power)' if split['integrated'] else ''}{cost}")  # fmt: skip
    if device.fake:
        # Each phase's scripted power x its steps' measured waits (the fed phase's too).
        truth = sum(
            FAKE_PHASES[phase]["power_mw"] / 1000 * _phase_wait_s(server, run.run_id, first, last)
            for phase, (_, _, first, last) in run.bounds.items()
        )
        error = abs(split["starved_j"] - truth) / truth
        report.check(
            "energy",
            error <= 0.05,
            f"burned while starved {split['starved_j']:.0f} J against scripted power x "
            f"measured wait {truth:.0f} J ({error * 100:.1f} %)",
        )
    else:
        report.check(
            "energy",
            split["starved_j"] > 0,
            f"energy burned while starved: {split['starved_j']:.0f} J",
        )


def _phase_wait_s(server: str, run_id: int, first: int, last: int) -> float:
    return sum(s["wait"] or 0.0 for s in _steps(server, run_id) if first <= s["step"] < last)


def agent_cost(device: Device, report: Report, server: str | None, rounds: int, steps: int) -> None:
    heading(
        f"6. The agent's cost at GPU speed: a ~1.5 ms step, {rounds} paired rounds of {steps} steps"
    )
    from trainer_agent import Monitor

    tiny = device.tiny_step()
    for _ in range(50):
        tiny()
    plain_rates, stoker_rates, diffs = [], [], []
    for r in range(rounds):
        order = ("plain", "stoker") if r % 2 == 0 else ("stoker", "plain")
        took: dict[str, float] = {}
        for kind in order:
            if kind == "plain":
                start = time.perf_counter()
                for _ in range(steps):
                    tiny()
                took[kind] = time.perf_counter() - start
            else:
                with Monitor(
                    run_name=f"gpu-check-cost-{r}",
                    project="gpu-check",
                    server=server or "http://127.0.0.1:9",
                ) as mon:
                    start = time.perf_counter()
                    for _ in mon.iterate(range(steps)):
                        tiny()
                        mon.log(loss=0.5)
                    took[kind] = time.perf_counter() - start
        plain_rates.append(steps / took["plain"])
        stoker_rates.append(steps / took["stoker"])
        diffs.append((took["stoker"] - took["plain"]) / steps * 1e6)
    p, s, d = (
        statistics.median(plain_rates),
        statistics.median(stoker_rates),
        statistics.median(diffs),
    )
    table(["", "steps/s (median)"], [["plain", p], ["with Monitor", s]])
    share = d / (1e6 / p) * 100
    print(f"  median paired difference {d:.1f} µs/step ({share:.2f} % of the step)")
    text = f"Stoker costs {share:.2f} % of a {1e3 / p:.2f} ms step (≤ 3 %)"
    if device.fake:
        # The 3 % target is for a GPU step, beside which the agent's threads take an idle
        # core; on a shared CPU they take the cores other work uses: said, not judged.
        report.info("cost", text.replace(" (≤ 3 %)", "") + " (a sleeping step on the CPU)")
    else:
        report.check("cost", share <= 3.0, text)


# --- main --------------------------------------------------------------------------------
def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--fake", action="store_true", help="the CPU and the fake NVML (CI)")
    parser.add_argument("--server", help="an existing Stoker server (default: start one here)")
    parser.add_argument("--quick", action="store_true", help="shorter phases (CI)")
    parser.add_argument(
        "--no-server", action="store_true", help="start no server: the agent spools the runs"
    )
    parser.add_argument("--json", type=Path, help="also write the results here")
    args = parser.parse_args(argv)
    workdir = Path(tempfile.mkdtemp(prefix="stoker-gpu-check-"))
    os.environ.setdefault("STOKER_SPOOL_DIR", str(workdir / "spool"))
    report = Report()
    device: Device = FakeDevice(workdir) if args.fake else TorchDevice()
    seconds = 2.0 if args.quick else 6.0
    print(f"Stoker GPU check on {device.name()}; python {sys.version.split()[0]}; load average "
          f"{' '.join(f'{v:.2f}' for v in os.getloadavg())}")  # fmt: skip
    server = Server(args.server, workdir)
    url = None if args.no_server else server.start()
    print(f"server: {url or 'none (the agent spools; sections 3-5 skipped)'}")
    try:
        nvml_readings(device, report, samples=3 if args.quick else 6)
        gpm_plausibility(device, report, seconds=1.0 if args.quick else 3.0)
        run = starved_then_fed(device, report, url, seconds=seconds)
        energy_per_phase(device, report, url, run)
        agent_cost(
            device, report, url, rounds=6 if args.quick else 12, steps=300 if args.quick else 600
        )
    finally:
        server.stop()
    took = time.monotonic() - report.started
    heading(f"summary ({took:.0f} s)")
    for verdict in ("PASS", "FAIL", "SKIP", "INFO"):
        count = sum(1 for _, v, _ in report.results if v == verdict)
        print(f"  {verdict}: {count}")
    if args.json:
        args.json.write_text(json.dumps({"seconds": took, "results": report.results}, indent=1))
    if url is None:
        spool = os.environ["STOKER_SPOOL_DIR"]
        print(f"the runs are spooled in {spool}: `stoker upload {spool}/<run>` sends each")
    else:
        shutil.rmtree(workdir, ignore_errors=True)
    return 1 if report.failed else 0


if __name__ == "__main__":
    sys.exit(main())
