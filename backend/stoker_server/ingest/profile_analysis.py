"""What xprof (the optional `stoker[profile]` extra) says about a trace.

Only xprof's own converters read the trace; nothing here parses it. Its tools answer with
Google DataTable JSON: the input-pipeline analyzer's second table has one row per marked
step (`train <step>`) with the time breakdown, its third the per-iterator table; the
framework-op table lists ops by self time.

A trace is the agent's upload: untrusted input to a large C++ converter. It is analysed in a
child process (`trace_child`), one at a time, within a time and an address-space limit
(`AnalysisLimits`): a trace that makes the converter run away, allocate without bound or
crash costs that child, never the server.
"""

import asyncio
import importlib.util
import itertools
import json
import logging
import os
import shutil
import signal
import subprocess
import sys
import tempfile
from collections.abc import Callable, Coroutine, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

log = logging.getLogger("stoker")

NOT_INSTALLED = "install stoker[profile] to analyse on the server"
BREAKDOWN = {  # xprof's step-table columns → the names shown
    "deviceComputeTimeMs": "device_compute_ms", "deviceToDeviceTimeMs": "device_to_device_ms",
    "deviceCollectivesTimeMs": "collectives_ms", "hostComputeTimeMs": "host_compute_ms",
    "kernelLaunchTimeMs": "kernel_launch_ms", "infeedTimeMs": "input_ms",
    "outfeedTimeMs": "output_ms", "compileTimeMs": "compile_ms", "otherTimeMs": "other_ms",
    "stepTimeMs": "step_ms",
}  # fmt: skip
TOP_OPS = 15
TOP_ITERATORS = 15


def _tool(paths: list[Path], tool: str) -> Any:
    from xprof.convert import raw_to_tool_data

    data, _content_type = raw_to_tool_data.xspace_to_tool_data([str(p) for p in paths], tool, {})
    return json.loads(data)


def _records(table: dict[str, Any]) -> list[dict[str, Any]]:
    ids = [column["id"] for column in table.get("cols", [])]
    return [
        {name: cell.get("v") if cell else None for name, cell in zip(ids, row["c"], strict=False)}
        for row in table.get("rows", [])
    ]


@contextmanager
def _alone(paths: list[Path]) -> Iterator[list[Path]]:
    """The traces linked into a directory of their own, for the time of one analysis.

    xprof caches what it derived from a directory's traces in that directory
    (`ALL_HOSTS.op_stats_v2.pb`) and answers later calls from the cache, whichever of the
    directory's traces they name: one worker's trace analysed beside the others' would get
    the merged answer, and a trace that arrives late the answer without it.
    """
    directory = Path(tempfile.mkdtemp(prefix="stoker-xprof-"))
    try:
        linked = []
        for path in paths:
            target = directory / path.name
            try:
                os.link(path, target)
            except OSError:  # another file system
                shutil.copyfile(path, target)
            linked.append(target)
        yield linked
    finally:
        shutil.rmtree(directory, ignore_errors=True)


Analysed = tuple[dict[str, Any], float | None, tuple[int, int] | None]


@dataclass(frozen=True)
class AnalysisLimits:
    """What one analysis may take: its child is killed after `timeout_s`, and cannot map more
    than `max_bytes` of address space."""

    timeout_s: float = 300.0
    max_bytes: int = 8 * 2**30


class AnalysisFailed(Exception):
    """The child analysing a trace failed, ran out of time or memory; the message says which."""


def analyse(paths: list[Path], limits: AnalysisLimits | None = None) -> Analysed:
    """(analysis, the profiler's input share, the step range it analysed) of the traces of one
    capture, from a child process within `limits`: several traces (one per worker, each named
    for its host) are analysed together, as xprof merges the hosts of one capture. Blocks
    (call it off the event loop); raises AnalysisFailed."""
    if importlib.util.find_spec("xprof") is None:
        return {"available": False, "message": NOT_INSTALLED}, None, None
    limits = limits or AnalysisLimits()
    request = json.dumps({"paths": [str(p) for p in paths], "max_bytes": limits.max_bytes})
    try:
        done = subprocess.run(
            [sys.executable, "-m", "stoker_server.ingest.trace_child"],
            input=request, capture_output=True, text=True, timeout=limits.timeout_s,
        )  # fmt: skip
    except subprocess.TimeoutExpired:
        raise AnalysisFailed(
            f"it took over {limits.timeout_s:g} s and was stopped "
            "(STOKER_PROFILE_ANALYSIS_TIMEOUT_S)"
        ) from None
    if done.returncode != 0:
        raise AnalysisFailed(_child_failure(done.returncode, done.stderr, limits))
    lines = [line for line in done.stdout.splitlines() if line.strip()]
    result = json.loads(lines[-1])
    steps = result["steps"]
    return result["analysis"], result["share"], (steps[0], steps[1]) if steps else None


# How running out of address space shows: Python's, C++'s, the loader's (a library that cannot
# be mapped), the C library's.
_OUT_OF_MEMORY = ("MemoryError", "bad_alloc", "failed to map segment", "Cannot allocate memory")


def _child_failure(returncode: int, stderr: str, limits: AnalysisLimits) -> str:
    memory = (
        f"most likely over its {limits.max_bytes}-byte memory limit "
        "(STOKER_PROFILE_ANALYSIS_MAX_BYTES)"
    )
    if any(sign in stderr for sign in _OUT_OF_MEMORY):
        return f"it ran out of memory: {memory}"
    if returncode < 0:
        name = signal.Signals(-returncode).name if -returncode in signal.valid_signals() else ""
        return f"the analysing process was stopped by {name or -returncode}: {memory}"
    last = next((line for line in reversed(stderr.splitlines()) if line.strip()), "")
    return last[-500:] or f"the analysing process exited with status {returncode}"


def analyse_here(paths: list[Path]) -> Analysed:
    """The analysis itself, in this process: `trace_child` runs it."""
    try:
        import xprof  # noqa: F401
    except ImportError:  # found, but it does not import: as good as not installed
        return {"available": False, "message": NOT_INSTALLED}, None, None
    with _alone(paths) as alone:
        return _analyse(alone)


def _analyse(paths: list[Path]) -> tuple[dict[str, Any], float | None, tuple[int, int] | None]:
    pipeline = _tool(paths, "input_pipeline_analyzer")
    step_table, iterator_table = pipeline[1], pipeline[2]
    steps = []
    for record in _records(step_table):
        name = str(record.get("stepnum", ""))
        row = {short: record.get(long) for long, short in BREAKDOWN.items()}
        row["step"] = int(name.split()[-1]) if name.split() and name.split()[-1].isdigit() else None
        steps.append(row)
    total = sum(row["step_ms"] or 0.0 for row in steps)
    waited = sum(row["input_ms"] or 0.0 for row in steps)
    share = waited / total if total else None
    numbered = [row["step"] for row in steps if row["step"] is not None]
    properties = step_table.get("p", {})
    ops: list[dict[str, Any]] = [
        {
            "where": op.get("host_or_device"), "type": op.get("type"),
            "name": op.get("operation"), "count": op.get("occurrences"),
            "self_ms": (op.get("total_self_time") or 0.0) / 1000.0,
        }
        for op in _records(_tool(paths, "framework_op_stats")[0])
        if op.get("type") != "IDLE"
    ]  # fmt: skip
    ops.sort(key=lambda op: op["self_ms"], reverse=True)
    analysis = {
        "available": True,
        "hardware": properties.get("hardware_type"),
        "conclusion": properties.get("input_conclusion"),
        "step_ms_average": _number(properties.get("steptime_ms_average")),
        "breakdown_ms": {
            short: sum(row[short] or 0.0 for row in steps) / len(steps) if steps else None
            for short in BREAKDOWN.values()
        },
        "steps": steps,
        "iterators": [
            {
                "name": it.get("opName"),
                "count": it.get("count"),
                "ms": it.get("timeInMs"),
                "self_ms": it.get("selfTimeInMs"),
                "category": it.get("category"),
            }
            for it in _records(iterator_table)[:TOP_ITERATORS]
        ],
        "top_ops": ops[:TOP_OPS],
    }
    return analysis, share, _step_range(numbered)


def _step_range(numbered: list[int]) -> tuple[int, int] | None:
    """The steps the marked rows cover. With `steps_per_execution` > 1 a marker is an
    execution named by its first step, so the last one covers up to the next number."""
    if not numbered:
        return None
    ordered = sorted(set(numbered))
    stride = min((b - a for a, b in itertools.pairwise(ordered)), default=1)
    return ordered[0], ordered[-1] + stride - 1


def _number(text: Any) -> float | None:
    try:
        return float(text)
    except (TypeError, ValueError):
        return None


class AnalysisRuns:
    """One analysis at a time per profile: asked for while its analysis runs (a lost worker's
    trace came in meanwhile), the profile is analysed once more after it; and one child
    process at a time over all profiles (`one_at_a_time`). The server's own (on its
    `AppState`); used from the event loop only."""

    def __init__(self) -> None:
        self._running: dict[int, asyncio.Task[None]] = {}  # held: the loop keeps weak ones
        self._again: set[int] = set()
        # Whatever the profile, one analysis (one child process) at a time.
        self.one_at_a_time = asyncio.Semaphore(1)

    def running(self, pid: int) -> bool:
        """Whether the profile is being analysed (or is to be analysed again after)."""
        return pid in self._running

    def start(self, pid: int, analyse: Callable[[], Coroutine[Any, Any, None]]) -> None:
        if pid in self._running:
            self._again.add(pid)
            return
        task = asyncio.get_running_loop().create_task(analyse())
        self._running[pid] = task
        task.add_done_callback(lambda _: self._done(pid, analyse))

    def _done(self, pid: int, analyse: Callable[[], Coroutine[Any, Any, None]]) -> None:
        del self._running[pid]
        if pid in self._again:
            self._again.discard(pid)
            self.start(pid, analyse)
