"""step rollups without their foreign key: less database CPU per stored step

steprollup's foreign key to run is checked row by row: on PostgreSQL, the COPY of a group's
~1,700 new rollup rows (20,000 steps) took 25 ms, two thirds of the group's rollup time and a
third of the writer's. The raw rows lost theirs for the same reason (migration 0011); a run's
deletion removes its rollups with its other rows (api.edits.RUN_CHILD_TABLES). Rollups of a
run that no longer exists (none should) are removed here. On SQLite the table is copied,
once.

Revision ID: 0017
Revises: 0016
Create Date: 2026-11-27 21:00:00.000000
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0017"
down_revision: str | None = "0016"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

KEY = ["run_id", "rank", "width", "bucket"]
VALUES = ["n", "step_max", "t_max", "dur_sum", "dur_min", "dur_max", "wait_sum", "wait_n"]
COLUMNS = ", ".join([*KEY, *VALUES])


def _table(name: str, *constraints: sa.schema.SchemaItem) -> None:
    op.create_table(
        name,
        sa.Column("run_id", sa.Integer(), nullable=False),
        sa.Column("rank", sa.Integer(), nullable=False),
        sa.Column("width", sa.Integer(), nullable=False),
        sa.Column("bucket", sa.BigInteger(), nullable=False),
        sa.Column("n", sa.Integer(), nullable=False),
        sa.Column("step_max", sa.BigInteger(), nullable=False),
        sa.Column("t_max", sa.Float(), nullable=False),
        sa.Column("dur_sum", sa.Float(), nullable=False),
        sa.Column("dur_min", sa.Float(), nullable=False),
        sa.Column("dur_max", sa.Float(), nullable=False),
        sa.Column("wait_sum", sa.Float(), nullable=False),
        sa.Column("wait_n", sa.Integer(), nullable=False),
        sa.PrimaryKeyConstraint(*KEY),
        *constraints,
    )


def _copy_into_new_table(*constraints: sa.schema.SchemaItem) -> None:
    """SQLite: a table's foreign keys change only by copying it."""
    _table("_steprollup_new", *constraints)
    op.execute(f"INSERT INTO _steprollup_new ({COLUMNS}) SELECT {COLUMNS} FROM steprollup")
    op.drop_table("steprollup")
    op.rename_table("_steprollup_new", "steprollup")


def upgrade() -> None:
    op.execute("DELETE FROM steprollup WHERE run_id NOT IN (SELECT id FROM run)")
    bind = op.get_bind()
    if bind.dialect.name == "postgresql":
        for key in sa.inspect(bind).get_foreign_keys("steprollup"):
            op.drop_constraint(key["name"], "steprollup", type_="foreignkey")
        return
    _copy_into_new_table()


def downgrade() -> None:
    if op.get_bind().dialect.name == "postgresql":
        op.create_foreign_key(
            "steprollup_run_id_fkey", "steprollup", "run", ["run_id"], ["id"], ondelete="CASCADE"
        )
        return
    _copy_into_new_table(sa.ForeignKeyConstraint(["run_id"], ["run.id"], ondelete="CASCADE"))
