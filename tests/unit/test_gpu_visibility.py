"""Only the GPUs the run uses, through the real binding and the fake NVML: a
process given no GPU says why, once, and goes on (`NVIDIA_VISIBLE_DEVICES=void`, where NVML
sees no GPU, or `CUDA_VISIBLE_DEVICES` hiding every GPU); MIG devices, named or found on a GPU
in MIG mode, and one answering NoPermission; NVML's process list choosing the GPUs."""

import logging
import os
import time
from collections.abc import Iterator

import pytest

from tests.harness.fake_nvml import NOT_SUPPORTED, FakeNvml
from trainer_agent import log_once
from trainer_agent.capture.recorder import Recorder
from trainer_agent.telemetry.nvml import Nvml
from trainer_agent.telemetry.samplers import DeviceSource


@pytest.fixture
def nvml(fake_nvml: FakeNvml) -> Iterator[Nvml]:
    fake_nvml.preload()
    log_once.forget()
    instance = Nvml()
    yield instance
    instance.shutdown()
    log_once.forget()


def _said(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if "no GPU rows" in r.getMessage()]


def _sample_twice(nvml: Nvml) -> Recorder:
    recorder = Recorder(max_rows=10_000)
    for _ in range(2):  # two runs in one process
        source = DeviceSource(nvml, tf_memory=lambda i: (None, None))
        assert source.start()
        source.sample(1.0, recorder)
    return recorder


def test_nvidia_visible_devices_void_is_said_once(
    fake_nvml: FakeNvml, nvml: Nvml, caplog: pytest.LogCaptureFixture,
    monkeypatch: pytest.MonkeyPatch,
) -> None:  # fmt: skip
    monkeypatch.setenv("NVIDIA_VISIBLE_DEVICES", "void")
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    fake_nvml.write(device_count=0)
    caplog.set_level(logging.WARNING, logger="trainer_agent")
    recorder = _sample_twice(nvml)
    assert not (recorder.device.drain() or {}).get("t")
    assert _said(caplog) == [
        "Stoker: NVIDIA_VISIBLE_DEVICES='void': this container was given no GPU; no GPU rows "
        "(host rows and step timing still flow)"
    ]


def test_cuda_visible_devices_hiding_every_gpu_is_said_once(
    fake_nvml: FakeNvml, nvml: Nvml, caplog: pytest.LogCaptureFixture,
    monkeypatch: pytest.MonkeyPatch,
) -> None:  # fmt: skip
    monkeypatch.delenv("NVIDIA_VISIBLE_DEVICES", raising=False)
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "-1")
    fake_nvml.write(device_count=2)
    caplog.set_level(logging.WARNING, logger="trainer_agent")
    _sample_twice(nvml)
    assert _said(caplog) == [
        "Stoker: CUDA_VISIBLE_DEVICES='-1' hides every GPU from this process; no GPU rows "
        "(host rows and step timing still flow)"
    ]


def test_only_the_visible_gpu_gets_rows(
    fake_nvml: FakeNvml, nvml: Nvml, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "1")
    fake_nvml.write(device_count=3)
    recorder = Recorder(max_rows=10_000)
    source = DeviceSource(nvml, tf_memory=lambda i: (None, None))
    assert source.start()
    source.sample(1.0, recorder)
    columns = recorder.device.drain()
    assert columns is not None and columns["gpu"] == [1]
    assert columns["energy_j"] == [0.0] and columns["energy_integrated"] == [False]


def _mig(gpu: int, slot: int) -> str:
    """The fake's UUID of MIG device `slot` of GPU `gpu`."""
    return f"MIG-00000000-0000-0000-0000-0000000000{gpu}{slot}"


def _rows(recorder: Recorder) -> list[dict[str, object]]:
    columns = recorder.device.drain() or {}
    return [{k: v[i] for k, v in columns.items()} for i in range(len(columns.get("t", [])))]


def test_a_mig_device_named_by_cuda_visible_devices_gets_its_own_rows(
    fake_nvml: FakeNvml, nvml: Nvml, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Its memory and processes are its own; utilization, power, clocks and energy are the
    whole GPU's, which NVML does not give for a MIG device: null, never 0 nor the GPU's."""
    monkeypatch.delenv("NVIDIA_VISIBLE_DEVICES", raising=False)
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", _mig(1, 1))
    mig = {"mig": 2, "mig_mem_total": 10 << 30, "mig_mem_used": 3 << 30,
           "mig_proc_pid": os.getpid(), "mig_proc_slot": 1, "mem_total": 80 << 30}  # fmt: skip
    fake_nvml.write(device_count=2, gpu1=mig)
    recorder = Recorder(max_rows=10_000)
    source = DeviceSource(nvml, tf_memory=lambda i: (None, None))
    assert source.start()
    source.sample(1.0, recorder)
    (row,) = _rows(recorder)
    assert row["gpu"] == 1  # the parent GPU's NVML index
    assert (row["mem_total"], row["mem_used"], row["proc_mem"]) == (10 << 30, 3 << 30, 3 << 30)
    assert "util" not in row and "power_w" not in row and "energy_j" not in row  # all null


def test_a_gpu_in_mig_mode_reads_the_mig_device_the_process_runs_on(
    fake_nvml: FakeNvml, nvml: Nvml, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    mig = {"mig": 3, "mig_mem_total": 20 << 30, "mig_mem_used": 1 << 30}
    fake_nvml.write(device_count=1, gpu0=mig)
    recorder = Recorder(max_rows=10_000)
    source = DeviceSource(nvml, tf_memory=lambda i: (None, None))
    assert source.start()
    # Before the process list shows it anywhere: CUDA's single MIG device, the first.
    assert source.indices == [_mig(0, 0)]
    source.sample(1.0, recorder)
    assert [r["gpu"] for r in _rows(recorder)] == [0]
    fake_nvml.write(device_count=1, gpu0={**mig, "mig_proc_pid": os.getpid(), "mig_proc_slot": 2})
    source.sample(2.0, recorder)
    assert source.indices == [_mig(0, 2)]
    source.sample(3.0, recorder)
    assert [r["mem_total"] for r in _rows(recorder)] == [20 << 30]


def test_a_mig_gpu_with_gpm_reads_it_through_its_parent_and_instance(
    fake_nvml: FakeNvml, nvml: Nvml, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", _mig(0, 0))
    fake_nvml.write(gpu0={"mig": 1, "cc_major": 9, "gpm": 1, "gpm2": 33.0})
    source = DeviceSource(nvml, tf_memory=lambda i: (None, None))
    assert source.start()
    recorder = Recorder(max_rows=10_000)
    source.sample(1.0, recorder)
    time.sleep(0.15)
    source.sample(2.0, recorder)
    rows = _rows(recorder)
    assert [r.get("sm_util") for r in rows] == [None, pytest.approx(33.0, abs=0.5)]


def test_a_mig_device_answering_no_permission_is_said_once_and_training_goes_on(
    fake_nvml: FakeNvml, nvml: Nvml, caplog: pytest.LogCaptureFixture,
    monkeypatch: pytest.MonkeyPatch,
) -> None:  # fmt: skip
    monkeypatch.delenv("NVIDIA_VISIBLE_DEVICES", raising=False)
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", _mig(0, 0))
    fake_nvml.write(device_count=1, gpu0={"mig": 2, "mig_noperm": 1})
    caplog.set_level(logging.WARNING, logger="trainer_agent")
    recorder = _sample_twice(nvml)
    assert not (recorder.device.drain() or {}).get("t")
    said = [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]
    assert said == [
        f"Stoker: NVML will not read MIG device {_mig(0, 0)} (no permission); it gets no rows, "
        "training goes on"
    ]


def test_mig_devices_nvml_will_not_list_leave_whole_gpu_rows_said_once(
    fake_nvml: FakeNvml, nvml: Nvml, caplog: pytest.LogCaptureFixture,
    monkeypatch: pytest.MonkeyPatch,
) -> None:  # fmt: skip
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    fake_nvml.write(device_count=1, gpu0={"mig": 2, "mig_noperm": 1})
    caplog.set_level(logging.WARNING, logger="trainer_agent")
    recorder = _sample_twice(nvml)
    assert (recorder.device.drain() or {})["gpu"] == [0, 0]
    said = [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]
    assert said == [
        "Stoker: GPU 0 is in MIG mode and NVML will not give its MIG devices (no permission); "
        "it gets whole-GPU rows"
    ]


def test_only_the_gpus_the_process_list_shows_it_on_get_rows(
    fake_nvml: FakeNvml, nvml: Nvml, monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:  # fmt: skip
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    # Before the framework made its context, this process is on no GPU: every GPU gets rows.
    fake_nvml.write(device_count=3, gpu0={"proc_pid": 1}, gpu2={"proc_pid": 2})
    caplog.set_level(logging.INFO, logger="trainer_agent")
    recorder = Recorder(max_rows=10_000)
    source = DeviceSource(nvml, tf_memory=lambda i: (None, None))
    assert source.start()
    source.sample(1.0, recorder)
    assert (recorder.device.drain() or {})["gpu"] == [0, 1, 2]
    # Now it runs on GPU 1 (GPU 0 and 2 hold other processes): only GPU 1 from here on.
    mine = {"proc_pid": os.getpid(), "proc_mem": 4096}
    fake_nvml.write(device_count=3, gpu0={"proc_pid": 1}, gpu1=mine, gpu2={"proc_pid": 2})
    source.sample(2.0, recorder)
    source.sample(3.0, recorder)
    columns = recorder.device.drain() or {}
    assert columns["gpu"] == [1, 1] and columns["proc_mem"] == [4096, 4096]
    assert any(
        "runs on GPU 1; GPU 0, 2 (visible, unused)" in r.getMessage() for r in caplog.records
    )
    # It starts using GPU 2 as well: GPU 2 gets rows again.
    fake_nvml.write(device_count=3, gpu1={"proc_pid": os.getpid()},
                    gpu2={"proc_pid": os.getpid()})  # fmt: skip
    source.sample(4.0, recorder)
    source.sample(5.0, recorder)
    assert (recorder.device.drain() or {})["gpu"] == [1, 1, 2]


def test_without_a_process_list_every_visible_gpu_gets_rows(
    fake_nvml: FakeNvml, nvml: Nvml, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0,2")
    fake_nvml.write(device_count=3, gpu2={"proc_pid": os.getpid()},
                    errors={"nvmlDeviceGetComputeRunningProcesses_v3": NOT_SUPPORTED})  # fmt: skip
    recorder = Recorder(max_rows=10_000)
    source = DeviceSource(nvml, tf_memory=lambda i: (None, None))
    assert source.start()
    source.sample(1.0, recorder)
    source.sample(2.0, recorder)
    columns = recorder.device.drain() or {}
    assert columns["gpu"] == [0, 2, 0, 2]
    assert "proc_mem" not in columns  # unknown: null, not 0 (an all-null column is left out)


def test_all_gpus_keeps_every_gpu_whatever_the_process_list_says(
    fake_nvml: FakeNvml, nvml: Nvml, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    fake_nvml.write(device_count=2, gpu1={"proc_pid": os.getpid()})
    recorder = Recorder(max_rows=10_000)
    source = DeviceSource(nvml, all_gpus=True, tf_memory=lambda i: (None, None))
    assert source.start()
    source.sample(1.0, recorder)
    source.sample(2.0, recorder)
    assert (recorder.device.drain() or {})["gpu"] == [0, 1, 0, 1]
