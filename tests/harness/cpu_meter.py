"""Where the test suite's CPU goes: a pytest plugin, and its report.

A full run is CPU-bound on two cores, so its wall time comes down only with its CPU. Run

    .venv/bin/python -m pytest -p tests.harness.cpu_meter -n 2 --dist loadscope \
        tests/unit tests/server tests/fit tests/ui
    .venv/bin/python -m tests.harness.cpu_meter

Each test's CPU is its worker process's own plus that of the children it reaped meanwhile
(the servers, scripts and training processes it started and stopped); a module-scoped
server's CPU counts at its module's last test, a daemon's (PostgreSQL's) nowhere. Each run
starts the record afresh.
"""

import argparse
import collections
import json
import os
import resource
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import ARTIFACTS

OUT = Path(os.environ.get("STOKER_TEST_CPU_OUT", ARTIFACTS / "cpu-per-test.jsonl"))


def _cpu_s() -> float:
    own = resource.getrusage(resource.RUSAGE_SELF)
    reaped = resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + reaped.ru_utime + reaped.ru_stime


def pytest_configure(config: pytest.Config) -> None:
    """The run's controller (or the one process without xdist) starts the record afresh: a
    record left by an earlier run would be counted again."""
    if not hasattr(config, "workerinput"):
        OUT.parent.mkdir(parents=True, exist_ok=True)
        OUT.write_text("")


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item: pytest.Item, nextitem: pytest.Item | None) -> Iterator[None]:
    cpu, wall = _cpu_s(), time.monotonic()
    yield
    record = {"id": item.nodeid, "cpu_s": _cpu_s() - cpu, "wall_s": time.monotonic() - wall}
    with OUT.open("a") as out:  # one short line per write: the workers' lines do not mix
        out.write(json.dumps(record) + "\n")


def report(path: Path, top: int) -> str:
    records: list[dict[str, Any]] = [json.loads(line) for line in path.open()]
    cpu: collections.Counter[str] = collections.Counter()
    wall: collections.Counter[str] = collections.Counter()
    for record in records:
        module = record["id"].split("::")[0]
        cpu[module] += record["cpu_s"]
        wall[module] += record["wall_s"]
    total = sum(cpu.values())
    lines = [f"{len(records)} tests, {total:.0f} s CPU, {sum(wall.values()):.0f} s in tests"]
    lines.append(f"{'CPU s':>7} {'share':>6} {'wall s':>7}  module")
    for module, seconds in cpu.most_common(top):
        lines.append(f"{seconds:7.1f} {seconds / total:6.1%} {wall[module]:7.1f}  {module}")
    return "\n".join(lines)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("path", nargs="?", type=Path, default=OUT)
    parser.add_argument("--top", type=int, default=30)
    arguments = parser.parse_args()
    print(report(arguments.path, arguments.top))
