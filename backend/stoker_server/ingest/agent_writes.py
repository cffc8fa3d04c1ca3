"""Writes from agents: open or resume a run, store batches exactly once, end a run.

Every function runs inside one transaction; a batch's rows and its seq cursor are committed
together, so an acknowledged batch is durable and a replayed one is recognised. A batch is
stored section by section (`SECTIONS`: each unit writes its rows and adds its part of the
run's statistics); the rows of a whole group go in together (group_rows: the hot path).
"""

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from itertools import repeat
from typing import Any

from sqlalchemy import bindparam, update
from sqlalchemy import select as sa_select
from sqlalchemy.engine import Connection
from sqlmodel import Session, col, select

from stoker_server.core.db import placeholder
from stoker_server.core.models import IngestCursor, Run, RunStatus, utc_now
from stoker_server.core.step_chunks import batch_sizes
from stoker_server.ingest.group_rows import ROLLUP_WIDTHS as ROLLUP_WIDTHS  # read by api.queries
from stoker_server.ingest.group_rows import GroupRows, executemany
from stoker_server.ingest.pipeline_store import store_pipeline_reads
from stoker_server.ingest.profiles import settle_at_run_end
from stoker_server.ingest.protocol import (
    AgentCounters,
    Batch,
    Columns,
    DeviceColumns,
    EpochColumns,
    Hello,
    HostColumns,
    MetricColumns,
    PipelineColumns,
    StepColumns,
)
from stoker_server.ingest.summary import (
    GPM_SUMMARY_FIELDS,
    add_agent_counters,
    add_device_samples,
    add_epoch_metrics,
    add_metrics,
    add_steps,
    add_worker_steps,
    epoch_metric_summary,
    gpu_count,
    metric_goal,
    set_unsent_steps,
    set_worker_gpus,
    stored_summary,
    summarised_epoch_names,
)
from stoker_server.ingest.workers import end_worker, job_status, join_worker


def open_run(*, session: Session, hello: Hello) -> tuple[Run, int]:
    """Create the run named by `hello.run_key`, or join it (another worker of the job, in any
    order) or resume it (the same worker reconnecting or restarted); return it and the last
    seq stored from this worker's stream."""
    run = session.exec(select(Run).where(Run.run_key == hello.run_key)).first()
    now = utc_now()
    if run is None:
        run = Run(
            run_key=hello.run_key,
            name=hello.name or hello.run_key[:12],
            project=hello.project or "default",
            tags=hello.tags,
            config=hello.config,
            environment=hello.environment,
            started_at=now,
            summary=stored_summary({}),
        )
    else:
        run.status = RunStatus.running
        run.ended_at = None
        if hello.environment and not run.environment:
            run.environment = hello.environment
    run.stats = join_worker(run.stats, rank=hello.rank, host=hello.host, pid=hello.pid)
    run.stats = set_worker_gpus(run.stats, rank=hello.rank, gpus=gpu_count(hello.environment))
    run.summary = stored_summary(run.stats)
    run.last_seen_at = now
    session.add(run)
    session.commit()
    session.refresh(run)
    assert run.id is not None
    cursor = _cursor(session=session, run_id=run.id, stream=hello.stream)
    return run, cursor.last_seq if cursor else 0


def _cursor(*, session: Session, run_id: int, stream: str) -> IngestCursor | None:
    query = select(IngestCursor).where(IngestCursor.run_id == run_id, IngestCursor.stream == stream)
    return session.exec(query).first()


# The run's fields a live update needs after a batch (the rest does not change with batches).
BATCH_RUN_FIELDS = ("name", "tags", "notes", "status", "summary", "last_seen_at")


@dataclass
class BatchJob:
    """One agent batch waiting for the writer."""

    run_id: int
    stream: str
    rank: int
    batch: Batch


def store_batch(
    *, session: Session, run_id: int, stream: str, rank: int, batch: Batch
) -> dict[str, Any] | None:
    """Store one batch unless its seq is already stored (see `store_batches`)."""
    return store_batches(session=session, jobs=[BatchJob(run_id, stream, rank, batch)])[0]


# Built once: SQLAlchemy caches their compiled form, and building an expression per batch
# cost more than executing it.
_RUN_STATE = sa_select(
    col(Run.id), col(Run.stats), col(Run.name), col(Run.tags), col(Run.notes), col(Run.status)
).where(col(Run.id).in_(bindparam("run_ids", expanding=True)))
_RUN_UPDATE = (
    update(Run)
    .where(col(Run.id) == bindparam("run_id"))
    .values(stats=bindparam("stats"), summary=bindparam("summary"), last_seen_at=bindparam("now"))
)


def store_batches(*, session: Session, jobs: Sequence[BatchJob]) -> list[dict[str, Any] | None]:
    """Store several batches in one transaction (the writer's group commit).

    A batch whose seq is already stored for its stream is skipped (None); for the others the
    result is the run's fresh `BATCH_RUN_FIELDS`. Each run's row and each stream's cursor is
    read and written once per group; each batch's sections are stored by `SECTIONS`.
    """
    if not jobs:
        return []
    connection = session.connection()
    mark = placeholder(connection)
    rows = GroupRows(connection)
    # The group's runs and their streams' cursors, read in one statement each: a team's group
    # holds batches of many agents, and a statement per stream and per run was a round trip
    # each on the writer's one thread.
    run_ids = sorted({job.run_id for job in jobs})
    cursors = _stored_cursors(connection, run_ids)
    states = {row.id: row for row in connection.execute(_RUN_STATE, {"run_ids": run_ids})}
    runs: dict[int, dict[str, Any]] = {}
    results: list[dict[str, Any] | None] = []
    for job in jobs:
        key = (job.run_id, job.stream)
        if job.batch.seq <= cursors.setdefault(key, 0):
            results.append(None)
            continue
        cursors[key] = job.batch.seq
        run = runs.get(job.run_id)
        if run is None:
            row = states.get(job.run_id)
            if row is None:
                raise LookupError(f"run {job.run_id} does not exist (deleted meanwhile?)")
            run = runs[job.run_id] = {
                "stats": row.stats, "name": row.name, "tags": row.tags, "notes": row.notes,
                "status": row.status, "dirty_streams": set(),
            }  # fmt: skip
        run["stats"] = _store_sections(rows, job, run["stats"])
        run["dirty_streams"].add(job.stream)
        results.append(run)
    rows.finish()
    now = utc_now()
    for run in runs.values():
        run["summary"] = stored_summary(run["stats"])
        run["last_seen_at"] = now
    if runs:
        connection.execute(
            _RUN_UPDATE,
            [
                {"run_id": run_id, "stats": run["stats"], "summary": run["summary"], "now": now}
                for run_id, run in runs.items()
            ],
        )
        executemany(
            connection,
            "INSERT INTO ingestcursor (run_id, stream, last_seq) "
            f"VALUES ({mark}, {mark}, {mark}) "
            "ON CONFLICT (run_id, stream) DO UPDATE SET last_seq = excluded.last_seq",
            [
                (run_id, stream, cursors[(run_id, stream)])
                for run_id, run in runs.items()
                for stream in sorted(run["dirty_streams"])
            ],
        )
    session.commit()
    return [None if r is None else {k: r[k] for k in BATCH_RUN_FIELDS} for r in results]


def _stored_cursors(connection: Connection, run_ids: Sequence[int]) -> dict[tuple[int, str], int]:
    """The last stored seq of every stream of `run_ids`."""
    mark = placeholder(connection)
    stored = connection.exec_driver_sql(
        "SELECT run_id, stream, last_seq FROM ingestcursor "
        f"WHERE run_id IN ({', '.join([mark] * len(run_ids))})",
        tuple(run_ids),
    ).all()
    return {(run_id, stream): last_seq for run_id, stream, last_seq in stored}


def _store_sections(rows: GroupRows, job: BatchJob, stats: dict[str, Any]) -> dict[str, Any]:
    """Store each section a batch carries; return the run's statistics with them added."""
    for name, store in SECTIONS.items():
        section = getattr(job.batch, name)
        if section is None or (isinstance(section, Columns) and not len(section)):
            continue
        stats = store(rows, job, section, stats)
    return stats


# One unit per batch section: it stores the section's rows (into `rows`, for the group) and
# returns the run's statistics with the section's part added.


def _steps(
    rows: GroupRows, job: BatchJob, steps: StepColumns, stats: dict[str, Any]
) -> dict[str, Any]:
    """Step rows, the step rollups, the run's and the worker's step statistics."""
    # One numpy copy of each column, made at parse, serves the rows, the rollups and the
    # statistics (and the detectors' window).
    step, t, dur, wait, batch_size = steps.arrays()
    rows.insert_steps(
        run_id=job.run_id, rank=job.rank, step=step, t=t, dur=dur, wait=wait,
        batch_size=batch_sizes(steps.batch_size, batch_size),
    )  # fmt: skip
    rows.roll_up(run_id=job.run_id, rank=job.rank, step=step, t=t, dur=dur, wait=wait)
    stats = add_steps(stats, steps=step, t=t, dur=dur, wait=wait, batch_size=batch_size)
    return add_worker_steps(
        stats, rank=job.rank, steps=step, t=t, dur=dur, wait=wait, batch_size=batch_size
    )


def _metrics(
    rows: GroupRows, job: BatchJob, metrics: MetricColumns, stats: dict[str, Any]
) -> dict[str, Any]:
    """Metric rows; the count of non-finite values."""
    rows.insert("metric", metrics, run_id=job.run_id, rank=job.rank)
    return add_metrics(stats, values=metrics.value)


def _device(
    rows: GroupRows, job: BatchJob, device: DeviceColumns, stats: dict[str, Any]
) -> dict[str, Any]:
    """GPU sample rows and their rollups; utilization, memory peaks, GPM means, energy."""
    rows.insert("devicesample", device, run_id=job.run_id, rank=job.rank)
    rows.roll_up_device(run_id=job.run_id, rank=job.rank, columns=device)
    return add_device_samples(
        stats,
        util=device.column("util"),
        mem_used=device.column("mem_used"),
        tf_mem_peak=device.column("tf_mem_peak"),
        rank=job.rank,
        gpu=device.gpu,
        gpm={name: device.column(name) for name in GPM_SUMMARY_FIELDS},
        energy_j=device.column("energy_j"),
        energy_integrated=device.column("energy_integrated"),
    )


def _host(
    rows: GroupRows, job: BatchJob, host: HostColumns, stats: dict[str, Any]
) -> dict[str, Any]:
    """Host sample rows (not summarised)."""
    rows.insert("hostsample", host, run_id=job.run_id, rank=job.rank)
    return stats


def _epochs(
    rows: GroupRows, job: BatchJob, epochs: EpochColumns, stats: dict[str, Any]
) -> dict[str, Any]:
    """Epoch rows (an epoch reported again replaces the stored one: a resumed run); the last
    and best value of each metric the batch touched, read back from all its epochs."""
    connection, run_id = rows.connection, job.run_id
    mark = placeholder(connection)
    executemany(
        connection,
        "INSERT INTO epochmetric (run_id, epoch, step, t, name, value) "
        f"VALUES ({', '.join([mark] * 6)}) ON CONFLICT (run_id, name, epoch) DO UPDATE SET "
        "step = excluded.step, t = excluded.t, value = excluded.value",
        zip(repeat(run_id), epochs.epoch, epochs.step, epochs.t, epochs.name, epochs.value),
    )
    names = summarised_epoch_names(stats, epochs.name)
    if not names:
        return stats
    config = (
        connection.execute(sa_select(col(Run.config)).where(col(Run.id) == run_id)).scalar() or {}
    )
    summaries = {}
    for name in names:
        stored = connection.exec_driver_sql(
            "SELECT epoch, value FROM epochmetric "
            f"WHERE run_id = {mark} AND name = {mark} ORDER BY epoch",
            (run_id, name),
        ).all()
        goal, directed = metric_goal(name, config)
        summaries[name] = epoch_metric_summary(
            [(int(e), v) for e, v in stored], goal=goal, directed=directed
        )
    return add_epoch_metrics(stats, summaries)


def _pipeline(
    rows: GroupRows, job: BatchJob, reads: PipelineColumns, stats: dict[str, Any]
) -> dict[str, Any]:
    """tf.data model reads, the run's latest kept (not summarised)."""
    store_pipeline_reads(rows.connection, run_id=job.run_id, rank=job.rank, reads=reads)
    return stats


def _agent(
    rows: GroupRows, job: BatchJob, counters: AgentCounters, stats: dict[str, Any]
) -> dict[str, Any]:
    """No rows; the stream's latest delivery counters."""
    return add_agent_counters(stats, stream=job.stream, counters=counters.model_dump())


SectionStore = Callable[[GroupRows, BatchJob, Any, dict[str, Any]], dict[str, Any]]

# Every section of a `Batch`, by its field, in the order a batch is stored.
SECTIONS: dict[str, SectionStore] = {
    "steps": _steps,
    "metrics": _metrics,
    "device": _device,
    "host": _host,
    "epochs": _epochs,
    "pipeline": _pipeline,
    "agent": _agent,
}


def end_run(
    *, session: Session, run_id: int, status: RunStatus, stream: str = "", unsent_steps: int = 0,
    rank: int | None = None,
) -> Run:  # fmt: skip
    """Mark worker `rank` of a run ended with `status` (the whole run when no rank is given);
    `unsent_steps` of its `stream` are still to come. The run ends with its last worker."""
    run = session.get(Run, run_id)
    assert run is not None
    stats = run.stats
    if unsent_steps or stats.get("unsent_steps"):
        stats = set_unsent_steps(stats, stream=stream, steps=unsent_steps)
    if rank is not None:
        stats = end_worker(stats, rank=rank, status=status)
    run.stats = stats
    run.summary = stored_summary(stats)
    run.status = (job_status(stats) if rank is not None else None) or status
    run.last_seen_at = utc_now()
    run.ended_at = None if run.status == RunStatus.running else run.last_seen_at
    session.add(run)
    # A capture this worker never started cannot start now.
    settle_at_run_end(session=session, run_id=run_id, rank=rank)
    session.commit()
    session.refresh(run)
    return run
