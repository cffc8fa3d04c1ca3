"""`stoker doctor` and the environment report, against the fake NVML and with no NVML."""

import os
import subprocess
import sys

import pytest

from tests.harness.fake_nvml import FakeNvml
from tests.harness.support import REPO
from trainer_agent import log_once
from trainer_agent.cli import doctor
from trainer_agent.telemetry.environment import collect
from trainer_agent.telemetry.nvml import Nvml

pytest.importorskip("tensorflow")


def _by_name(checks: list[doctor.Check]) -> dict[str, doctor.Check]:
    return {check.name: check for check in checks}


def test_doctor_with_fake_gpus_reports_each_gpu_and_version_mismatch(
    fake_nvml: FakeNvml, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    fake_nvml.write(
        device_count=2,
        cuda_driver_version=12020,  # older than TensorFlow 2.21's CUDA 12.5 build
        gpu0={"name": "NVIDIA A100-SXM4-40GB", "cc_major": 8, "cc_minor": 0},
        gpu1={"name": "Tesla P100", "cc_major": 6, "cc_minor": 0},
    )
    fake_nvml.preload()
    nvml = Nvml()
    try:
        checks = _by_name(doctor.run_checks(nvml))
    finally:
        nvml.shutdown()
    assert checks["NVIDIA driver"].status == doctor.PASS
    assert "550.54.15" in checks["NVIDIA driver"].detail
    assert "NVIDIA A100-SXM4-40GB" in checks["GPU 0"].detail
    assert checks["GPU 0 mixed precision"].status == doctor.PASS
    assert checks["GPU 1 mixed precision"].status == doctor.WARN
    mismatch = checks["driver CUDA ≥ TensorFlow's CUDA"]
    assert mismatch.status == doctor.FAIL
    assert "12.2" in mismatch.detail and "upgrade the NVIDIA driver" in mismatch.fix
    # This machine has no real GPU: TensorFlow runs on the CPU, and the doctor says so.
    assert checks["TensorFlow sees the GPUs"].status == doctor.FAIL


def test_doctor_command_without_nvml_fails_driver_check_with_fix() -> None:
    env = {k: v for k, v in os.environ.items() if k not in ("LD_LIBRARY_PATH", "LD_PRELOAD")}
    result = subprocess.run(
        [sys.executable, "-m", "stoker_server.cli", "doctor"],
        cwd=REPO, env=env, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert result.returncode == 1
    assert "[FAIL] NVIDIA driver: NVML does not load" in result.stdout
    assert "fix: install the NVIDIA driver" in result.stdout
    assert "[PASS] TensorFlow CUDA build" in result.stdout


def test_environment_report_names_gpus_versions_and_model(fake_nvml: FakeNvml) -> None:
    import keras

    fake_nvml.write(gpu0={"name": "NVIDIA H100", "mem_total": 80 * 2**30})
    fake_nvml.preload()
    model = keras.Sequential([keras.Input(shape=(4,)), keras.layers.Dense(3)])
    model.compile(optimizer=keras.optimizers.Adam(learning_rate=0.01), loss="mse")
    nvml = Nvml()
    try:
        report = collect(nvml, model=model, fit_params={"epochs": 2, "steps": 5})
    finally:
        nvml.shutdown()
    assert report["driver_version"] == "550.54.15"
    assert report["cuda_driver_version"] == "12.4"
    assert report["gpus"][0]["name"] == "NVIDIA H100"
    assert report["gpus"][0]["memory_total_bytes"] == 80 * 2**30
    assert report["tensorflow_version"].startswith("2.")
    assert report["tf_build"]["cuda_version"]
    assert report["keras_version"] == keras.__version__
    assert report["mixed_precision_policy"] == "float32"
    assert report["model"]["param_count"] == 15
    assert report["optimizer"]["class"] == "Adam"
    assert report["optimizer"]["config"]["learning_rate"] == pytest.approx(0.01)
    assert report["fit_params"] == {"epochs": 2, "steps": 5}
    assert report["strategy"] and report["replicas"] == 1
    assert report["pid"] == os.getpid() and report["rank"] == 0


def _mig(gpu: int, slot: int) -> str:
    """The fake's UUID of MIG device `slot` of GPU `gpu`."""
    return f"MIG-00000000-0000-0000-0000-0000000000{gpu}{slot}"


A100_MIG = {"name": "NVIDIA A100-SXM4-80GB", "mem_total": 80 << 30, "mig": 2,
            "mig_mem_total": 10 << 30}  # fmt: skip


def _environment_and_doctor(fake_nvml: FakeNvml) -> tuple[dict, dict[str, doctor.Check]]:
    fake_nvml.preload()
    log_once.forget()
    nvml = Nvml()
    try:
        return collect(nvml), _by_name(doctor.check_driver(nvml))
    finally:
        nvml.shutdown()
        log_once.forget()


def test_a_mig_device_named_by_cuda_visible_devices_is_the_runs_gpu(
    fake_nvml: FakeNvml, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("NVIDIA_VISIBLE_DEVICES", raising=False)
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", _mig(1, 1))
    fake_nvml.write(device_count=2, gpu1=A100_MIG)
    report, checks = _environment_and_doctor(fake_nvml)
    assert report["gpus"] == [
        {
            "index": 1,  # the parent's NVML index, as the MIG device's rows carry
            "name": "NVIDIA A100-SXM4-80GB MIG 1g.10gb",
            "uuid": _mig(1, 1),
            "memory_total_bytes": 10 << 30,
            "compute_capability": "8.0",
            "mig": True,
            "parent": {
                "name": "NVIDIA A100-SXM4-80GB",
                "uuid": "GPU-00000000-0000-0000-0000-000000000001",
                "memory_total_bytes": 80 << 30,
            },
        }
    ]
    assert "gpus_unreadable" not in report
    device = checks[f"MIG device {_mig(1, 1)}"]
    assert device.status == doctor.PASS
    assert device.detail == (
        "NVIDIA A100-SXM4-80GB MIG 1g.10gb, 10.0 GiB, on GPU 1 (NVIDIA A100-SXM4-80GB), "
        "compute capability 8.0"
    )
    assert checks[f"MIG device {_mig(1, 1)} mixed precision"].status == doctor.PASS
    assert not [name for name in checks if name.startswith("GPU ")]  # no whole GPU listed


def test_a_gpu_in_mig_mode_lists_the_mig_device_the_process_runs_on(
    fake_nvml: FakeNvml, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    fake_nvml.write(device_count=1, gpu0={**A100_MIG, "mig": 3})
    report, checks = _environment_and_doctor(fake_nvml)
    # Before the process list shows this process: CUDA's one MIG device, the first.
    assert [g["uuid"] for g in report["gpus"]] == [_mig(0, 0)]
    assert f"MIG device {_mig(0, 0)}" in checks
    mine = {**A100_MIG, "mig": 3, "mig_proc_pid": os.getpid(), "mig_proc_slot": 2}
    fake_nvml.write(device_count=1, gpu0=mine)
    report, checks = _environment_and_doctor(fake_nvml)
    assert [(g["index"], g["uuid"]) for g in report["gpus"]] == [(0, _mig(0, 2))]


def test_only_the_gpu_the_process_list_shows_is_the_runs_gpu(
    fake_nvml: FakeNvml, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    fake_nvml.write(device_count=3, gpu0={"proc_pid": 1}, gpu1={"proc_pid": os.getpid()})
    report, _ = _environment_and_doctor(fake_nvml)
    assert [g["index"] for g in report["gpus"]] == [1]
    assert "mig" not in report["gpus"][0]


def test_a_mig_device_answering_no_permission_is_said_once_in_each(
    fake_nvml: FakeNvml, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("NVIDIA_VISIBLE_DEVICES", raising=False)
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", _mig(0, 0))
    fake_nvml.write(device_count=1, gpu0={**A100_MIG, "mig_noperm": 1})
    report, checks = _environment_and_doctor(fake_nvml)
    assert report["gpus"] == []
    assert report["gpus_unreadable"] == [{"device": _mig(0, 0), "error": "no permission"}]
    said = [c for c in checks.values() if "no permission" in c.detail]
    assert [(c.status, c.name) for c in said] == [(doctor.FAIL, f"MIG device {_mig(0, 0)}")]
    assert "nvidia-caps" in said[0].fix
    assert "GPUs visible to this process" not in checks  # the reason is the one above


def test_a_mig_gpu_whose_devices_nvml_will_not_list_is_read_whole_and_said(
    fake_nvml: FakeNvml, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    fake_nvml.write(device_count=1, gpu0={**A100_MIG, "mig_noperm": 1})
    report, checks = _environment_and_doctor(fake_nvml)
    (gpu,) = report["gpus"]
    assert (gpu["index"], gpu["name"], gpu["memory_total_bytes"]) == (
        0, "NVIDIA A100-SXM4-80GB", 80 << 30
    )  # fmt: skip
    assert gpu["mig_devices_unlisted"] == "no permission"
    assert checks["GPU 0"].status == doctor.PASS
    assert "will not list its MIG devices (no permission)" in checks["GPU 0"].detail
