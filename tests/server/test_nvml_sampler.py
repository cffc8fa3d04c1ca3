"""GPU and host sampling through the real pynvml bound to the fake libnvidia-ml.so.1."""

import logging
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.harness.fake_nvml import NOT_SUPPORTED, UNKNOWN, FakeNvml
from tests.harness.support import REPO, ServerProcess, wait_for
from trainer_agent import log_once
from trainer_agent.capture.recorder import Recorder
from trainer_agent.telemetry.nvml import Nvml
from trainer_agent.telemetry.samplers import DeviceSource, HostSource, Sampler


@pytest.fixture
def nvml(fake_nvml: FakeNvml) -> Iterator[Nvml]:
    fake_nvml.preload()
    log_once.forget()  # each test sees its own first warnings (they are said once a process)
    instance = Nvml()
    yield instance
    instance.shutdown()
    log_once.forget()


def _device_rows(recorder: Recorder) -> list[dict[str, Any]]:
    columns = recorder.device.drain() or {}
    n = len(columns.get("t", []))
    return [{k: v[i] for k, v in columns.items()} for i in range(n)]


def test_reading_reports_fake_values_in_wire_units(fake_nvml: FakeNvml, nvml: Nvml) -> None:
    fake_nvml.write(
        gpu0={"util": 87, "mem_util": 33, "mem_used": 2_000, "mem_total": 10_000, "temp_c": 71,
              "power_mw": 250_500, "power_limit_mw": 400_000, "sm_clock": 1410,
              "throttle": 4, "pcie_tx_kbs": 3, "pcie_rx_kbs": 5,
              "proc_pid": os.getpid(), "proc_mem": 1_500}
    )  # fmt: skip
    reading = nvml.reading(0, os.getpid())
    assert reading == {
        "util": 87.0, "mem_util": 33.0, "mem_used": 2_000, "mem_total": 10_000,
        "proc_mem": 1_500, "temp_c": 71, "power_w": 250.5, "power_limit_w": 400.0,
        "sm_clock_mhz": 1410, "throttle": 4, "pcie_tx_bps": 3 * 1024, "pcie_rx_bps": 5 * 1024,
    }  # fmt: skip
    assert nvml.driver_version() == "550.54.15"
    assert nvml.cuda_driver_version() == "12.4"
    info = nvml.info(0)
    assert (info.name, info.compute_capability, info.memory_total_bytes) == (
        "Fake GPU 0",
        "8.0",
        10_000,
    )


def test_not_supported_fields_are_null_and_utilization_falls_back_to_rates(
    fake_nvml: FakeNvml, nvml: Nvml, caplog: pytest.LogCaptureFixture
) -> None:
    fake_nvml.write(
        errors={"nvmlDeviceGetSamples": NOT_SUPPORTED, "nvmlDeviceGetTemperature": NOT_SUPPORTED},
        gpu0={"util": 42, "mem_util": 7},
    )
    with caplog.at_level(logging.WARNING, logger="trainer_agent"):
        reading = nvml.reading(0, os.getpid())
    assert reading["temp_c"] is None
    assert (reading["util"], reading["mem_util"]) == (42.0, 7.0)
    assert reading["proc_mem"] == 0  # no process of ours on the GPU
    assert caplog.records == []  # "not supported" is normal, not worth a warning


def test_failing_call_is_null_and_warned_once(
    fake_nvml: FakeNvml, nvml: Nvml, caplog: pytest.LogCaptureFixture
) -> None:
    fake_nvml.write(errors={"nvmlDeviceGetPowerUsage": UNKNOWN})
    with caplog.at_level(logging.WARNING, logger="trainer_agent"):
        first = nvml.reading(0, os.getpid())
        second = nvml.reading(0, os.getpid())
    assert first["power_w"] is None and second["power_w"] is None
    assert first["temp_c"] == 60
    assert len([r for r in caplog.records if "nvmlDeviceGetPowerUsage" in r.getMessage()]) == 1


def test_visible_devices_follow_cuda_visible_devices(
    fake_nvml: FakeNvml, nvml: Nvml, monkeypatch: pytest.MonkeyPatch
) -> None:
    fake_nvml.write(device_count=3, gpu2={"uuid": "GPU-abc123"})
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    assert nvml.visible_indices() == [0, 1, 2]
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "2,0")
    assert nvml.visible_indices() == [2, 0]
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "GPU-abc,1")
    assert nvml.visible_indices() == [2, 1]
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "1,7,0")  # CUDA stops at an invalid entry
    assert nvml.visible_indices() == [1]
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")
    assert nvml.visible_indices() == []
    assert nvml.visible_indices(all_gpus=True) == [0, 1, 2]


def test_sampler_reports_a_utilization_drop_mid_run(fake_nvml: FakeNvml, nvml: Nvml) -> None:
    fake_nvml.write(gpu0={"util": 90})
    recorder = Recorder(max_rows=10_000)
    sampler = Sampler(recorder, interval_s=0.1, device=DeviceSource(nvml), host=None)
    sampler.start()
    try:
        seen: list[dict[str, Any]] = []

        def utilization_seen(value: float) -> bool:
            seen.extend(_device_rows(recorder))
            return any(row["util"] == value for row in seen)

        wait_for(lambda: utilization_seen(90.0), timeout_s=10, what="util 90")
        fake_nvml.write(gpu0={"util": 5})
        wait_for(lambda: utilization_seen(5.0), timeout_s=10, what="util 5")
    finally:
        sampler.close()
    times = [row["t"] for row in seen]
    assert times == sorted(times)
    assert {row["gpu"] for row in seen} == {0}


def test_loop_with_fake_gpu_streams_device_and_host_rows_and_utilization_drop(
    server: ServerProcess, fake_nvml: FakeNvml, tmp_path: Path
) -> None:
    fake_nvml.write(gpu0={"util": 95})
    stop = tmp_path / "stop"
    env = {**os.environ, **fake_nvml.env()}
    env.pop("CUDA_VISIBLE_DEVICES", None)
    child = subprocess.Popen(
        [sys.executable, "-m", "tests.harness.loop_script", "--server", server.url, "--name", "gpu",
         "--stop-file", str(stop), "--interval-s", "0.1"],
        cwd=REPO, env=env,
    )  # fmt: skip
    try:

        def utils() -> set[float]:
            return {u for (u,) in server.rows("SELECT util FROM devicesample")}

        wait_for(lambda: 95.0 in utils(), timeout_s=60, what="util 95 on the server")
        fake_nvml.write(gpu0={"util": 3})
        wait_for(lambda: 3.0 in utils(), timeout_s=30, what="util 3 on the server")
    finally:
        stop.touch()
        assert child.wait(timeout=60) == 0
    run = server.get("/api/v1/runs")["data"][0]
    assert run["status"] == "finished"
    hosts = server.rows("SELECT proc_cpu, sys_cpu, rss, mem_total FROM hostsample")
    assert hosts and all(rss > 0 and total > 0 for _, _, rss, total in hosts)


def test_loop_without_driver_warns_once_and_host_rows_still_flow(
    server: ServerProcess, tmp_path: Path
) -> None:
    env = {k: v for k, v in os.environ.items() if k not in ("LD_LIBRARY_PATH", "LD_PRELOAD")}
    result = subprocess.run(
        [sys.executable, "-m", "tests.harness.loop_script", "--server", server.url, "--name", "cpu",
         "--steps", "30", "--interval-s", "0.1"],
        cwd=REPO, env=env, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    assert result.stderr.count("no NVIDIA driver/NVML") == 1
    run = server.get("/api/v1/runs")["data"][0]
    assert run["status"] == "finished"
    assert run["summary"]["steps"] == 30
    assert server.rows("SELECT COUNT(*) FROM devicesample") == [(0,)]
    assert server.rows("SELECT COUNT(*) FROM hostsample")[0][0] >= 1


def test_host_source_reports_this_process_busy_then_idle() -> None:
    recorder = Recorder(max_rows=10)
    host = HostSource()
    host.sample(0.0, recorder)  # the sampler's first tick, right after the start
    wall, cpu = time.perf_counter(), time.process_time()
    spin_until = cpu + 0.3
    while time.process_time() < spin_until:
        pass
    spun = (time.process_time() - cpu) / (time.perf_counter() - wall)  # < 1 on a loaded machine
    host.sample(1.0, recorder)
    time.sleep(0.3)
    host.sample(2.0, recorder)
    columns = recorder.host.drain() or {}
    first, busy, idle = columns["proc_cpu"]
    cpus = os.cpu_count() or 1
    # An interval of microseconds says nothing; one busy thread is one CPU of the machine's
    # `cpus` (as much of it as the machine gave the spin); the sleeping process far less.
    assert first is None and columns["sys_cpu"][0] is None
    assert busy == pytest.approx(100 / cpus * spun, rel=0.35)
    assert idle < busy / 2
    assert columns["rss"][0] > 10 * 2**20
