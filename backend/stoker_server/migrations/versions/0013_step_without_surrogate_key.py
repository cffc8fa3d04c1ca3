"""step without its surrogate key

The step table loses `id`: on PostgreSQL its sequence and primary-key index were about a
third of the database's cost per ingested row (binary COPY into a copy of the table without
them: 3.0 instead of 4.7 µs per row). Rows are found by (run_id, rank, step), indexed as
before; that triple is not unique (a restarted worker counts its steps from 0 again), so the
table has no primary key. On SQLite the table is copied (batch mode), once.

Revision ID: 0013
Revises: 0012
Create Date: 2026-11-27 13:55:00.000000
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0013"
down_revision: str | None = "0012"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

COLUMNS = "run_id, rank, step, t, dur, wait, batch_size"


def upgrade() -> None:
    with op.batch_alter_table("step", schema=None) as batch_op:
        batch_op.drop_column("id")


def downgrade() -> None:
    if op.get_bind().dialect.name == "postgresql":
        op.execute("ALTER TABLE step ADD COLUMN id BIGSERIAL PRIMARY KEY")
        return
    op.create_table(
        "_step_with_id",
        sa.Column("id", sa.Integer(), primary_key=True, autoincrement=True, nullable=False),
        sa.Column("run_id", sa.Integer(), nullable=False),
        sa.Column("rank", sa.Integer(), nullable=False),
        sa.Column("step", sa.BigInteger(), nullable=False),
        sa.Column("t", sa.Float(), nullable=False),
        sa.Column("dur", sa.Float(), nullable=False),
        sa.Column("wait", sa.Float(), nullable=True),
        sa.Column("batch_size", sa.BigInteger(), nullable=True),
    )
    op.execute(f"INSERT INTO _step_with_id ({COLUMNS}) SELECT {COLUMNS} FROM step")
    op.drop_index("ix_step_run_rank_step", table_name="step")
    op.drop_table("step")
    op.rename_table("_step_with_id", "step")
    op.create_index("ix_step_run_rank_step", "step", ["run_id", "rank", "step"], unique=False)
