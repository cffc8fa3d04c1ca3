"""Builds the web UI into backend/stoker_server/static before the Python files are collected, so the
wheel (and an editable install from a clone) serves it. The project's metadata is in pyproject.toml.

From a clone, `npm ci && npm run build` runs in frontend/ when backend/stoker_server/static is
missing or older than the UI's sources (Node.js 20+ needed). From an sdist, the UI it carries is
used. `STOKER_SKIP_UI_BUILD=1` skips the build (the server then says the UI is not built).
"""

import os
import shutil
import subprocess
from pathlib import Path

from setuptools import setup
from setuptools.command.build_py import build_py
from setuptools.command.sdist import sdist

ROOT = Path(__file__).resolve().parent
FRONTEND = ROOT / "frontend"
INDEX = ROOT / "backend" / "stoker_server" / "static" / "index.html"
UI_SOURCES = ("src", "public", "index.html", "package.json", "package-lock.json", "vite.config.ts")
HOW_TO = (
    "install Node.js 20+ (npm) and run `make build` (or: cd frontend && npm ci && npm run build)"
)


def _newest_source_mtime() -> float:
    newest = 0.0
    for name in UI_SOURCES:
        path = FRONTEND / name
        files = path.rglob("*") if path.is_dir() else [path]
        newest = max([newest, *(f.stat().st_mtime for f in files if f.is_file())])
    return newest


def build_ui() -> None:
    if os.environ.get("STOKER_SKIP_UI_BUILD", "").lower() in ("1", "true", "yes"):
        return
    if not (FRONTEND / "package.json").exists():  # an sdist: it carries the built UI
        if not INDEX.exists():
            raise SystemExit(f"Stoker: this source has no built UI ({INDEX}) and no frontend/")
        return
    if INDEX.exists() and INDEX.stat().st_mtime >= _newest_source_mtime():
        return
    npm = shutil.which("npm")
    if npm is None:
        raise SystemExit(f"Stoker: the web UI is not built or is out of date; {HOW_TO}")
    lock = FRONTEND / "node_modules" / ".package-lock.json"
    steps = [[npm, "run", "build"]]
    if not lock.exists() or lock.stat().st_mtime < (FRONTEND / "package-lock.json").stat().st_mtime:
        steps.insert(0, [npm, "ci", "--omit=dev", "--no-audit", "--no-fund"])
    for step in steps:
        if subprocess.run(step, cwd=FRONTEND).returncode != 0:
            raise SystemExit(f"Stoker: `{' '.join(step[1:])}` failed in frontend/ (see above)")


class BuildPyWithUI(build_py):
    def run(self) -> None:
        build_ui()
        super().run()


class SdistWithUI(sdist):
    def run(self) -> None:
        build_ui()
        super().run()


setup(cmdclass={"build_py": BuildPyWithUI, "sdist": SdistWithUI})
