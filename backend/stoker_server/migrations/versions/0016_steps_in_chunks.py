"""raw steps in chunks: less database CPU and write-ahead log per stored step

stepchunk replaces step: one row per (run, rank) and up to 4,096 steps, each column a
little-endian array. A row per step cost PostgreSQL an index entry per step, 1.5-2 us of its
CPU and 70 bytes of write-ahead log a step, more than the row itself. The steps already
stored are moved here, each (run, rank) in step order (a step stored twice in time order),
cut where a chunk reaches 4,096 steps or spans 65,536 step numbers (core.step_chunks).
PostgreSQL keeps the arrays uncompressed (STORAGE EXTERNAL): pglz gains little on them and
costs CPU at ingest.

Revision ID: 0016
Revises: 0015
Create Date: 2026-11-27 20:40:00.000000
"""

from collections.abc import Iterator, Sequence
from typing import Any

import numpy as np
import sqlalchemy as sa
from alembic import op

revision: str = "0016"
down_revision: str | None = "0015"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

# Frozen here, as a migration must be: core.step_chunks's values when this was written.
CHUNK_STEPS = 4096
CHUNK_SPAN = 1 << 16
ARRAYS = ("step", "t", "dur", "wait", "batch_size")
DTYPES = ("<i8", "<f8", "<f8", "<f8", "<i8")
COLUMNS = ("run_id", "rank", "first_step", "last_step", "first_t", "last_t", "n", *ARRAYS)


def upgrade() -> None:
    op.create_table(
        "stepchunk",
        sa.Column("run_id", sa.Integer(), nullable=False),
        sa.Column("rank", sa.Integer(), nullable=False),
        sa.Column("first_step", sa.BigInteger(), nullable=False),
        sa.Column("last_step", sa.BigInteger(), nullable=False),
        sa.Column("first_t", sa.Float(), nullable=False),
        sa.Column("last_t", sa.Float(), nullable=False),
        sa.Column("n", sa.Integer(), nullable=False),
        *(sa.Column(name, sa.LargeBinary(), nullable=name == "batch_size") for name in ARRAYS),
    )
    op.create_index("ix_stepchunk_run_rank_first", "stepchunk", ["run_id", "rank", "first_step"])
    bind = op.get_bind()
    if bind.dialect.name == "postgresql":
        for name in ARRAYS:
            op.execute(f"ALTER TABLE stepchunk ALTER COLUMN {name} SET STORAGE EXTERNAL")
    insert = sa.text(
        f"INSERT INTO stepchunk ({', '.join(COLUMNS)}) "
        f"VALUES ({', '.join(':' + c for c in COLUMNS)})"
    )
    keys = bind.execute(sa.text("SELECT DISTINCT run_id, rank FROM step")).all()
    for run_id, rank in keys:
        rows = bind.execute(
            sa.text(
                "SELECT step, t, dur, wait, batch_size FROM step "
                "WHERE run_id = :run AND rank = :rank ORDER BY step, t"
            ),
            {"run": run_id, "rank": rank},
        ).all()
        chunks = [dict(zip(COLUMNS, c, strict=True)) for c in _chunks(run_id, rank, rows)]
        for start in range(0, len(chunks), 500):
            bind.execute(insert, chunks[start : start + 500])
    op.drop_index("ix_step_run_rank_step", table_name="step")
    op.drop_table("step")


def _chunks(run_id: int, rank: int, rows: Sequence[Any]) -> Iterator[tuple[Any, ...]]:
    step = np.array([r[0] for r in rows], dtype=np.int64)
    t = np.array([r[1] for r in rows], dtype=np.float64)
    dur = np.array([r[2] for r in rows], dtype=np.float64)
    wait = np.array([np.nan if r[3] is None else r[3] for r in rows], dtype=np.float64)
    known = any(r[4] is not None for r in rows)
    batch = np.array([-1 if r[4] is None else r[4] for r in rows], dtype=np.int64)
    start = 0
    while start < len(step):
        end = min(start + CHUNK_STEPS, len(step))
        limit = int(step[start]) + CHUNK_SPAN  # Python's integers: numpy's would wrap
        if limit < 2**63:
            end = start + int(np.searchsorted(step[start:end], np.int64(limit)))
        piece = slice(start, end)
        arrays = [
            np.ascontiguousarray(a[piece], dtype=d).tobytes()
            for a, d in zip((step, t, dur, wait, batch), DTYPES, strict=True)
        ]
        yield (
            run_id, rank, int(step[start]), int(step[end - 1]), float(t[piece].min()),
            float(t[piece].max()), end - start, *arrays[:4], arrays[4] if known else None,
        )  # fmt: skip
        start = end


def downgrade() -> None:
    op.create_table(
        "step",
        sa.Column("run_id", sa.Integer(), nullable=False),
        sa.Column("rank", sa.Integer(), nullable=False),
        sa.Column("step", sa.BigInteger(), nullable=False),
        sa.Column("t", sa.Float(), nullable=False),
        sa.Column("dur", sa.Float(), nullable=False),
        sa.Column("wait", sa.Float(), nullable=True),
        sa.Column("batch_size", sa.BigInteger(), nullable=True),
    )
    op.create_index("ix_step_run_rank_step", "step", ["run_id", "rank", "step"], unique=False)
    bind = op.get_bind()
    insert = sa.text(
        "INSERT INTO step (run_id, rank, step, t, dur, wait, batch_size) "
        "VALUES (:run_id, :rank, :step, :t, :dur, :wait, :batch_size)"
    )
    chunks = bind.execute(
        sa.text(f"SELECT run_id, rank, n, {', '.join(ARRAYS)} FROM stepchunk")
    ).all()
    for run_id, rank, n, *blobs in chunks:
        arrays = [
            np.full(n, -1, dtype=np.int64) if b is None else np.frombuffer(b, dtype=d)
            for b, d in zip(blobs, DTYPES, strict=True)
        ]
        values = zip(*(a.tolist() for a in arrays), strict=True)
        rows = [
            {"run_id": run_id, "rank": rank, "step": s, "t": t, "dur": d,
             "wait": None if w != w else w, "batch_size": None if b < 0 else b}
            for s, t, d, w, b in values
        ]  # fmt: skip
        if rows:
            bind.execute(insert, rows)
    op.drop_index("ix_stepchunk_run_rank_first", table_name="stepchunk")
    op.drop_table("stepchunk")
