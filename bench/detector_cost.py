"""What does one detector tick cost as runs and rules grow? (In process, no I/O.)

Builds `Detectors` with N watched runs (each window full: 30 s of 10 ms steps with measured
wait, 1 Hz samples of 8 GPUs and the host) and R enabled rules, then times `tick()` once
steady (no verdict or alert changes, so no writes), and the ingest-side `observe_batch` of
one 50-step batch. Prints microseconds per tick, per run and per (run, rule) pair, and the
Python function calls of one steady tick (a count the machine's load does not change).

Usage: .venv/bin/python -m bench.detector_cost [--runs 10,100,1000] [--rules 3,30]
"""

import argparse
import asyncio
import sys
import time
from pathlib import Path
from typing import cast

from stoker_server.core.models import AlertMetric, AlertRule, Comparison, Run, RunStatus
from stoker_server.core.settings import Settings
from stoker_server.diagnosis.detectors import Detectors
from stoker_server.diagnosis.effects import DiagnosisEffects
from stoker_server.diagnosis.webhooks import Delivery
from stoker_server.ingest.protocol import Batch
from stoker_server.ingest.retention import DiskUsage
from stoker_server.ingest.writer import Writer
from stoker_server.live.agents import AgentLink, ConnectedAgents
from stoker_server.live.hub import LiveHub


class NoWriter:
    async def run(self, fn, /, **kwargs):
        raise AssertionError("a steady tick should not write")


def _refuse(delivery: Delivery) -> bool:
    raise AssertionError("a steady tick should deliver nothing")


async def _ignore(message: dict) -> None:
    pass


def _batch(seq: int, first: int, t0: float, n: int = 50) -> Batch:
    steps = list(range(first, first + n))
    return Batch.model_validate(
        {
            "type": "batch",
            "seq": seq,
            "steps": {
                "step": steps,
                "t": [t0 + i * 0.01 for i in range(n)],
                "dur": [0.01] * n,
                "wait": [0.0001] * n,
                "batch_size": [64] * n,
            },
            "device": {
                "t": [t0] * 8,
                "gpu": list(range(8)),
                "util": [95.0] * 8,
                "mem_used": [1e9] * 8,
                "mem_total": [8e10] * 8,
                "temp_c": [60.0] * 8,
            },
            "host": {"t": [t0], "proc_cpu": [120.0], "sys_cpu": [40.0]},
        }
    )


def measure(runs: int, rules: int) -> tuple[float, float, int]:
    settings = Settings(data_dir=Path("/tmp"))
    connections = ConnectedAgents()
    writer = cast("Writer", NoWriter())
    effects = DiagnosisEffects(
        writer=writer, publisher=LiveHub(16), submit_delivery=_refuse, capture_profile=None
    )
    detectors = Detectors(
        settings=settings,
        writer=writer,
        effects=effects,
        connected=connections.run_ids,
        disk=DiskUsage(),
    )
    metrics = list(AlertMetric)
    detectors.use_rules(
        AlertRule(
            id=i + 1,
            name=f"r{i}",
            metric=metrics[i % len(metrics)],
            comparison=Comparison.gt,
            threshold=1e12,
            for_s=30,
            only_while_stepping=False,
        )
        for i in range(rules)
    )
    for run_id in range(1, runs + 1):
        run = Run(id=run_id, name=f"run{run_id}", run_key=f"k{run_id}", status=RunStatus.running)
        connections.attach(run_id, AgentLink(rank=0, send=_ignore))
        detectors.attach(run)
        for k in range(60):  # 30 s of steps, 0.5 s per batch
            detectors.observe_batch(run, _batch(k + 1, k * 50, 1.7e9 + k * 0.5))
    now = time.monotonic()
    for run_id, window in detectors.runs.windows.items():  # settled verdicts: a steady tick
        window.last_step_at = now  # setup took a while; the runs are stepping, not stalled
        verdict = detectors.diagnose_now(run_id)
        assert verdict is not None
        detectors.runs.verdicts[run_id] = verdict
    ticks = 5

    async def timed() -> float:
        started = time.perf_counter()
        for _ in range(ticks):
            for window in detectors.runs.windows.values():
                window.dirty = True  # as if every run sent a batch since the last tick
            await detectors.tick()
        return (time.perf_counter() - started) / ticks

    tick_s = asyncio.run(timed())
    calls = asyncio.run(_calls_of(detectors))
    run = Run(id=1, name="run1", run_key="k1", status=RunStatus.running)
    batch = _batch(999, 10_000, 1.7e9 + 31)
    started = time.perf_counter()
    for _ in range(200):
        detectors.observe_batch(run, batch)
    observe_s = (time.perf_counter() - started) / 200
    return tick_s, observe_s, calls


async def _calls_of(detectors: Detectors) -> int:
    """Python function calls in one more steady tick: a count the machine's load leaves alone."""
    for window in detectors.runs.windows.values():
        window.dirty = True
    calls = 0

    def count(frame: object, event: str, arg: object) -> None:
        nonlocal calls
        calls += event == "call"

    sys.setprofile(count)
    try:
        await detectors.tick()
    finally:
        sys.setprofile(None)
    return calls


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", default="10,100,1000")
    parser.add_argument("--rules", default="3,30")
    args = parser.parse_args()
    for rules in (int(r) for r in args.rules.split(",")):
        for runs in (int(r) for r in args.runs.split(",")):
            tick_s, observe_s, calls = measure(runs, rules)
            print(
                f"runs={runs:5d} rules={rules:3d}: tick {tick_s * 1e3:8.2f} ms "
                f"({tick_s / runs * 1e6:6.1f} µs/run, {tick_s / (runs * rules) * 1e6:5.2f} "
                f"µs per run-rule pair, {calls} Python calls); observe_batch "
                f"{observe_s * 1e6:6.1f} µs",
                flush=True,
            )


if __name__ == "__main__":
    main()
