"""Query benchmark: history queries against a real `stoker serve` on a large database.

    .venv/bin/python -m bench.query [--steps 1000000] [--runs 1000] [--database-url URL]

Builds the data through the real ingest path (ingest.store_batches: rows, rollups, run
statistics) for one run of `--steps` steps, copies it into four more runs with SQL, adds
`--runs` small runs, then times over HTTP (keep-alive, 30+ requests each, p50/p95):
`steps?max_points=2000` of the long run (whole, from the rollups; zoomed to its middle fifth
and to 2,000 steps, from the raw steps), its CSV export, the runs list (first page of 100, and
all 1,000), and `compare` of the five long runs. Also prints storage bytes per step (SQLite).
"""

import argparse
import json
import os
import statistics
import tempfile
import time
import uuid
from pathlib import Path

import httpx
from sqlalchemy import text
from sqlmodel import Session

from bench.database import add_database_arguments, run_with_database
from stoker_server.core.db import make_engine
from stoker_server.core.settings import Settings
from stoker_server.ingest.agent_writes import BatchJob, open_run, store_batches
from stoker_server.ingest.protocol import Batch, Hello
from tests.harness.support import ServerProcess

TARGETS_MS = {"steps": 50.0, "runs": 50.0, "compare": 200.0}
COPIED = ("stepchunk", "steprollup")


def _hello(name: str, **extra) -> Hello:
    return Hello(type="hello", protocol=1, run_key=uuid.uuid4().hex, name=name, **extra)


def _batch(seq: int, first: int, n: int) -> Batch:
    steps = list(range(first, first + n))
    return Batch.model_validate(
        {
            "type": "batch",
            "seq": seq,
            "steps": {
                "step": steps,
                "t": [1.7e9 + s * 0.05 for s in steps],
                "dur": [0.05 + (s % 97) * 1e-4 + (1.0 if s % 50_000 == 7 else 0.0) for s in steps],
                "wait": [0.004 + (s % 13) * 1e-4 for s in steps],
                "batch_size": [256] * n,
            },
        }
    )


def build(settings: Settings, steps: int, runs: int) -> tuple[list[int], float]:
    engine = make_engine(settings)
    started = time.perf_counter()
    with Session(engine, expire_on_commit=False) as session:
        config = {"batch_size": 256, "lr": 0.1, "optimizer": {"name": "adam"}}
        env = {"tf": "2.21.0", "gpu": {"name": "A100", "count": 1}}
        long_run, _ = open_run(
            session=session, hello=_hello("long-0", config=config, environment=env)
        )
    assert long_run.id is not None
    batch = 5000
    for seq, first in enumerate(range(0, steps, batch), start=1):
        with Session(engine) as session:
            store_batches(
                session=session,
                jobs=[
                    BatchJob(
                        long_run.id, "bench:0", 0, _batch(seq, first, min(batch, steps - first))
                    )
                ],
            )
    ids = [long_run.id]
    for i in range(1, 5):  # four more long runs: copies with different configs
        with Session(engine, expire_on_commit=False) as session:
            run, _ = open_run(
                session=session,
                hello=_hello(
                    f"long-{i}", config={**config, "batch_size": 256 * (i + 1)}, environment=env
                ),
            )
        with engine.begin() as connection:
            for table in COPIED:
                columns = [c for c in _columns(connection, table) if c not in ("id", "run_id")]
                cols = ", ".join(columns)
                copy = (
                    f"INSERT INTO {table} (run_id, {cols}) "
                    f"SELECT :new, {cols} FROM {table} WHERE run_id = :old"
                )
                connection.execute(
                    text(copy),
                    {"new": run.id, "old": long_run.id},
                )
            connection.execute(
                text(
                    "UPDATE run SET stats = (SELECT stats FROM run WHERE id = :old), "
                    "summary = (SELECT summary FROM run WHERE id = :old) WHERE id = :new"
                ),
                {"new": run.id, "old": long_run.id},
            )
        assert run.id is not None
        ids.append(run.id)
    for i in range(runs - 5):
        with Session(engine) as session:
            run, _ = open_run(
                session=session, hello=_hello(f"small-{i}", project=f"p{i % 7}", tags=["a"])
            )
            assert run.id is not None
            store_batches(session=session, jobs=[BatchJob(run.id, "bench:0", 0, _batch(1, 0, 200))])
    engine.dispose()
    return ids, time.perf_counter() - started


def _columns(connection, table: str) -> list[str]:
    if connection.dialect.name == "sqlite":
        return [r[1] for r in connection.execute(text(f"PRAGMA table_info({table})"))]
    return [
        r[0]
        for r in connection.execute(
            text("SELECT column_name FROM information_schema.columns WHERE table_name = :t"),
            {"t": table},
        )
    ]


def _time(client: httpx.Client, path: str, params: dict, n: int) -> tuple[float, float, float]:
    client.get(path, params=params).raise_for_status()  # warm
    samples = []
    for _ in range(n):
        started = time.perf_counter()
        response = client.get(path, params=params)
        samples.append((time.perf_counter() - started) * 1000)
        response.raise_for_status()
    samples.sort()
    return statistics.median(samples), samples[int(len(samples) * 0.95) - 1], samples[0]


def storage(settings: Settings, steps: int) -> None:
    url = settings.resolved_database_url()
    if not url.startswith("sqlite"):
        return
    import sqlite3

    path = url.removeprefix("sqlite:///")
    connection = sqlite3.connect(path)
    connection.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    try:
        rows = connection.execute(
            "SELECT name, SUM(pgsize) FROM dbstat GROUP BY name ORDER BY 2 DESC"
        ).fetchall()
    except sqlite3.OperationalError:
        rows = []
    total_steps = connection.execute("SELECT SUM(n) FROM stepchunk").fetchone()[0]
    connection.close()
    size = os.path.getsize(path)
    by_name = dict(rows)
    step_bytes = sum(
        v for k, v in by_name.items() if k in ("stepchunk", "ix_stepchunk_run_rank_first")
    )
    rollup_bytes = sum(v for k, v in by_name.items() if "rollup" in k)
    print(f"sqlite file         {size:,} bytes, {total_steps:,} steps")
    if step_bytes:
        print(
            f"bytes per step      {step_bytes / total_steps:.1f} (chunks + index), "
            f"+{rollup_bytes / total_steps:.1f} for rollups"
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--steps", type=int, default=1_000_000)
    parser.add_argument("--runs", type=int, default=1000)
    parser.add_argument("--requests", type=int, default=40)
    add_database_arguments(parser)
    run_with_database(parser.parse_args(), _bench)


def _bench(args: argparse.Namespace) -> None:
    with tempfile.TemporaryDirectory(prefix="stoker-bench-") as tmp:
        settings = Settings(data_dir=Path(tmp), database_url=args.database_url)
        ids, build_s = build(settings, args.steps, args.runs)
        print(f"database            {args.database_url or 'sqlite (WAL)'}")
        load = os.getloadavg()[0]
        print(f"machine             {os.cpu_count()} cores, load average {load:.1f}")
        shape = f"5 runs x {args.steps:,} steps + {args.runs - 5} runs"
        print(f"built               {shape} in {build_s:.0f} s")
        env = {"STOKER_DATABASE_URL": settings.resolved_database_url()}
        server = ServerProcess(data_dir=Path(tmp), env=env).start()
        try:
            steps_path = f"/api/v1/runs/{ids[0]}/steps"
            middle = args.steps // 2
            zoom_fifth = {"max_points": 2000, "after_step": middle - args.steps // 10,
                          "before_step": middle + args.steps // 10}  # fmt: skip
            zoom_2000 = {"max_points": 2000, "after_step": middle, "before_step": middle + 2001}
            with httpx.Client(base_url=server.url, timeout=60) as client:
                results = {
                    "steps": _time(
                        client, f"/api/v1/runs/{ids[0]}/steps", {"max_points": 2000}, args.requests
                    ),
                    # Zoomed in: a range is read from the raw steps, bucketed or whole.
                    "steps zoomed 20%": _time(client, steps_path, zoom_fifth, args.requests),
                    "steps zoomed 2000": _time(client, steps_path, zoom_2000, args.requests),
                    "steps CSV": _time(
                        client, f"/api/v1/runs/{ids[0]}/steps.csv", {}, max(1, args.requests // 10)
                    ),
                    "runs": _time(client, "/api/v1/runs", {}, args.requests),
                    "runs (limit=1000)": _time(
                        client, "/api/v1/runs", {"limit": 1000}, args.requests // 4
                    ),
                    "compare": _time(
                        client, "/api/v1/compare", {"runs": ",".join(map(str, ids))}, args.requests
                    ),
                }
                series = client.get(
                    f"/api/v1/runs/{ids[0]}/steps", params={"max_points": 2000}
                ).json()
                print(
                    f"steps response      {len(series['step'])} points of {series['total']:,} steps"
                )
        finally:
            server.stop()
        for name, (p50, p95, low) in results.items():
            target = TARGETS_MS.get(name)
            ratio = f"target < {target:.0f} ms  ratio {p50 / target:.2f}" if target else ""
            print(f"{name:<19} p50 {p50:7.1f} ms  p95 {p95:7.1f} ms  min {low:6.1f} ms  {ratio}")
        storage(settings, args.steps)
        print(json.dumps({k: round(v[0], 1) for k, v in results.items()}))


if __name__ == "__main__":
    main()
