"""The package as a user installs it: build the wheel, install it into fresh virtual
environments, check what each install can do, and print install sizes and import times.

    .venv/bin/python -m bench.package_check [--wheel dist/stoker-X-py3-none-any.whl]

1. `python -m build` (the UI is built into backend/stoker_server/static by setup.py), unless
   --wheel.
2. A fresh venv with the base install (the agent): `stoker --version`, `stoker doctor`,
   importing trainer_agent imports no server module, `stoker serve` says what to install.
3. The same venv plus `stoker[server]`: `stoker serve` serves the UI's index.html at /.
Sizes are the growth of site-packages; import times come from `python -X importtime`
(median of 5 cold-ish runs, the OS file cache warm). pip uses its local cache.
"""

import argparse
import os
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
import zipfile
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
SERVER_MODULES = ("fastapi", "sqlmodel", "uvicorn", "alembic", "prometheus_client", "sqlalchemy")

# The only import names the wheel installs: none generic, none a user's package might have.
TOP_LEVEL = {"stoker_server", "trainer_agent"}


def top_level_packages(wheel: Path) -> set[str]:
    """The top-level import names in a wheel: its folders other than its metadata."""
    with zipfile.ZipFile(wheel) as archive:
        names = {name.split("/")[0] for name in archive.namelist() if "/" in name}
    return {name for name in names if not name.endswith((".dist-info", ".data"))}


def sh(*command: str | Path, **kwargs: object) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(c) for c in command], check=True, capture_output=True, text=True, **kwargs
    )  # type: ignore[call-overload]


def source_copy(to: Path) -> Path:
    """The files git tracks or would track, and the built UI, copied with their times: the
    wheel is built from them, not from the clone, whose build/ and *.egg-info may be stale or
    being written by an editable install running at the same time."""
    listed = sh("git", "ls-files", "-z", "--cached", "--others", "--exclude-standard", cwd=REPO)
    static = REPO / "backend" / "stoker_server" / "static"
    names = [name for name in listed.stdout.split("\0") if name]
    names += [str(f.relative_to(REPO)) for f in static.rglob("*") if f.is_file()]
    for name in names:
        if (REPO / name).is_file():
            (to / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(REPO / name, to / name)
    return to


def build_wheel(out: Path) -> Path:
    source = source_copy(out.parent / "source")
    sh(sys.executable, "-m", "build", "--wheel", "--outdir", out, source)
    return next(out.glob("stoker-*.whl"))


def site_packages(venv: Path) -> Path:
    return next((venv / "lib").glob("python3*/site-packages"))


def du_bytes(path: Path) -> int:
    return sum(f.stat().st_size for f in path.rglob("*") if f.is_file() and not f.is_symlink())


def import_ms(python: Path, module: str, runs: int = 5) -> float:
    """Cumulative import time of `module` (µs in -X importtime's last line), in ms."""
    times = []
    for _ in range(runs):
        done = sh(python, "-X", "importtime", "-c", f"import {module}")
        last = [line for line in done.stderr.splitlines() if line.startswith("import time:")][-1]
        times.append(int(last.split("|")[1]) / 1000)
    return statistics.median(times)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def check_serve(stoker: Path, data_dir: Path) -> str:
    """Start `stoker serve`, return the body of GET /."""
    port = free_port()
    server = subprocess.Popen(
        [stoker, "serve", "--port", str(port), "--data-dir", str(data_dir)],
        stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT,
    )  # fmt: skip
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/", timeout=2) as response:
                    return response.read().decode()
            except OSError:
                if server.poll() is not None or time.monotonic() > deadline:
                    raise
                time.sleep(0.2)
    finally:
        server.terminate()
        server.wait(timeout=15)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--wheel", type=Path, default=None, help="skip the build, use this")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="stoker-package-") as tmp:
        root = Path(tmp)
        started = time.monotonic()
        wheel = args.wheel or build_wheel(root / "dist")
        print(f"wheel: {wheel.name}, {wheel.stat().st_size / 1e3:.0f} kB "
              f"(built in {time.monotonic() - started:.0f} s)")  # fmt: skip
        top_level = top_level_packages(wheel)
        print("  top-level packages:", ", ".join(sorted(top_level)))
        assert top_level == TOP_LEVEL, f"the wheel installs {sorted(top_level)}"

        venv = root / "venv"
        sh(sys.executable, "-m", "venv", venv)
        python, stoker = venv / "bin" / "python", venv / "bin" / "stoker"
        sh(python, "-m", "pip", "install", "--quiet", "--upgrade", "pip")
        empty = du_bytes(site_packages(venv))

        started = time.monotonic()
        sh(python, "-m", "pip", "install", "--quiet", wheel)
        base = du_bytes(site_packages(venv)) - empty
        print(f"base install (agent): +{base / 1e6:.1f} MB in {time.monotonic() - started:.0f} s")
        print("  stoker --version:", sh(stoker, "--version").stdout.strip())
        doctor = subprocess.run([stoker, "doctor"], capture_output=True, text=True)
        print(f"  stoker doctor: exit {doctor.returncode}, {len(doctor.stdout.splitlines())} lines")
        assert "Traceback" not in doctor.stdout + doctor.stderr, doctor.stderr
        loaded = sh(
            python, "-c",
            "import sys, trainer_agent.capture.session, trainer_agent.cli.main, "
            "trainer_agent.delivery.upload\n"
            f"print(sorted(m for m in {SERVER_MODULES!r} if m in sys.modules))",
        ).stdout.strip()  # fmt: skip
        print("  server modules after importing the agent:", loaded)
        assert loaded == "[]", loaded
        autolog = sh(
            stoker, "run", "--", python, "-c",
            "import sys; print(sys.modules['trainer_agent.capture.autolog']._hook is not None)",
        ).stdout.strip()  # fmt: skip
        print("  stoker run: autolog active in the script:", autolog)
        assert autolog == "True", autolog
        refused = subprocess.run([stoker, "serve"], capture_output=True, text=True)
        print(f"  stoker serve without the server: exit {refused.returncode}:",
              refused.stderr.strip().replace("\n", " / "))  # fmt: skip
        assert refused.returncode != 0 and "pip install 'stoker[server]'" in refused.stderr
        agent_ms = import_ms(python, "trainer_agent.capture.session")
        print(f"  import trainer_agent (session, sender, samplers): {agent_ms:.0f} ms")

        started = time.monotonic()
        sh(python, "-m", "pip", "install", "--quiet", f"{wheel}[server]")
        server = du_bytes(site_packages(venv)) - empty - base
        print(f"server extra: +{server / 1e6:.1f} MB in {time.monotonic() - started:.0f} s")
        index = check_serve(stoker, root / "data")
        assert "<div id=" in index or "<script" in index, index[:200]
        print("  stoker serve: GET / returns the UI's index.html")
        app_module = sh(
            python, "-c", "import importlib.util as u; "
            "print(next(m for m in ('stoker_server.service.app', 'stoker_server.app') if "
            "u.find_spec(m)))",
        ).stdout.strip()  # fmt: skip
        print(f"  import {app_module}: {import_ms(python, app_module):.0f} ms")
        print(f"  stoker --version wall time: {_wall_ms(stoker, '--version'):.0f} ms")
    return 0


def _wall_ms(*command: str | Path) -> float:
    times = []
    for _ in range(5):
        started = time.perf_counter()
        sh(*command)
        times.append((time.perf_counter() - started) * 1000)
    return statistics.median(times)


if __name__ == "__main__":
    os.environ.setdefault("PIP_DISABLE_PIP_VERSION_CHECK", "1")
    sys.exit(main())
