"""Retention's cost to ingest and queries: the same load with and without a
compaction running.

A server stores `--old-runs` ended runs of `--old-steps` steps (and one device sample per
second per GPU) with retention off, then serves a load for `--seconds`: `--agents` WebSocket
agents streaming step batches (bench.ingest's agents) while a reader asks for the runs list
and a kept run's step chart in a loop. The server is restarted with retention on (every old
run is due), and the same load runs while it compacts. Prints, for both phases, committed
step rows/s, ack latency p50/p99 and read latency p50/p99; the compaction's duration, rows
removed and database size before and after.

    .venv/bin/python -m bench.retention [--old-runs 4] [--old-steps 250000] [--seconds 10]
                                        [--postgres]
"""

import argparse
import asyncio
import os
import statistics
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

import httpx
from sqlalchemy import create_engine

from bench.database import add_database_arguments, run_with_database
from bench.ingest import _run as ingest_load
from stoker_server.ingest.retention import database_bytes
from tests.harness.support import ServerProcess, wait_for

BATCH = 5_000


def _old_run_batches(steps: int, gpus: int = 4) -> list[dict[str, Any]]:
    batches = []
    for seq, first in enumerate(range(0, steps, BATCH), start=1):
        s = list(range(first, min(first + BATCH, steps)))
        seconds = list(range(first // 20, (s[-1] + 1) // 20))  # 20 steps a second
        batch: dict[str, Any] = {
            "type": "batch",
            "seq": seq,
            "steps": {
                "step": s,
                "t": [1.6e9 + k * 0.05 for k in s],
                "dur": [0.05 + (k % 7) * 1e-3 for k in s],
                "wait": [(k % 5) * 1e-3 for k in s],
            },
        }
        if seconds:
            batch["device"] = {
                "t": [1.6e9 + k for k in seconds for _ in range(gpus)],
                "gpu": [g for _ in seconds for g in range(gpus)],
                "util": [float((k + g) % 100) for k in seconds for g in range(gpus)],
            }
        batches.append(batch)
    return batches


def _store_old_runs(server: ServerProcess, runs: int, steps: int) -> list[int]:
    batches = _old_run_batches(steps)
    ids = []
    for _ in range(runs):
        key = uuid.uuid4().hex
        for first in range(0, len(batches), 8):
            body: dict[str, Any] = {
                "hello": {"type": "hello", "protocol": 1, "run_key": key, "name": "old"},
                "batches": batches[first : first + 8],
            }
            if first + 8 >= len(batches):
                body["end"] = {"type": "end"}
            response = httpx.post(f"{server.url}/api/v1/ingest", json=body, timeout=600)
            response.raise_for_status()
        ids.append(response.json()["run_id"])
    return ids


async def _reader(url: str, run_id: int, stop_at: float, out: list[float]) -> None:
    async with httpx.AsyncClient(base_url=url, timeout=60) as client:
        while time.perf_counter() < stop_at:
            for path in ("/api/v1/runs?limit=50", f"/api/v1/runs/{run_id}/steps"):
                started = time.perf_counter()
                (await client.get(path)).raise_for_status()
                out.append(time.perf_counter() - started)
            await asyncio.sleep(0.05)


async def _phase(server: ServerProcess, kept_run: int, args: argparse.Namespace) -> dict:
    reads: list[float] = []
    stop_at = time.perf_counter() + args.seconds
    load, _ = await asyncio.gather(
        ingest_load(f"{server.ws_url}/api/v1/agent", args.agents, 1000, args.seconds, 2, dict),
        _reader(server.url, kept_run, stop_at, reads),
    )
    return {**load, "reads": reads}


def _percentile(values: list[float], q: float) -> float:
    if not values:
        return float("nan")
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))] * 1000


def _metric(server: ServerProcess, name: str) -> float | None:
    for line in httpx.get(f"{server.url}/metrics").text.splitlines():
        if line.startswith(name + " "):
            return float(line.split()[1])
    return None


def _database_bytes(url: str) -> int:
    engine = create_engine(url)
    try:
        with engine.connect() as connection:
            return database_bytes(connection)
    finally:
        engine.dispose()


def _print_phase(label: str, result: dict) -> None:
    rate = result["rows"] / result["elapsed"]
    acks, reads = result["latencies"], result["reads"]
    print(
        f"{label:22s} {rate:>10,.0f} rows/s   ack p50 {statistics.median(acks) * 1000:6.1f} ms "
        f"p99 {_percentile(acks, 0.99):7.1f} ms   reads {len(reads):4d}: "
        f"p50 {_percentile(reads, 0.5):6.1f} ms p99 {_percentile(reads, 0.99):7.1f} ms"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--old-runs", type=int, default=4)
    parser.add_argument("--old-steps", type=int, default=250_000)
    parser.add_argument("--agents", type=int, default=4)
    parser.add_argument("--seconds", type=float, default=10.0)
    add_database_arguments(parser)
    run_with_database(parser.parse_args(), _bench)


def _bench(args: argparse.Namespace) -> None:
    with tempfile.TemporaryDirectory(prefix="stoker-bench-") as tmp:
        env = {"STOKER_DATABASE_URL": args.database_url} if args.database_url else {}
        env["STOKER_HEARTBEAT_TIMEOUT_S"] = "3600"
        server = ServerProcess(data_dir=Path(tmp), env=env).start()
        try:
            started = time.perf_counter()
            old = _store_old_runs(server, args.old_runs, args.old_steps)
            print(
                f"stored               {args.old_runs} old runs x {args.old_steps:,} steps "
                f"in {time.perf_counter() - started:.1f} s",
                flush=True,
            )
            kept = _store_old_runs(server, 1, 20_000)[0]
            httpx.patch(f"{server.url}/api/v1/runs/{kept}", json={"pinned": True})
            quiet = asyncio.run(_phase(server, kept, args))
        finally:
            server.stop()
        url = args.database_url or f"sqlite:///{Path(tmp) / 'stoker.db'}"
        size_before = _database_bytes(url)
        env |= {"STOKER_RETENTION_TIME_S": "1", "STOKER_RETENTION_INTERVAL_S": "0.2"}
        server = ServerProcess(data_dir=Path(tmp), env=env).start()
        try:
            started = time.perf_counter()
            busy = asyncio.run(_phase(server, kept, args))
            wait_for(
                lambda: _metric(server, "stoker_retention_compacted_runs") == args.old_runs,
                timeout_s=3600,
                what="every old run compacted",
            )
            took = time.perf_counter() - started
            rows = _metric(server, "stoker_retention_compacted_rows") or 0
            assert all(server.get(f"/api/v1/runs/{run}")["compacted_at"] for run in old), (
                "an old run was not compacted"
            )
        finally:
            server.stop()
        size_after = _database_bytes(url)
    print(f"database            {args.database_url or 'sqlite (WAL)'}")
    print(f"machine             {os.cpu_count()} cores, load average {os.getloadavg()[0]:.1f}")
    print(f"load                {args.agents} agents x 1,000-step batches, {args.seconds:.0f} s")
    _print_phase("without compaction", quiet)
    _print_phase("while compacting", busy)
    ratio = (busy["rows"] / busy["elapsed"]) / (quiet["rows"] / quiet["elapsed"])
    print(f"ingest ratio        {ratio:.2f} (while compacting / without)")
    print(
        f"compaction          {args.old_runs} runs, {rows:,.0f} raw rows removed, done "
        f"{took:.1f} s after the restart (the load ran the first {args.seconds:.0f} s)"
    )
    print(
        f"database bytes      {size_before:,.0f} before, {size_after:,.0f} after "
        "(after also includes the second load; freed pages are reused, not returned)"
    )


if __name__ == "__main__":
    main()
