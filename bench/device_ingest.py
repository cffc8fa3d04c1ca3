"""Device-sample ingest cost: what `store_batches` (the writer's group commit) spends per GPU
sample, as agents send them: each agent (a rank of 4 GPUs by default) one reading per GPU per
batch (1 s sampling, 1 s flush), the writer storing one batch of every agent per group.

    .venv/bin/python -m bench.device_ingest [--agents 8] [--gpus 4] [--seconds 1800]
        [--databases sqlite,postgres]

Run it on two trees (e.g. before and after a change to the ingest of device samples) with
`PYTHONPATH=<tree>:<tree>/backend .venv/bin/python <this tree>/bench/device_ingest.py`.
"""

import argparse
import statistics
import tempfile
import time
import uuid
from pathlib import Path

import numpy as np
from sqlmodel import Session

from stoker_server.core.db import make_engine
from stoker_server.core.settings import Settings
from stoker_server.ingest.agent_writes import BatchJob, open_run, store_batches
from stoker_server.ingest.protocol import Batch, Hello
from tests.harness.support import PostgresServer

FIELDS = ("util", "mem_util", "mem_used", "mem_total", "temp_c", "power_w", "sm_clock_mhz")


def _batch(seq: int, t: float, gpus: int, rng: np.random.Generator) -> Batch:
    device = {"t": [t] * gpus, "gpu": list(range(gpus))}
    device |= {f: rng.uniform(0, 100, gpus).tolist() for f in FIELDS}
    device["throttle"] = [0] * gpus
    return Batch.model_validate({"type": "batch", "seq": seq, "device": device})


def _measure(url: str, data_dir: Path, args: argparse.Namespace) -> list[float]:
    engine = make_engine(Settings(data_dir=data_dir, database_url=url))
    rng = np.random.default_rng(1)
    key = uuid.uuid4().hex
    run_id = 0
    for rank in range(args.agents):
        hello = Hello.model_validate(
            {"type": "hello", "protocol": 1, "run_key": key, "rank": rank, "name": "bench"}
        )
        with Session(engine, expire_on_commit=False) as session:
            run, _ = open_run(session=session, hello=hello)
            run_id = run.id or 0
    groups = []
    for second in range(args.seconds):
        t = 1.7e9 + second
        groups.append(
            [
                BatchJob(run_id, f"n{rank}", rank, _batch(second + 1, t, args.gpus, rng))
                for rank in range(args.agents)
            ]
        )
    per_sample_us = []
    samples = args.agents * args.gpus
    for jobs in groups:
        started = time.perf_counter()
        with Session(engine) as session:
            store_batches(session=session, jobs=jobs)
        per_sample_us.append((time.perf_counter() - started) / samples * 1e6)
    engine.dispose()
    return per_sample_us


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--agents", type=int, default=8)
    parser.add_argument("--gpus", type=int, default=4)
    parser.add_argument("--seconds", type=int, default=1800)
    parser.add_argument("--databases", default="sqlite,postgres")
    args = parser.parse_args()
    for kind in args.databases.split(","):
        with tempfile.TemporaryDirectory() as tmp:
            data_dir = Path(tmp)
            postgres = PostgresServer().start() if kind == "postgres" else None
            try:
                url = (
                    postgres.create_database()
                    if postgres is not None
                    else f"sqlite:///{data_dir / 'stoker.db'}"
                )
                us = _measure(url, data_dir, args)
            finally:
                if postgres is not None:
                    postgres.stop()
        print(
            f"{kind}: {args.seconds} groups of {args.agents} batches x {args.gpus} GPU samples:"
            f" store_batches {statistics.median(us):.1f} us/sample p50,"
            f" {statistics.mean(us):.1f} mean, {np.percentile(us, 95):.1f} p95"
        )


if __name__ == "__main__":
    main()
