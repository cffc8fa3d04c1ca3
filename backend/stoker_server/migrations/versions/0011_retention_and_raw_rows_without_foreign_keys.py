"""retention: pinned and compacted runs; raw rows without a foreign key

A run gains `pinned` (retention keeps its raw rows) and `compacted_at` (when its raw steps
and samples were reduced to rollups; null while every raw row is kept).

The high-volume raw tables (step, devicesample, hostsample) lose their foreign key to run:
PostgreSQL checks a foreign key row by row, which cost as much as the insert itself, and
these rows are only ever written by the ingest writer for a run it has just read, and
deleted table by table with their run (stoker_server.api.edits.RUN_CHILD_TABLES). On SQLite the
tables are copied (batch mode), once.

Revision ID: 0011
Revises: 0010
Create Date: 2026-11-27 10:20:00.000000
"""

from collections.abc import Sequence

import sqlalchemy as sa
import sqlmodel
from alembic import op

revision: str = "0011"
down_revision: str | None = "0010"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

RAW_TABLES = ("step", "devicesample", "hostsample")
# SQLite's foreign keys have no name; batch mode finds them by this convention.
NAMING = {"fk": "fk_%(table_name)s_%(column_0_name)s_%(referred_table_name)s"}


def _fk_name(table: str) -> str:
    if op.get_bind().dialect.name == "postgresql":
        return f"{table}_run_id_fkey"
    return f"fk_{table}_run_id_run"


def upgrade() -> None:
    with op.batch_alter_table("run", schema=None) as batch_op:
        batch_op.add_column(
            sa.Column("pinned", sa.Boolean(), nullable=False, server_default=sa.false())
        )
        batch_op.add_column(
            sa.Column("compacted_at", sqlmodel.sql.sqltypes.UTCDateTime(), nullable=True)
        )
    for table in RAW_TABLES:
        with op.batch_alter_table(table, schema=None, naming_convention=NAMING) as batch_op:
            batch_op.drop_constraint(_fk_name(table), type_="foreignkey")


def downgrade() -> None:
    for table in RAW_TABLES:
        op.execute(f"DELETE FROM {table} WHERE run_id NOT IN (SELECT id FROM run)")
        with op.batch_alter_table(table, schema=None, naming_convention=NAMING) as batch_op:
            batch_op.create_foreign_key(
                _fk_name(table), "run", ["run_id"], ["id"], ondelete="CASCADE"
            )
    with op.batch_alter_table("run", schema=None) as batch_op:
        batch_op.drop_column("compacted_at")
        batch_op.drop_column("pinned")
