"""`stoker doctor`: is this machine set up to train TensorFlow on its GPUs? Each check says
pass, warn or fail and, when it is not a pass, what to do about it.
"""

import ctypes.util
import importlib.util
import os
import sys
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from trainer_agent.telemetry.environment import gpu_facts
from trainer_agent.telemetry.nvml import Nvml, shared_nvml

PASS, WARN, FAIL = "pass", "warn", "fail"


@dataclass
class Check:
    status: str
    name: str
    detail: str
    fix: str = ""

    def line(self) -> str:
        text = f"[{self.status.upper():4}] {self.name}: {self.detail}"
        return text + (f"\n       fix: {self.fix}" if self.fix and self.status != PASS else "")


def _version_tuple(text: str | None) -> tuple[int, ...] | None:
    if not text:
        return None
    try:
        return tuple(int(part) for part in text.split(".")[:2])
    except ValueError:
        return None


def check_driver(nvml: Nvml) -> list[Check]:
    if not nvml.available():
        return [
            Check(
                FAIL,
                "NVIDIA driver",
                f"NVML does not load ({nvml.unavailable_reason})",
                "install the NVIDIA driver so that `nvidia-smi` works; in a container, start "
                "it with the NVIDIA Container Toolkit (`docker run --gpus all ...`)",
            )
        ]
    checks = [
        Check(
            PASS,
            "NVIDIA driver",
            f"driver {nvml.driver_version()}, supports CUDA up to {nvml.cuda_driver_version()}",
        )
    ]
    facts = gpu_facts(nvml)
    gpus, unreadable = facts["gpus"], facts.get("gpus_unreadable", [])
    total = nvml.device_count()
    if not gpus and not unreadable:
        checks.append(
            Check(
                FAIL if total else WARN,
                "GPUs visible to this process",
                f"none of {total} (CUDA_VISIBLE_DEVICES="
                f"{os.environ.get('CUDA_VISIBLE_DEVICES')!r})",
                "unset CUDA_VISIBLE_DEVICES or list the GPUs to use, e.g. CUDA_VISIBLE_DEVICES=0",
            )
        )
    for refused in unreadable:
        device = refused["device"]
        what = f"MIG device {device}" if isinstance(device, str) else f"GPU {device}"
        checks.append(
            Check(
                FAIL if not gpus else WARN,
                what,
                f"NVML will not read it ({refused['error']}): Stoker gets no GPU rows for it",
                "give this user access to the device (in a container, the MIG device's "
                "/dev/nvidia-caps entries), or name another in CUDA_VISIBLE_DEVICES",
            )
        )
    for gpu in gpus:
        name = f"MIG device {gpu['uuid']}" if gpu.get("mig") else f"GPU {gpu['index']}"
        memory_gib = (gpu["memory_total_bytes"] or 0) / 2**30
        detail = f"{gpu['name']}, {memory_gib:.1f} GiB"
        parent = gpu.get("parent")
        if parent:
            detail += f", on GPU {gpu['index']} ({parent['name']})"
        detail += f", compute capability {gpu['compute_capability']}"
        if gpu.get("mig_devices_unlisted"):
            detail += (
                f"; in MIG mode, but NVML will not list its MIG devices "
                f"({gpu['mig_devices_unlisted']}): Stoker reads the whole GPU"
            )
        checks.append(Check(PASS, name, detail))
        checks.append(check_mixed_precision(name, gpu["compute_capability"]))
    return checks


def check_mixed_precision(device: str, capability: str | None) -> Check:
    """Whether `device` ("GPU 0", "MIG device MIG-…") has Tensor Cores for mixed precision."""
    version = _version_tuple(capability)
    name = f"{device} mixed precision"
    if version is None:
        return Check(WARN, name, "compute capability unknown")
    if version >= (8, 0):
        return Check(PASS, name, f"Tensor Cores (sm {capability}): mixed_float16 and bfloat16")
    if version >= (7, 0):
        return Check(PASS, name, f"Tensor Cores (sm {capability}): mixed_float16; no bfloat16")
    return Check(
        WARN,
        name,
        f"compute capability {capability} has no Tensor Cores",
        "mixed precision ('mixed_float16') will not speed this GPU up; it needs 7.0 or newer",
    )


def check_tensorflow(nvml: Nvml) -> list[Check]:
    if importlib.util.find_spec("tensorflow") is None:
        return [
            Check(
                FAIL,
                "TensorFlow",
                "not installed",
                "pip install 'tensorflow[and-cuda]' (Linux) brings matching CUDA and cuDNN",
            )
        ]
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    import tensorflow as tf

    build = dict(tf.sysconfig.get_build_info())
    checks = []
    cuda_build = build.get("cuda_version")
    if not build.get("is_cuda_build"):
        checks.append(
            Check(
                FAIL,
                "TensorFlow CUDA build",
                f"TensorFlow {tf.__version__} is built without CUDA: it can only use the CPU",
                "pip install 'tensorflow[and-cuda]' (Linux) or a CUDA-enabled build",
            )
        )
    else:
        checks.append(
            Check(
                PASS,
                "TensorFlow CUDA build",
                f"TensorFlow {tf.__version__} built for CUDA {cuda_build}, "
                f"cuDNN {build.get('cudnn_version')}",
            )
        )
    checks.append(check_cuda_versions(cuda_build, nvml))
    checks.append(check_cudnn(build.get("cudnn_version")))
    gpus = tf.config.list_physical_devices("GPU")
    if not gpus:
        checks.append(
            Check(
                FAIL,
                "TensorFlow sees the GPUs",
                "tf.config.list_physical_devices('GPU') is empty: training runs on the CPU",
                "check the driver line above; install the CUDA/cuDNN libraries TensorFlow "
                "needs (pip install 'tensorflow[and-cuda]', or set LD_LIBRARY_PATH for a "
                "manual CUDA install) and read TensorFlow's log for the library it cannot load",
            )
        )
        return checks
    checks.append(Check(PASS, "TensorFlow sees the GPUs", ", ".join(d.name for d in gpus)))
    growth = [tf.config.experimental.get_memory_growth(d) for d in gpus]
    forced = os.environ.get("TF_FORCE_GPU_ALLOW_GROWTH", "").lower() == "true"
    if all(growth) or forced:
        checks.append(Check(PASS, "memory growth", "on: TensorFlow allocates as it needs"))
    else:
        checks.append(
            Check(
                WARN,
                "memory growth",
                "off: TensorFlow reserves nearly all GPU memory at start, so nvidia-smi shows "
                "the GPU full whatever the model uses",
                "tf.config.experimental.set_memory_growth(gpu, True) before using the GPU, or "
                "TF_FORCE_GPU_ALLOW_GROWTH=true; Stoker shows the allocator's real use anyway",
            )
        )
    return checks


def check_cuda_versions(tf_cuda: str | None, nvml: Nvml) -> Check:
    name = "driver CUDA ≥ TensorFlow's CUDA"
    driver_cuda = nvml.cuda_driver_version() if nvml.available() else None
    needed, have = _version_tuple(tf_cuda), _version_tuple(driver_cuda)
    if needed is None:
        return Check(WARN, name, "TensorFlow's CUDA build version is unknown")
    if have is None:
        return Check(
            WARN, name, f"TensorFlow needs CUDA {tf_cuda}; the driver's CUDA version is unknown",
            f"install an NVIDIA driver that supports CUDA {tf_cuda}",
        )  # fmt: skip
    if have >= needed:
        return Check(PASS, name, f"driver supports CUDA {driver_cuda}, TensorFlow needs {tf_cuda}")
    return Check(
        FAIL,
        name,
        f"driver supports CUDA {driver_cuda} but TensorFlow was built for CUDA {tf_cuda}: "
        "expect 'no GPU detected' or cryptic CUDA errors",
        f"upgrade the NVIDIA driver to one for CUDA {tf_cuda}, or install a TensorFlow "
        f"built for CUDA {driver_cuda}",
    )


def check_cudnn(build_version: str | None) -> Check:
    major = (build_version or "").split(".")[0]
    found = _find_cudnn(major)
    if found:
        return Check(PASS, "cuDNN", f"{found} (TensorFlow built for cuDNN {build_version})")
    return Check(
        WARN,
        "cuDNN",
        f"no cuDNN {major or ''} library found (TensorFlow built for cuDNN {build_version})",
        "pip install 'tensorflow[and-cuda]' brings nvidia-cudnn; for a manual install add its "
        "lib directory to LD_LIBRARY_PATH",
    )


def _find_cudnn(major: str) -> str | None:
    spec = importlib.util.find_spec("nvidia.cudnn")
    if spec is not None and spec.submodule_search_locations:
        for location in spec.submodule_search_locations:
            lib = os.path.join(location, "lib")
            if os.path.isdir(lib) and any(f.startswith("libcudnn") for f in os.listdir(lib)):
                return f"nvidia-cudnn wheel ({lib})"
    found = ctypes.util.find_library("cudnn")
    if found:
        return found
    try:
        ctypes.CDLL(f"libcudnn.so.{major}" if major else "libcudnn.so")
        return f"libcudnn.so.{major}"
    except OSError:
        return None


def run_checks(nvml: Nvml | None = None, *, tensorflow: bool = True) -> list[Check]:
    nvml = nvml or shared_nvml()
    groups: list[Callable[[], list[Check]]] = [lambda: check_driver(nvml)]
    if tensorflow:
        groups.append(lambda: check_tensorflow(nvml))
    checks: list[Check] = []
    for group in groups:
        try:
            checks.extend(group())
        except Exception as error:  # a check must never crash the doctor
            checks.append(Check(FAIL, "doctor", f"a check failed to run: {error!r}"))
    return checks


def main(argv: Any = None, *, out: Any = None) -> int:
    """Print every check; exit status 1 when any failed."""
    stream = out or sys.stdout
    checks = run_checks()
    for check in checks:
        print(check.line(), file=stream)
    failed = sum(c.status == FAIL for c in checks)
    warned = sum(c.status == WARN for c in checks)
    print(f"{len(checks)} checks: {failed} failed, {warned} warnings", file=stream)
    return 1 if failed else 0
