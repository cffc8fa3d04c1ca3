"""A team's history at scale: database size with and without retention, and the latency of
the pages a team opens, on SQLite and PostgreSQL.

The history: `--gpus` GPUs (lanes of 1, 2, 4 and 8 GPUs, an 8-GPU job being 2 workers of 4)
busy for `--days` days. Each lane runs jobs back to back: durations log-normal (median 2.5 h,
10 min to 3 days), idle gaps of 45 min on average, step times 80-600 ms, some input-bound, some
failed or interrupted; every job reports its epochs (loss, accuracy, val_loss, val_accuracy,
learning_rate every 15-60 min), and the starved or failed ones have an alert and events.
Every run of the full history is stored (run rows, summaries, epochs, alerts, events). Raw
rows (steps, loss and accuracy every 50th step, a device sample per GPU and a host sample per
worker every second) are stored for a random `--scale` share of the runs, at full density,
through the server's own
ingest (`store_batches`: COPY on PostgreSQL, executemany on SQLite, rollups and summaries);
the other runs take the statistics of a generated run (the summary's figures), so the runs
list, compare and cost page read a whole history. Scale the raw share to the disk: the full
history's raw part is about 1/scale times the measured one.

Then, for each database: size; p50/p95 over HTTP (a real `stoker serve`) of the runs list, the
step chart of the longest raw run (an old one, compacted later), a recent run's step chart,
that old run's device chart, a compare of 5 runs and the cost page (7 days, and the whole
history); retention (`--retention-days`) run to completion (in-process, `retention_pass`,
with its pauses removed); size again (as is, and after VACUUM / VACUUM FULL); the same
latencies.

`--pages device` builds only one old run like the history's longest (21.1 h, 4 GPUs, raw
rows) and times its device chart (`samples`) at the default zoom and zoomed to an hour and
to ten minutes, before and after retention compacts it.

    .venv/bin/python -m bench.team_year [--scale 0.01] [--days 90] [--gpus 100]
                                        [--databases sqlite,postgres] [--requests 30]
                                        [--pages all|device]
"""

import argparse
import asyncio
import os
import shutil
import signal
import sys
import tempfile
import time
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import httpx
import numpy as np
from sqlalchemy import insert, text, update
from sqlmodel import Session, col

from bench.query import _time
from stoker_server.core.db import make_engine
from stoker_server.core.models import Alert, AlertState, EpochMetric, Run, RunEvent, RunStatus
from stoker_server.core.settings import Settings
from stoker_server.ingest import retention
from stoker_server.ingest.agent_writes import BatchJob, end_run, open_run, store_batches
from stoker_server.ingest.protocol import Batch, Hello
from stoker_server.ingest.summary import epoch_metric_summary, metric_goal, stored_summary
from tests.harness.support import PostgresServer, ServerProcess

LANES = [1] * 24 + [2] * 10 + [4] * 10 + [8] * 2  # 100 GPUs
PROJECTS = ["vision", "speech", "recsys", "nlp", "detection", "segmentation", "rl", "tabular"]
PROJECT_WEIGHTS = np.array([30, 15, 15, 12, 10, 8, 6, 4], dtype=float)
EPOCH_METRICS = ("loss", "accuracy", "val_loss", "val_accuracy", "learning_rate")
CHUNK_S = 1800  # one stored batch: half an hour of a run


@dataclass
class Job:
    index: int
    gpus: int
    start: float  # unix seconds
    duration_s: float
    step_s: float
    wait_share: float
    status: RunStatus
    project: str
    epoch_s: float
    raw: bool
    run_id: int = 0
    stats: dict[str, Any] = field(default_factory=dict)

    @property
    def ranks(self) -> int:
        return 2 if self.gpus == 8 else 1

    @property
    def end(self) -> float:
        return self.start + self.duration_s


def schedule(args: argparse.Namespace, now: float) -> list[Job]:
    """The jobs of every lane, back to back from `now - days` to `now`."""
    rng = np.random.default_rng(args.seed)
    lanes = [width for width in LANES for _ in range(max(1, round(args.gpus / 100)))]
    jobs: list[Job] = []
    for gpus in lanes:
        t = now - args.days * 86400 + rng.exponential(2700)
        while True:
            duration = float(np.clip(rng.lognormal(np.log(2.5 * 3600), 1.0), 600, 72 * 3600))
            if t + duration > now:
                break
            roll = rng.random()
            status = (
                RunStatus.failed if roll < 0.08 else
                RunStatus.interrupted if roll < 0.12 else RunStatus.finished
            )  # fmt: skip
            kind = rng.random()  # 20 % highly input-bound, 30 % moderately, the rest fed
            wait = rng.uniform(0.2, 0.5) if kind < 0.2 else rng.uniform(0.05, 0.2) if kind < 0.5 else rng.uniform(0, 0.04)  # fmt: skip  # noqa: E501
            jobs.append(
                Job(
                    index=len(jobs), gpus=gpus, start=t, duration_s=duration,
                    step_s=float(rng.uniform(0.08, 0.6)), wait_share=float(wait), status=status,
                    project=str(rng.choice(PROJECTS, p=PROJECT_WEIGHTS / PROJECT_WEIGHTS.sum())),
                    epoch_s=float(rng.uniform(900, 3600)), raw=bool(rng.random() < args.scale),
                )
            )  # fmt: skip
            t += duration + rng.exponential(2700)
    return jobs


def hello(job: Job, rank: int) -> Hello:
    return Hello(
        type="hello", protocol=1, run_key=f"team-run-{job.index:06d}",
        name=f"{job.project}-{job.index}",
        project=job.project, tags=[job.project, f"{job.gpus}gpu"], host=f"node{rank}", rank=rank,
        config={"batch_size": 64 * job.gpus, "lr": 1e-3, "optimizer": {"name": "adam"},
                "epochs": max(1, int(job.duration_s // job.epoch_s))},
        environment={"tf_version": "2.21.0", "gpus": [{"name": "NVIDIA A100-SXM4-80GB"}] *
                     (job.gpus // job.ranks)},
    )  # fmt: skip


def epochs(job: Job) -> dict[str, list[Any]]:
    """The job's epoch-end logs, as the agent sends them."""
    count = max(1, int(job.duration_s // job.epoch_s))
    columns: dict[str, list[Any]] = {"epoch": [], "step": [], "t": [], "name": [], "value": []}
    for epoch in range(count):
        progress = (epoch + 1) / count
        values = (2.0 * (1 - 0.8 * progress), 0.5 + 0.4 * progress, 2.1 * (1 - 0.7 * progress),
                  0.45 + 0.38 * progress, 1e-3 * (1 - progress) + 1e-5)  # fmt: skip
        for name, value in zip(EPOCH_METRICS, values, strict=True):
            columns["epoch"].append(epoch)
            columns["step"].append(int((epoch + 1) * job.epoch_s / job.step_s))
            columns["t"].append(job.start + (epoch + 1) * job.epoch_s)
            columns["name"].append(name)
            columns["value"].append(value)
    return columns


def raw_batches(job: Job, rank: int, rng: np.random.Generator) -> list[Batch]:
    """Half an hour of one worker per batch: its steps (and their loss and accuracy), a
    device sample per GPU and a host sample every second."""
    gpus = job.gpus // job.ranks
    batches: list[Batch] = []
    step0 = 0
    for seq, chunk_start in enumerate(np.arange(job.start, job.end, CHUNK_S), start=1):
        chunk_end = min(chunk_start + CHUNK_S, job.end)
        n = max(1, int((chunk_end - chunk_start) / job.step_s))
        dur = rng.normal(job.step_s, job.step_s * 0.05, n).clip(job.step_s * 0.5)
        t = chunk_start + np.concatenate(([0.0], np.cumsum(dur[:-1])))
        steps = np.arange(step0, step0 + n)
        logged = steps[steps % 50 == 0]
        step0 += n
        seconds = np.arange(np.ceil(chunk_start), chunk_end)
        m = len(seconds)
        util = (100 * (1 - job.wait_share) + rng.normal(0, 5, m * gpus)).clip(0, 100)
        device = {
            "t": np.repeat(seconds, gpus).tolist(), "gpu": np.tile(np.arange(gpus), m).tolist(),
            "util": util.tolist(), "mem_util": (util * 0.6).tolist(),
            "mem_used": [6.0e10] * (m * gpus), "mem_total": [8.5e10] * (m * gpus),
            "proc_mem": [5.9e10] * (m * gpus), "tf_mem_current": [5.0e10] * (m * gpus),
            "tf_mem_peak": [5.5e10] * (m * gpus), "temp_c": (40 + util * 0.3).tolist(),
            "power_w": (90 + util * 3).tolist(), "power_limit_w": [400.0] * (m * gpus),
            "sm_clock_mhz": [1410.0] * (m * gpus), "throttle": [0] * (m * gpus),
            "pcie_tx_bps": (util * 1e7).tolist(), "pcie_rx_bps": (util * 3e7).tolist(),
            "energy_j": ((seconds - job.start).repeat(gpus) * 300).tolist(),
        }  # fmt: skip
        batch = {
            "type": "batch",
            "seq": seq,
            "steps": {
                "step": steps.tolist(), "t": t.tolist(), "dur": dur.tolist(),
                "wait": (dur * job.wait_share).tolist(), "batch_size": [64 * gpus] * n,
            },
        }  # fmt: skip
        if len(logged):  # the agent keeps the logs of every 50th step (`every_n_batches`)
            batch["metrics"] = {
                "step": np.repeat(logged, 2).tolist(), "name": ["loss", "accuracy"] * len(logged),
                "value": rng.random(2 * len(logged)).tolist(),
            }  # fmt: skip
        if m:
            batch["device"] = device
            batch["host"] = {
                "t": seconds.tolist(), "proc_cpu": rng.uniform(80, 400, m).tolist(),
                "sys_cpu": rng.uniform(20, 90, m).tolist(), "rss": [3.2e10] * m,
                "mem_used": [2.0e11] * m, "mem_total": [5.1e11] * m,
            }  # fmt: skip
        if seq == 1 and rank == 0:
            batch["epochs"] = epochs(job)
        batches.append(Batch.model_validate(batch))
    return batches


def _utc(t: float) -> datetime:
    return datetime.fromtimestamp(t, UTC)


def store_raw(engine: Any, job: Job, rng: np.random.Generator) -> None:
    for rank in range(job.ranks):
        with Session(engine, expire_on_commit=False) as session:
            run, _ = open_run(session=session, hello=hello(job, rank))
        job.run_id = run.id or 0
        batches = raw_batches(job, rank, rng)
        for first in range(0, len(batches), 4):
            with Session(engine) as session:
                store_batches(
                    session=session,
                    jobs=[BatchJob(job.run_id, f"node{rank}:{rank}", rank, b)
                          for b in batches[first:first + 4]],
                )  # fmt: skip
        with Session(engine) as session:
            end_run(session=session, run_id=job.run_id, status=job.status, rank=rank)
    with Session(engine) as session:
        session.connection().execute(
            update(Run)
            .where(col(Run.id) == job.run_id)
            .values(started_at=_utc(job.start), ended_at=_utc(job.end), last_seen_at=_utc(job.end))
        )
        session.commit()
        stored = session.get(Run, job.run_id)
        assert stored is not None
        job.stats = stored.stats


def store_rest(engine: Any, jobs: list[Job], templates: list[Job]) -> None:
    """The runs without raw rows, in bulk: the run rows (a generated run's statistics, their
    own epochs' summaries), their epochs."""
    for first in range(0, len(jobs), 1000):
        part = jobs[first : first + 1000]
        runs = []
        for job in part:
            template = min(
                templates, key=lambda t: (t.gpus != job.gpus, abs(t.step_s - job.step_s))
            )
            columns = epochs(job)
            metrics = {}
            for name in EPOCH_METRICS:
                named = zip(columns["epoch"], columns["name"], columns["value"], strict=True)
                rows = [(e, v) for e, n, v in named if n == name]
                goal, directed = metric_goal(name, {})
                metrics[name] = epoch_metric_summary(rows, goal=goal, directed=directed)
            stats = {**template.stats, "epoch_metrics": metrics}
            h = hello(job, 0)
            runs.append(
                Run(
                    run_key=h.run_key, name=h.name, project=h.project, tags=h.tags, config=h.config,
                    environment=h.environment, status=job.status, started_at=_utc(job.start),
                    ended_at=_utc(job.end), last_seen_at=_utc(job.end), stats=stats,
                    summary=stored_summary(stats),
                )
            )  # fmt: skip
        with Session(engine, expire_on_commit=False) as session:
            session.add_all(runs)
            session.commit()
            epoch_rows: list[dict[str, Any]] = []
            for job, run in zip(part, runs, strict=True):
                job.run_id = run.id or 0
                columns = epochs(job)
                epoch_rows += [
                    {"run_id": job.run_id, "epoch": e, "step": s, "t": t, "name": n, "value": v}
                    for e, s, t, n, v in zip(*columns.values(), strict=True)
                ]
            session.connection().execute(insert(EpochMetric), epoch_rows)
            session.commit()


def store_alerts(engine: Any, jobs: list[Job]) -> int:
    """An alert (fired, resolved) and its events for each starved run, a failure alert for
    each failed one."""
    alerts, events = [], []
    for job in jobs:
        moment = _utc(job.start + min(600, job.duration_s / 2))
        episodes = []
        if job.wait_share >= 0.2:
            episodes.append(("GPU utilization low", 100 * (1 - job.wait_share)))
        if job.status == RunStatus.failed:
            episodes.append(("Run failed", 1.0))
        for rule, value in episodes:
            alerts.append({
                "run_id": job.run_id, "rule_name": rule, "state": AlertState.resolved,
                "value": value, "message": f"{rule}: {value:.1f}", "started_at": moment,
                "fired_at": moment + timedelta(seconds=30), "resolved_at": _utc(job.end),
                "deliveries": [],
            })  # fmt: skip
            for kind, at in (("alert", moment), ("alert", _utc(job.end))):
                events.append({"run_id": job.run_id, "at": at, "kind": kind,
                               "message": rule, "data": {"value": value}})  # fmt: skip
        if job.wait_share >= 0.05:
            events.append({"run_id": job.run_id, "at": moment, "kind": "verdict",
                           "message": "input-bound",
                           "data": {"share": job.wait_share}})  # fmt: skip
    with Session(engine) as session:
        if alerts:
            session.connection().execute(insert(Alert), alerts)
        if events:
            session.connection().execute(insert(RunEvent), events)
        session.commit()
    return len(alerts)


def size(engine: Any) -> int:
    with engine.connect() as connection:
        return retention.database_bytes(connection)


def vacuum(engine: Any) -> None:
    if engine.dialect.name == "sqlite":
        with engine.connect() as connection:
            connection.exec_driver_sql("PRAGMA wal_checkpoint(TRUNCATE)")
            connection.exec_driver_sql("VACUUM")
        return
    with engine.connect().execution_options(isolation_level="AUTOCOMMIT") as connection:
        connection.exec_driver_sql("VACUUM FULL")


class _Writer:
    """The server's writer's `run`, in this process: compaction's SQLite statements."""

    def __init__(self, engine: Any) -> None:
        self.engine = engine

    async def run(self, fn: Any, **kwargs: Any) -> Any:
        with Session(self.engine, expire_on_commit=False) as session:
            return fn(session=session, **kwargs)


def compact(
    engine: Any, data_dir: Path, retention_days: float, raw_ids: set[int]
) -> tuple[int, int, float]:
    """Retention to completion: (runs compacted, raw rows removed, seconds). The due runs are
    retention's own choice (`due_runs`), compacted by `compact_run`; only those with raw rows
    are passed to it (the others, generated without raw rows, have nothing to reduce)."""
    retention.PAUSE_RATIO = 0.0  # the server pauses 2x each chunk to leave ingest its share
    usage = retention.DiskUsage()
    started = time.perf_counter()
    with Session(engine) as session:
        due = retention.due_runs(
            session=session, max_age_s=retention_days * 86400, max_raw_bytes=0, usage=usage
        )

    async def run_all() -> None:
        writer = _Writer(engine)
        for run_id in due:
            if run_id in raw_ids:
                await retention.compact_run(writer, engine, run_id, usage)

    asyncio.run(run_all())
    return usage.compacted_runs, usage.compacted_rows, time.perf_counter() - started


def time_pages(url: str, pages: dict[str, tuple[str, dict]], n: int) -> dict[str, tuple]:
    with httpx.Client(base_url=url, timeout=120) as client:
        return {name: _time(client, path, params, n) for name, (path, params) in pages.items()}


def serve(data_dir: Path, url: str, pages: dict[str, tuple[str, dict]], n: int) -> dict:
    env = {"STOKER_DATABASE_URL": url, "STOKER_HEARTBEAT_TIMEOUT_S": "86400000",
           "STOKER_RETENTION_TIME_S": "0"}  # fmt: skip
    server = ServerProcess(data_dir=data_dir, env=env).start()
    try:
        return time_pages(server.url, pages, n)
    finally:
        server.stop()


def open_database(kind: str, tmp: Path) -> tuple[PostgresServer | None, Path, str]:
    """A fresh database of `kind` and its data directory: (the throwaway PostgreSQL to stop,
    or None for SQLite; the data directory; the database URL)."""
    data_dir = tmp / kind
    data_dir.mkdir()
    if kind == "postgres":
        postgres = PostgresServer().start()
        return postgres, data_dir, postgres.create_database()
    return None, data_dir, f"sqlite:///{data_dir / 'stoker.db'}"


def bench_database(kind: str, args: argparse.Namespace, jobs: list[Job], tmp: Path) -> dict:
    postgres, data_dir, url = open_database(kind, tmp)
    try:
        settings = Settings(data_dir=data_dir, database_url=url)
        engine = make_engine(settings)
        rng = np.random.default_rng(args.seed + 1)
        started = time.perf_counter()
        raw = [job for job in jobs if job.raw]
        for job in raw:
            store_raw(engine, job, rng)
        raw_s = time.perf_counter() - started
        store_rest(engine, [job for job in jobs if not job.raw], raw)
        alerts = store_alerts(engine, jobs)
        built_s = time.perf_counter() - started
        with engine.connect() as connection:
            counts = {
                table: connection.execute(text(f"SELECT count(*) FROM {table}")).scalar_one()
                for table in ("run", "metric", "devicesample", "hostsample", "steprollup",
                              "epochmetric")
            }  # fmt: skip
            counts["step"] = connection.execute(
                text("SELECT coalesce(sum(n), 0) FROM stepchunk")
            ).scalar_one()
        if kind == "sqlite":
            with engine.connect() as connection:
                connection.exec_driver_sql("PRAGMA wal_checkpoint(TRUNCATE)")
        before = size(engine)
        now = time.time()
        old = max((j for j in raw if now - j.end > args.retention_days * 86400),
                  key=lambda j: j.duration_s)  # fmt: skip
        recent = max((j for j in raw if now - j.end <= args.retention_days * 86400),
                     key=lambda j: j.duration_s, default=old)  # fmt: skip
        compared = sorted(raw, key=lambda j: -j.duration_s)[:5]
        since = datetime.fromtimestamp(now - args.days * 86400, UTC).isoformat()
        pages: dict[str, tuple[str, dict[str, Any]]] = {
            "runs list": ("/api/v1/runs", {}),
            "step chart, old run": (f"/api/v1/runs/{old.run_id}/steps", {"max_points": 2000}),
            "step chart, recent run": (
                f"/api/v1/runs/{recent.run_id}/steps", {"max_points": 2000}
            ),
            "device chart, old run": (f"/api/v1/runs/{old.run_id}/samples", {"max_points": 2000}),
            "compare 5 runs": ("/api/v1/compare", {"runs": ",".join(str(j.run_id)
                                                                    for j in compared)}),
            "cost page (7 days)": ("/api/v1/starvation", {}),
            "cost page (whole history)": ("/api/v1/starvation", {"since": since}),
        }  # fmt: skip
        engine.dispose()
        without = serve(data_dir, url, pages, args.requests)
        engine = make_engine(settings)
        runs_compacted, rows_removed, compact_s = compact(
            engine, data_dir, args.retention_days, {j.run_id for j in raw}
        )
        if kind == "sqlite":
            with engine.connect() as connection:
                connection.exec_driver_sql("PRAGMA wal_checkpoint(TRUNCATE)")
        compacted = size(engine)
        started = time.perf_counter()
        vacuum(engine)
        vacuum_s = time.perf_counter() - started
        vacuumed = size(engine)
        engine.dispose()
        with_retention = serve(data_dir, url, pages, args.requests)
        return {
            "counts": counts, "alerts": alerts, "raw_runs": len(raw), "raw_s": raw_s,
            "built_s": built_s, "before": before, "compacted": compacted, "vacuumed": vacuumed,
            "vacuum_s": vacuum_s, "runs_compacted": runs_compacted, "rows_removed": rows_removed,
            "compact_s": compact_s, "without": without, "with": with_retention,
            "old": old, "recent": recent,
        }  # fmt: skip
    finally:
        if postgres is not None:
            postgres.stop()


def device_pages(job: Job) -> dict[str, tuple[str, dict]]:
    """The device chart of `job` at the default zoom, and zoomed to an hour and to ten
    minutes in its middle (the UI asks for about the chart's width in points)."""
    path = f"/api/v1/runs/{job.run_id}/samples"
    middle = job.start + job.duration_s / 2
    return {
        "default zoom (2,000 points)": (path, {"max_points": 2000}),
        "default zoom (1,000 points)": (path, {"max_points": 1000}),
        "zoomed to 1 h": (path, {"max_points": 1000, "since_t": middle,
                                 "until_t": middle + 3600}),
        "zoomed to 10 min": (path, {"max_points": 1000, "since_t": middle,
                                    "until_t": middle + 600}),
    }  # fmt: skip


def bench_device_chart(kind: str, args: argparse.Namespace, tmp: Path) -> None:
    """One old 21.1 h, 4-GPU run with raw rows: its device chart before and after
    retention compacts it."""
    postgres, data_dir, url = open_database(kind, tmp)
    try:
        settings = Settings(data_dir=data_dir, database_url=url)
        engine = make_engine(settings)
        now = time.time()
        job = Job(
            index=0, gpus=4, start=now - 30 * 86400, duration_s=21.1 * 3600, step_s=0.3,
            wait_share=0.1, status=RunStatus.finished, project="vision", epoch_s=1800, raw=True,
        )  # fmt: skip
        started = time.perf_counter()
        store_raw(engine, job, np.random.default_rng(args.seed + 1))
        with engine.connect() as connection:
            samples = connection.execute(
                text(f"SELECT count(*) FROM devicesample WHERE run_id = {job.run_id}")
            ).scalar_one()
        built_s = time.perf_counter() - started
        print(f"\n{kind}: one {job.duration_s / 3600:.1f} h run, {job.gpus} GPUs, "
              f"{samples:,} device samples, built in {built_s:.0f} s")  # fmt: skip
        engine.dispose()
        pages = device_pages(job)
        without = serve(data_dir, url, pages, args.requests)
        load_without = os.getloadavg()
        engine = make_engine(settings)
        compact(engine, data_dir, args.retention_days, {job.run_id})
        engine.dispose()
        with_retention = serve(data_dir, url, pages, args.requests)
        load_with = os.getloadavg()
        print(f"  load average {' '.join(f'{x:.2f}' for x in load_without)} (raw), "
              f"{' '.join(f'{x:.2f}' for x in load_with)} (compacted)")  # fmt: skip
        print(f"  {'device chart':<27} {'raw rows':>24} {'compacted':>24}")
        print(f"  {'':<27} {'p50 ms':>11} {'p95 ms':>12} {'p50 ms':>11} {'p95 ms':>12}")
        for name, (p50, p95, _) in without.items():
            q50, q95, _ = with_retention[name]
            print(f"  {name:<27} {p50:11.1f} {p95:12.1f} {q50:11.1f} {q95:12.1f}")
    finally:
        if postgres is not None:
            postgres.stop()


def gb(n: float) -> str:
    return f"{n / 1e9:.2f} GB"


def report(kind: str, r: dict, args: argparse.Namespace) -> None:
    c = r["counts"]
    print(f"\n{kind}: built in {r['built_s']:.0f} s (raw runs {r['raw_s']:.0f} s); "
          f"load average {' '.join(f'{x:.2f}' for x in os.getloadavg())}")  # fmt: skip
    print(f"  rows: {c['run']:,} runs ({r['raw_runs']} with raw rows), {c['step']:,} steps, "
          f"{c['metric']:,} step metrics, {c['devicesample']:,} device samples, "
          f"{c['hostsample']:,} host samples, {c['steprollup']:,} rollups, "
          f"{c['epochmetric']:,} epoch metrics, {r['alerts']:,} alerts")  # fmt: skip
    print(f"  size without retention      {gb(r['before'])}  (full history: about "
          f"{gb(r['before'] / args.scale)} at scale 1)")  # fmt: skip
    print(f"  retention {args.retention_days:g} days: {r['runs_compacted']:,} runs compacted, "
          f"{r['rows_removed']:,} raw rows removed in {r['compact_s']:.0f} s")  # fmt: skip
    print(f"  size after compaction       {gb(r['compacted'])}  (freed pages are reused, "
          "not returned)")  # fmt: skip
    vacuum = "VACUUM" if kind == "sqlite" else "VACUUM FULL"
    print(f"  size after {vacuum:<17}{gb(r['vacuumed'])}  ({r['vacuum_s']:.0f} s; "
          f"{r['vacuumed'] / r['before']:.2f} of the size without retention)")  # fmt: skip
    old, recent = r["old"], r["recent"]
    print(f"  old run: {old.duration_s / 3600:.1f} h, {old.gpus} GPUs; "
          f"recent run: {recent.duration_s / 3600:.1f} h, {recent.gpus} GPUs")  # fmt: skip
    print(f"  {'page':<27} {'without retention':>24} {'with retention':>24}")
    print(f"  {'':<27} {'p50 ms':>11} {'p95 ms':>12} {'p50 ms':>11} {'p95 ms':>12}")
    for name, (p50, p95, _) in r["without"].items():
        q50, q95, _ = r["with"][name]
        print(f"  {name:<27} {p50:11.1f} {p95:12.1f} {q50:11.1f} {q95:12.1f}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--scale", type=float, default=0.01, help="share of runs with raw rows")
    parser.add_argument("--days", type=float, default=90)
    parser.add_argument("--gpus", type=int, default=100)
    parser.add_argument("--retention-days", type=float, default=7)
    parser.add_argument("--databases", default="sqlite,postgres")
    parser.add_argument("--requests", type=int, default=30)
    parser.add_argument("--seed", type=int, default=30)
    parser.add_argument(
        "--pages", choices=("all", "device"), default="all",
        help="device: only one long run's device chart, raw and compacted",
    )  # fmt: skip
    args = parser.parse_args()
    # A `timeout` or Ctrl-C still stops PostgreSQL and removes the databases (the finallys).
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    if args.pages == "device":
        with tempfile.TemporaryDirectory(prefix="stoker-device-") as name:
            for kind in args.databases.split(","):
                bench_device_chart(kind, args, Path(name))
        return
    now = time.time()
    jobs = schedule(args, now)
    raw = [j for j in jobs if j.raw]
    gpu_h = sum(j.duration_s * j.gpus for j in jobs) / 3600
    print(f"history: {args.gpus} GPUs x {args.days:g} days: {len(jobs):,} runs, "
          f"{gpu_h:,.0f} GPU-hours ({gpu_h / (args.gpus * args.days * 24):.0%} busy); raw rows "
          f"for {len(raw)} runs (scale {args.scale:g}); {os.cpu_count()} cores, load average "
          f"{' '.join(f'{x:.2f}' for x in os.getloadavg())}; "
          f"disk free {shutil.disk_usage(tempfile.gettempdir()).free / 1e9:.0f} GB")  # fmt: skip
    with tempfile.TemporaryDirectory(prefix="stoker-team-") as name:
        for kind in args.databases.split(","):
            report(kind, bench_database(kind, args, jobs, Path(name)), args)


if __name__ == "__main__":
    main()
