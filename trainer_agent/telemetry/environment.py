"""The environment report sent once per run in `hello.environment`.

Everything is best effort: a fact that cannot be read is left out or null, never an error.
TensorFlow and Keras are only consulted when the training process already imported them.
"""

import logging
import os
import platform
import socket
import sys
from collections.abc import Callable
from functools import partial
from typing import Any

from trainer_agent.capture.job import job_rank, job_world_size
from trainer_agent.telemetry.nvml import DeviceKey, Devices, Nvml, devices_in_use, said

log = logging.getLogger("trainer_agent")

ENV_VARS = (
    "CUDA_VISIBLE_DEVICES", "CUDA_DEVICE_ORDER", "TF_FORCE_GPU_ALLOW_GROWTH",
    "TF_DETERMINISTIC_OPS", "TF_XLA_FLAGS", "TF_GPU_ALLOCATOR", "TF_CPP_MIN_LOG_LEVEL",
    "XLA_FLAGS",
)  # fmt: skip
# The command line kept in the report: at most this many arguments, each this long.
MAX_COMMAND_ARGS = 100
MAX_COMMAND_ARG = 1000


def _safe(fn: Callable[[], Any]) -> Any:
    try:
        return fn()
    except Exception:
        return None


def plain_int(value: Any) -> int | None:
    """`value` as a Python int: an int, a NumPy scalar, a tensor, a `tf.Variable`, or a
    distributed value (`MirroredVariable`, `PerReplica`; its first local component). None
    when it holds no single integer (e.g. a symbolic tensor).

    tf.keras 2.x keeps `steps_per_execution` in a variable, a `MirroredVariable` under a
    distribution strategy, which `int()` refuses.
    """
    components = getattr(value, "values", None)  # tf.distribute.DistributedValues
    if isinstance(components, tuple) and components:
        value = components[0]
    numpy = getattr(value, "numpy", None)
    try:
        return int(numpy() if callable(numpy) else value)
    except Exception:
        return None


def jsonable(value: Any, depth: int = 0) -> Any:
    """`value` as plain JSON types (unknown objects become their repr)."""
    if value is None or isinstance(value, bool | int | str):
        return value
    if isinstance(value, float):
        return value if value == value and abs(value) != float("inf") else None
    if depth > 6:
        return repr(value)[:200]
    if isinstance(value, dict):
        return {str(k): jsonable(v, depth + 1) for k, v in value.items()}
    if isinstance(value, list | tuple | set):
        return [jsonable(v, depth + 1) for v in value]
    item = getattr(value, "item", None)  # numpy scalars
    if callable(item):
        return jsonable(_safe(item), depth + 1)
    return repr(value)[:200]


def detect_rank() -> int:
    """This worker's rank (see `trainer_agent.capture.job.job_rank`)."""
    return job_rank()


def host_facts() -> dict[str, Any]:
    facts: dict[str, Any] = {
        "hostname": socket.gethostname(),
        "pid": os.getpid(),
        "rank": detect_rank(),
        "world_size": job_world_size(),
        "python": platform.python_version(),
        "platform": platform.platform(),
        "cpu_count": os.cpu_count(),
        "env": {name: os.environ[name] for name in ENV_VARS if name in os.environ},
        # How the process was started, for the command `stoker tune` is given in the UI's
        # "Prove it" (the interpreter's own arguments too: `python -m package.train`).
        "command": [arg[:MAX_COMMAND_ARG] for arg in sys.orig_argv[:MAX_COMMAND_ARGS]],
        "cwd": _safe(os.getcwd),
    }
    psutil = _safe(lambda: __import__("psutil"))
    if psutil is not None:
        facts["memory_total_bytes"] = _safe(lambda: psutil.virtual_memory().total)
    return facts


def gpu_facts(nvml: Nvml, *, all_gpus: bool = False) -> dict[str, Any]:
    """The driver and the GPUs the run uses, chosen as the sampler chooses them
    (`devices_in_use`): a MIG device is listed with its own name, UUID and memory, under its
    parent GPU's index (the index its device rows carry); a device NVML will not read is in
    `gpus_unreadable` with the reason."""
    if not nvml.available():
        return {"nvml": False, "nvml_error": nvml.unavailable_reason, "gpus": []}
    keys, found = devices_in_use(nvml, all_gpus=all_gpus)
    facts: dict[str, Any] = {
        "nvml": True,
        "driver_version": nvml.driver_version(),
        "cuda_driver_version": nvml.cuda_driver_version(),
        "gpus": [gpu_entry(nvml, key, found) for key in keys],
    }
    if found.refused:
        facts["gpus_unreadable"] = [
            {"device": key, "error": said(error)} for key, error in found.refused.items()
        ]
    return facts


def gpu_entry(nvml: Nvml, key: DeviceKey, found: Devices) -> dict[str, Any]:
    """One GPU's (or MIG device's) static facts; a MIG device's also name its parent GPU."""
    info = nvml.info(key)
    entry: dict[str, Any] = {
        "index": key,
        "name": info.name,
        "uuid": info.uuid,
        "memory_total_bytes": info.memory_total_bytes,
        "compute_capability": info.compute_capability,
    }
    if isinstance(key, str):
        index = nvml.parent_index(key)
        parent = nvml.info(index) if index is not None else None
        entry["index"] = index
        entry["mig"] = True
        if parent is not None:
            entry["compute_capability"] = info.compute_capability or parent.compute_capability
            entry["parent"] = {
                "name": parent.name,
                "uuid": parent.uuid,
                "memory_total_bytes": parent.memory_total_bytes,
            }
    elif key in found.mig_unlisted:
        entry["mig_devices_unlisted"] = said(found.mig_unlisted[key])
    return entry


def tensorflow_facts() -> dict[str, Any]:
    """TF/Keras versions and build, TF's GPUs, memory growth, determinism, precision policy."""
    tf = sys.modules.get("tensorflow")
    keras = sys.modules.get("keras")
    facts: dict[str, Any] = {}
    if tf is not None:
        build = _safe(lambda: dict(tf.sysconfig.get_build_info())) or {}
        facts["tensorflow_version"] = getattr(tf, "__version__", None)
        facts["tf_build"] = {
            "is_cuda_build": build.get("is_cuda_build"),
            "cuda_version": build.get("cuda_version"),
            "cudnn_version": build.get("cudnn_version"),
            "cuda_compute_capabilities": build.get("cuda_compute_capabilities"),
        }
        physical = _safe(lambda: tf.config.list_physical_devices("GPU")) or []
        facts["tf_gpus"] = [d.name for d in physical]
        facts["memory_growth"] = {
            d.name: _safe(partial(tf.config.experimental.get_memory_growth, d)) for d in physical
        }
        facts["op_determinism"] = _safe(
            lambda: tf.config.experimental.is_op_determinism_enabled()
        ) or os.environ.get("TF_DETERMINISTIC_OPS") in ("1", "true")
    if keras is not None:
        facts["keras_version"] = getattr(keras, "__version__", None)
        policy = _safe(lambda: keras.mixed_precision.global_policy().name)
        facts["mixed_precision_policy"] = policy
    return facts


def model_facts(model: Any, fit_params: dict[str, Any] | None = None) -> dict[str, Any]:
    """What a Keras model says about itself: size, precision, XLA, strategy, optimizer."""
    strategy = _safe(lambda: model.distribute_strategy)
    optimizer = _safe(lambda: model.optimizer)
    facts: dict[str, Any] = {
        "model": {
            "name": _safe(lambda: model.name),
            "param_count": _safe(model.count_params),
            "trainable_param_count": _safe(
                lambda: int(sum(int(_size(w)) for w in model.trainable_weights))
            ),
            "layers": _safe(lambda: len(model.layers)),
            "dtype_policy": _safe(lambda: model.dtype_policy.name),
        },
        "jit_compile": _safe(lambda: bool(model.jit_compile)),
        "steps_per_execution": _safe(lambda: plain_int(model.steps_per_execution)),
        "strategy": type(strategy).__name__ if strategy is not None else None,
        "replicas": _safe(lambda: int(strategy.num_replicas_in_sync)),
        "optimizer": (
            {
                "class": type(optimizer).__name__,
                "config": jsonable(_safe(optimizer.get_config)),
            }
            if optimizer is not None
            else None
        ),
        "fit_params": jsonable(fit_params or {}),
    }
    return facts


def _size(weight: Any) -> int:
    total = 1
    for dim in weight.shape:
        total *= int(dim)
    return total


def collect(
    nvml: Nvml,
    *,
    model: Any = None,
    fit_params: dict[str, Any] | None = None,
    all_gpus: bool = False,
) -> dict[str, Any]:
    """The whole report; never raises."""
    report: dict[str, Any] = {"agent": "stoker-trainer-agent"}
    for name, part in (
        ("host", lambda: host_facts()),
        ("gpu", lambda: gpu_facts(nvml, all_gpus=all_gpus)),
        ("tensorflow", tensorflow_facts),
        ("training", lambda: model_facts(model, fit_params) if model is not None else None),
    ):
        value = _safe(part)
        if value is None and name != "training":
            log.debug("environment part %s could not be read", name)
        if isinstance(value, dict):
            report.update(value)
    return jsonable(report)


def collect_later(
    nvml: Nvml,
    *,
    model: Any = None,
    fit_params: dict[str, Any] | None = None,
    all_gpus: bool = False,
    extra: dict[str, Any] | None = None,
) -> Callable[[], dict[str, Any]]:
    """`collect` for a fit, as a function that reads it on another thread (the sender's,
    before its hello) and returns the whole report, `extra` included. Only the fit's
    parameters are copied now (Keras hands each fit its own); the model and its optimizer
    are read there with the host, the GPUs and TensorFlow's build (tens of ms at a process's
    first run): on the training thread the model's facts took ~0.5 ms of every fit's start,
    its optimizer's learning rate an eager variable read."""
    params = _safe(lambda: jsonable(fit_params or {}))

    def finish() -> dict[str, Any]:
        report = collect(nvml, all_gpus=all_gpus)
        if model is not None:
            training = _safe(lambda: jsonable(model_facts(model, params)))
            if isinstance(training, dict):
                report.update(training)
        report.update(jsonable(extra or {}))
        return report

    return finish
