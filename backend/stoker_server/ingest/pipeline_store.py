"""Storing and reading a run's tf.data model reads (the `pipeline` wire section).

A read is one row; a run keeps its latest `MAX_PIPELINE_READS` (at the agent's default 5 s
interval, almost three hours), older ones are deleted as new ones arrive.
"""

from typing import Any

from sqlalchemy import delete, insert, select
from sqlalchemy.engine import Connection

from stoker_server.core.models import PipelineRead
from stoker_server.ingest.protocol import PipelineColumns

MAX_PIPELINE_READS = 2000

_TABLE = PipelineRead.__table__  # type: ignore[attr-defined]


def store_pipeline_reads(
    connection: Connection, *, run_id: int, rank: int, reads: PipelineColumns
) -> None:
    rows = [
        {
            "run_id": run_id,
            "rank": rank,
            "t": t,
            "source": source,
            "stages": [stage.model_dump() for stage in stages],
            "read_us": read_us,
        }
        for t, source, stages, read_us in zip(
            reads.t, reads.source, reads.stages, reads.column("read_us"), strict=True
        )
    ]
    connection.execute(insert(_TABLE), rows)
    cutoff = connection.execute(
        select(_TABLE.c.t)
        .where(_TABLE.c.run_id == run_id)
        .order_by(_TABLE.c.t.desc())
        .offset(MAX_PIPELINE_READS)
        .limit(1)
    ).scalar()
    if cutoff is not None:
        connection.execute(delete(_TABLE).where(_TABLE.c.run_id == run_id, _TABLE.c.t <= cutoff))


def pipeline_read(connection: Connection, run_id: int, at: float | None) -> dict[str, Any] | None:
    """The latest read of the run (of rank 0 first), or the latest at or before `at`."""
    query = select(_TABLE.c.t, _TABLE.c.source, _TABLE.c.stages, _TABLE.c.read_us).where(
        _TABLE.c.run_id == run_id
    )
    if at is not None:
        query = query.where(_TABLE.c.t <= at)
    row = connection.execute(query.order_by(_TABLE.c.rank, _TABLE.c.t.desc()).limit(1)).first()
    return None if row is None else dict(row._mapping)
