"""A process given no GPU says why, once, and goes on (issue 27 §5): a container started with
`NVIDIA_VISIBLE_DEVICES=void` (NVML sees no GPU), or `CUDA_VISIBLE_DEVICES` hiding every GPU;
through the real binding and the fake NVML."""

import logging
import os
from collections.abc import Iterator

import pytest

from tests.fake_nvml import NOT_SUPPORTED, FakeNvml
from trainer_agent import log_once
from trainer_agent.nvml import Nvml
from trainer_agent.recorder import Recorder
from trainer_agent.samplers import DeviceSource


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


def test_a_mig_instance_is_named_as_such(
    fake_nvml: FakeNvml, nvml: Nvml, caplog: pytest.LogCaptureFixture,
    monkeypatch: pytest.MonkeyPatch,
) -> None:  # fmt: skip
    monkeypatch.delenv("NVIDIA_VISIBLE_DEVICES", raising=False)
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "MIG-4b9e0f5a-1c2d-5e6f-8a9b-0c1d2e3f4a5b")
    fake_nvml.write(device_count=1)
    caplog.set_level(logging.WARNING, logger="trainer_agent")
    _sample_twice(nvml)
    (said,) = _said(caplog)
    assert "names a MIG instance, and Stoker reads whole GPUs only" in said


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
