"""`stoker doctor` and the environment report, against the fake NVML and with no NVML."""

import os
import subprocess
import sys

import pytest

from tests.fake_nvml import FakeNvml
from tests.support import REPO
from trainer_agent import doctor
from trainer_agent.environment import collect
from trainer_agent.nvml import Nvml

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
        [sys.executable, "-m", "backend.cli", "doctor"],
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
