"""Ingest benchmark: N concurrent agents (real WebSocket clients) stream step batches into a
real `stoker serve`; prints committed step rows/s and ack latency p50/p99 against the targets.

    .venv/bin/python -m bench.ingest [--agents 8] [--batch 5000] [--seconds 15] [--postgres]

Each agent keeps `--window` batches in flight (an ack arrives only after the commit). Frames
are serialised before the clock starts, so the client costs little CPU on the same machine.
The default batch is what the agent sends at high step rates: a flush (every second) cut
into batches of `max_batch_rows` (5,000) steps.
"""

import argparse
import asyncio
import json
import os
import statistics
import tempfile
import time
import uuid
from pathlib import Path

import httpx
import psutil
from websockets.asyncio.client import connect

from bench.database import add_database_arguments, database_cpu_s, run_with_database
from tests.harness.support import ServerProcess
from trainer_agent.config import AgentConfig

TARGET_ROWS_PER_S = 250_000  # issue 30, on PostgreSQL too
TARGET_ACK_P99_MS = 250.0


def _frame(seq: int, first: int, n: int) -> str:
    steps = list(range(first, first + n))
    return json.dumps(
        {
            "type": "batch",
            "seq": seq,
            "steps": {
                "step": steps,
                "t": [1.7e9 + s * 0.05 for s in steps],
                "dur": [0.05 + (s % 7) * 1e-3 for s in steps],
                "wait": [0.004 + (s % 3) * 1e-3 for s in steps],
                "batch_size": [256] * n,
            },
        }
    )


async def _agent(
    url: str, payloads: list[str], batch: int, window: int, stop_at: float, out: dict
) -> None:
    frames = len(payloads)
    hello = {"type": "hello", "protocol": 1, "run_key": uuid.uuid4().hex, "name": "bench"}
    async with connect(url, max_size=None, compression=None) as ws:
        await ws.send(json.dumps(hello))
        json.loads(await ws.recv())
        sent_at: dict[int, float] = {}
        next_seq, acked = 1, 0
        while True:
            while next_seq <= frames and len(sent_at) < window and time.perf_counter() < stop_at:
                sent_at[next_seq] = time.perf_counter()
                await ws.send(payloads[next_seq - 1])
                next_seq += 1
            if not sent_at:
                break
            reply = json.loads(await ws.recv())
            assert reply["type"] == "ack", reply
            now = time.perf_counter()
            out["latencies"].append(now - sent_at.pop(reply["seq"]))
            out["rows"] += batch
            out["last_ack"] = max(out["last_ack"], now)
            acked += 1


async def _run(url: str, agents: int, batch: int, seconds: float, window: int) -> dict:
    # Every agent sends the same frames (its own run key makes them a separate run).
    frames = int(seconds * TARGET_ROWS_PER_S * 2 / agents / batch) + 10
    payloads = [_frame(seq, (seq - 1) * batch, batch) for seq in range(1, frames + 1)]
    out = {"latencies": [], "rows": 0, "last_ack": 0.0}
    start = time.perf_counter()
    await asyncio.gather(
        *(_agent(url, payloads, batch, window, start + seconds, out) for _ in range(agents))
    )
    out["elapsed"] = out["last_ack"] - start
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--agents", type=int, default=8)
    parser.add_argument(
        "--batch", type=int, default=AgentConfig.max_batch_rows, help="steps per batch"
    )
    parser.add_argument("--window", type=int, default=2, help="batches in flight per agent")
    parser.add_argument("--seconds", type=float, default=15.0)
    add_database_arguments(parser)
    run_with_database(parser.parse_args(), _bench)


def _bench(args: argparse.Namespace) -> None:

    with tempfile.TemporaryDirectory(prefix="stoker-bench-") as tmp:
        env = {"STOKER_DATABASE_URL": args.database_url} if args.database_url else {}
        server = ServerProcess(data_dir=Path(tmp), env=env).start()
        assert server.process is not None
        print(f"server pid          {server.process.pid}", flush=True)
        try:
            server_process = psutil.Process(server.process.pid)
            cpu_before = server_process.cpu_times()
            database_before = database_cpu_s(args)
            result = asyncio.run(
                _run(
                    f"{server.ws_url}/api/v1/agent",
                    args.agents,
                    args.batch,
                    args.seconds,
                    args.window,
                )
            )
            cpu_after = server_process.cpu_times()
            database_after = database_cpu_s(args)
            stored = sum(
                r["summary"]["steps"]
                for r in httpx.get(f"{server.url}/api/v1/runs", params={"limit": 1000}).json()[
                    "data"
                ]
            )
        finally:
            server.stop()
        db_bytes = sum(p.stat().st_size for p in Path(tmp).glob("stoker.db*"))
    lat = sorted(result["latencies"])
    p50 = statistics.median(lat) * 1000
    p99 = lat[min(len(lat) - 1, int(len(lat) * 0.99))] * 1000
    rate = result["rows"] / result["elapsed"]
    print(f"database            {args.database_url or 'sqlite (WAL)'}")
    print(f"machine             {os.cpu_count()} cores, load average {os.getloadavg()[0]:.1f}")
    print(f"agents x batch      {args.agents} x {args.batch} steps, window {args.window}")
    print(
        f"acked step rows     {result['rows']:,} in {result['elapsed']:.2f} s (stored: {stored:,})"
    )
    ratio = rate / TARGET_ROWS_PER_S
    print(f"committed rows/s    {rate:,.0f}   target >= {TARGET_ROWS_PER_S:,}  ratio {ratio:.2f}")
    print(f"ack latency p50     {p50:.1f} ms")
    ratio = p99 / TARGET_ACK_P99_MS
    print(
        f"ack latency p99     {p99:.1f} ms   target < {TARGET_ACK_P99_MS:.0f} ms  ratio {ratio:.2f}"
    )
    user_s = cpu_after.user - cpu_before.user
    system_s = cpu_after.system - cpu_before.system
    server_cpu_s = user_s + system_s
    print(
        f"server CPU          {server_cpu_s / result['rows'] * 1e6:.2f} us per step row "
        f"({user_s / result['rows'] * 1e6:.2f} user, {system_s / result['rows'] * 1e6:.2f} "
        f"system; {server_cpu_s / result['elapsed']:.2f} cores busy)"
    )
    if database_before is not None and database_after is not None:
        database_s = database_after - database_before
        print(
            f"postgres CPU        {database_s / result['rows'] * 1e6:.2f} us per step row "
            f"({database_s / result['elapsed']:.2f} cores busy)"
        )
    if db_bytes:
        per_row = db_bytes / max(stored, 1)
        print(f"sqlite file bytes   {db_bytes:,} ({per_row:.1f} per step row, all tables)")


if __name__ == "__main__":
    main()
