"""Ingest benchmark: N concurrent agents (real WebSocket clients) stream step batches into a
real `stoker serve`; prints committed step rows/s and ack latency p50/p99 against the targets.

    .venv/bin/python -m bench.ingest [--agents 8] [--batch 5000] [--seconds 15] [--postgres]
        [--durable]

Each agent keeps `--window` batches in flight (an ack arrives only after the commit). Frames
are serialised before the clock starts, so the client costs little CPU on the same machine.
The default batch is what the agent sends at high step rates: a flush (every second) cut
into batches of `max_batch_rows` (5,000) steps.

CPU per step row is printed for each process on the machine: the server, PostgreSQL (its
postmaster and every backend) and this bench's own client; on PostgreSQL also its write-ahead
log and the step table's bytes per row, and its durability settings. The throwaway PostgreSQL
of `--postgres` runs as the tests' does (fsync, synchronous_commit and full_page_writes off);
`--durable` restarts it with PostgreSQL's defaults for those three, as a user's would be.
"""

import argparse
import asyncio
import json
import os
import statistics
import subprocess
import tempfile
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import psutil
import psycopg
from sqlalchemy.engine import make_url
from websockets.asyncio.client import connect

from bench.database import add_database_arguments, database_cpu_s, run_with_database
from tests.harness.support import PG_BIN, ServerProcess
from trainer_agent.config import AgentConfig

TARGET_ROWS_PER_S = 250_000  # what ingest is to sustain, on PostgreSQL too
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


async def _run(
    url: str, agents: int, batch: int, seconds: float, window: int, cpu: Callable[[], dict]
) -> dict:
    # Every agent sends the same frames (its own run key makes them a separate run).
    frames = int(seconds * TARGET_ROWS_PER_S * 2 / agents / batch) + 10
    payloads = [_frame(seq, (seq - 1) * batch, batch) for seq in range(1, frames + 1)]
    out: dict[str, Any] = {"latencies": [], "rows": 0, "last_ack": 0.0, "cpu_before": cpu()}
    start = time.perf_counter()
    await asyncio.gather(
        *(_agent(url, payloads, batch, window, start + seconds, out) for _ in range(agents))
    )
    out["cpu_after"] = cpu()
    out["elapsed"] = out["last_ack"] - start
    return out


def _cpu_s(process: psutil.Process) -> float:
    times = process.cpu_times()
    return times.user + times.system


def _postgres(url: str) -> psycopg.Connection:
    return psycopg.connect(make_url(url).set(drivername="postgresql").render_as_string(False))


DURABILITY = ("fsync", "synchronous_commit", "full_page_writes", "wal_level", "wal_compression")


def _restart_durable(args: argparse.Namespace) -> None:
    """Restart the throwaway PostgreSQL with its defaults for fsync, synchronous_commit and
    full_page_writes (the tests' server turns them off), keeping its port and socket."""
    data_dir = args.postgres_data_dir
    port = make_url(args.database_url).port
    options = f"-p {port} -k {data_dir.parent} -c listen_addresses=127.0.0.1 -c max_connections=300"
    command = [str(PG_BIN / "pg_ctl"), "-D", str(data_dir), "-o", options, "-w", "restart"]
    command += ["-l", str(data_dir.parent / "server.log")]
    if os.geteuid() == 0:  # the cluster belongs to the postgres user (see PostgresServer)
        command = ["runuser", "-u", "postgres", "--", *command]
    subprocess.run(command, check=True, capture_output=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--agents", type=int, default=8)
    parser.add_argument(
        "--batch", type=int, default=AgentConfig.max_batch_rows, help="steps per batch"
    )
    parser.add_argument("--window", type=int, default=2, help="batches in flight per agent")
    parser.add_argument("--seconds", type=float, default=15.0)
    parser.add_argument(
        "--durable",
        action="store_true",
        help="with --postgres: fsync, synchronous_commit, full_page_writes as PostgreSQL's "
        "defaults (on), not the tests' (off)",
    )
    add_database_arguments(parser)
    run_with_database(parser.parse_args(), _bench)


def _bench(args: argparse.Namespace) -> None:
    if args.durable and getattr(args, "postgres_data_dir", None) is not None:
        _restart_durable(args)
    postgres = args.database_url is not None and args.database_url.startswith("postgresql")
    settings: dict[str, str] = {}
    wal_before = 0
    if postgres:
        with _postgres(args.database_url) as connection:
            for name in DURABILITY:
                settings[name] = str(connection.execute(f"SHOW {name}").fetchone()[0])  # type: ignore[index]
            wal_before = _wal_lsn(connection)
    with tempfile.TemporaryDirectory(prefix="stoker-bench-") as tmp:
        env = {"STOKER_DATABASE_URL": args.database_url} if args.database_url else {}
        server = ServerProcess(data_dir=Path(tmp), env=env).start()
        assert server.process is not None
        print(f"server pid          {server.process.pid}", flush=True)
        try:
            server_process, client_process = psutil.Process(server.process.pid), psutil.Process()

            def cpu() -> dict[str, float | None]:
                return {
                    "server": _cpu_s(server_process),
                    "postgres": database_cpu_s(args),
                    "client": _cpu_s(client_process),
                }

            result = asyncio.run(
                _run(
                    f"{server.ws_url}/api/v1/agent",
                    args.agents,
                    args.batch,
                    args.seconds,
                    args.window,
                    cpu,
                )
            )
            server_times = server_process.cpu_times()
            stored = sum(
                r["summary"]["steps"]
                for r in httpx.get(f"{server.url}/api/v1/runs", params={"limit": 1000}).json()[
                    "data"
                ]
            )
            in_database = _stored_steps(server, args.database_url if postgres else None)
        finally:
            server.stop()
        db_bytes = sum(p.stat().st_size for p in Path(tmp).glob("stoker.db*"))
    lat = sorted(result["latencies"])
    p50 = statistics.median(lat) * 1000
    p99 = lat[min(len(lat) - 1, int(len(lat) * 0.99))] * 1000
    rows, elapsed = result["rows"], result["elapsed"]
    rate = rows / elapsed
    print(f"database            {args.database_url or 'sqlite (WAL)'}")
    if settings:
        print("postgres settings   " + ", ".join(f"{k}={v}" for k, v in settings.items()))
    print(f"machine             {os.cpu_count()} cores, load average {os.getloadavg()[0]:.1f}")
    print(f"agents x batch      {args.agents} x {args.batch} steps, window {args.window}")
    print(
        f"acked step rows     {rows:,} in {elapsed:.2f} s (stored: {stored:,} in the runs' "
        f"summaries, {in_database:,} in the database)"
    )
    ratio = rate / TARGET_ROWS_PER_S
    print(f"committed rows/s    {rate:,.0f}   target >= {TARGET_ROWS_PER_S:,}  ratio {ratio:.2f}")
    print(f"ack latency p50     {p50:.1f} ms")
    ratio = p99 / TARGET_ACK_P99_MS
    print(
        f"ack latency p99     {p99:.1f} ms   target < {TARGET_ACK_P99_MS:.0f} ms  ratio {ratio:.2f}"
    )
    before, after = result["cpu_before"], result["cpu_after"]
    total = 0.0
    for name in ("server", "postgres", "client"):
        if before[name] is None or after[name] is None:
            continue
        used = after[name] - before[name]
        total += used
        print(
            f"{name + ' CPU':<20}{used / rows * 1e6:.2f} us per step row "
            f"({used / elapsed:.2f} cores busy)"
        )
    print(
        f"all CPU             {total / rows * 1e6:.2f} us per step row: {os.cpu_count()} cores "
        f"fill at {os.cpu_count() * rows / total:,.0f} rows/s"
    )
    print(
        f"server user/system  {server_times.user:.1f} s / {server_times.system:.1f} s "
        "(whole life, start-up included)"
    )
    if postgres:
        with _postgres(args.database_url) as connection:
            wal = _wal_lsn(connection) - wal_before
            heap, indexes = connection.execute(
                "SELECT pg_table_size('stepchunk'), pg_indexes_size('stepchunk')"
            ).fetchone()  # type: ignore[misc]
        print(f"postgres WAL        {wal / max(stored, 1):.0f} bytes per step row (all tables)")
        print(
            f"postgres stepchunk  {heap / max(stored, 1):.1f} bytes per step, its index "
            f"{indexes / max(stored, 1):.2f}"
        )
    if db_bytes:
        per_row = db_bytes / max(stored, 1)
        print(f"sqlite file bytes   {db_bytes:,} ({per_row:.1f} per step row, all tables)")


def _stored_steps(server: ServerProcess, postgres_url: str | None) -> int:
    """Steps the database holds (acked = stored: nothing lost)."""
    sql = "SELECT coalesce(sum(n), 0) FROM stepchunk"
    if postgres_url is None:
        return int(server.rows(sql)[0][0])
    with _postgres(postgres_url) as connection:
        row = connection.execute(sql).fetchone()
    assert row is not None
    return int(row[0])


def _wal_lsn(connection: psycopg.Connection) -> int:
    """Bytes of write-ahead log written by the cluster so far."""
    row = connection.execute("SELECT pg_wal_lsn_diff(pg_current_wal_lsn(), '0/0')").fetchone()
    assert row is not None
    return int(row[0])


if __name__ == "__main__":
    main()
