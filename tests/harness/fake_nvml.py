"""Build and drive the fake `libnvidia-ml.so.1` (tests/harness/fake_nvml.c).

The real `pynvml` loads it: in this process by preloading it by absolute path (its SONAME is
`libnvidia-ml.so.1`, so pynvml's `CDLL("libnvidia-ml.so.1")` finds the loaded copy), or in a
child process through `LD_LIBRARY_PATH`. Values and injected errors come from a control
file that `FakeNvml.write` replaces atomically.
"""

import ctypes
import os
import shutil
import subprocess
import sysconfig
from pathlib import Path
from typing import Any

SOURCE = Path(__file__).with_name("fake_nvml.c")
LIBRARY_NAME = "libnvidia-ml.so.1"

# NVML return codes used by tests.
NOT_SUPPORTED = 3
DRIVER_NOT_LOADED = 9
UNKNOWN = 999


def nvml_include_dir() -> Path | None:
    """`nvml.h` from the `nvidia-nvml-dev-cu12` wheel."""
    site = Path(sysconfig.get_paths()["purelib"])
    for header in sorted(site.glob("nvidia/*/include/nvml.h")):
        return header.parent
    return None


def build(out_dir: Path) -> Path:
    """Compile the fake into `out_dir/libnvidia-ml.so.1` and return its path."""
    include = nvml_include_dir()
    compiler = shutil.which("gcc") or shutil.which("cc")
    if include is None or compiler is None:
        raise FileNotFoundError("building the fake NVML needs gcc and nvidia-nvml-dev-cu12")
    out_dir.mkdir(parents=True, exist_ok=True)
    library = out_dir / LIBRARY_NAME
    subprocess.run(
        [compiler, "-shared", "-fPIC", "-O1", "-Wall", "-Werror", f"-I{include}",
         f"-Wl,-soname,{LIBRARY_NAME}", "-o", str(library), str(SOURCE), "-lpthread"],
        check=True, capture_output=True, text=True,
    )  # fmt: skip
    return library


class FakeNvml:
    """The control file of one test: GPUs, values and injected errors."""

    def __init__(self, library: Path, control: Path) -> None:
        self.library = library
        self.control = control
        self.write()

    def write(
        self,
        *,
        device_count: int = 1,
        driver_version: str = "550.54.15",
        cuda_driver_version: int = 12040,
        errors: dict[str, int] | None = None,
        **gpus: dict[str, Any],
    ) -> None:
        """Replace the control file; `gpu0={"util": 10}` sets GPU 0's values."""
        lines = [
            f"device_count {device_count}",
            f"driver_version {driver_version}",
            f"cuda_driver_version {cuda_driver_version}",
        ]
        lines += [f"error {name} {code}" for name, code in (errors or {}).items()]
        for gpu, values in gpus.items():
            lines += [f"{gpu}.{key} {value}" for key, value in values.items()]
        temporary = self.control.with_suffix(".tmp")
        temporary.write_text("\n".join(lines) + "\n")
        os.replace(temporary, self.control)

    def env(self) -> dict[str, str]:
        """Environment for a child process that should load the fake."""
        return {
            "LD_LIBRARY_PATH": str(self.library.parent),
            "FAKE_NVML_CONTROL": str(self.control),
        }

    def preload(self) -> None:
        """Load the fake into this process so the real pynvml binds to it."""
        os.environ["FAKE_NVML_CONTROL"] = str(self.control)
        ctypes.CDLL(str(self.library), mode=ctypes.RTLD_GLOBAL)
