"""profiler captures

Revision ID: 0005
Revises: 0004
Create Date: 2026-11-24 11:40:00.000000
"""

from collections.abc import Sequence

import sqlalchemy as sa
import sqlmodel
from alembic import op

revision: str = "0005"
down_revision: str | None = "0004"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def _json() -> sa.types.TypeEngine:
    return sa.JSON().with_variant(sa.dialects.postgresql.JSONB(), "postgresql")


def upgrade() -> None:
    status = sa.Enum("requested", "capturing", "uploading", "ready", "failed", name="profilestatus")
    op.create_table(
        "profile",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("run_id", sa.Integer(), nullable=False),
        sa.Column("status", status, nullable=False),
        sa.Column("steps", sa.Integer(), nullable=False),
        sa.Column("created_at", sqlmodel.sql.sqltypes.UTCDateTime(), nullable=False),
        sa.Column("updated_at", sqlmodel.sql.sqltypes.UTCDateTime(), nullable=False),
        sa.Column("first_step", sa.BigInteger(), nullable=True),
        sa.Column("last_step", sa.BigInteger(), nullable=True),
        sa.Column("error", sqlmodel.sql.sqltypes.AutoString(length=2000), nullable=True),
        sa.Column("trace_bytes", sa.BigInteger(), nullable=True),
        sa.Column("received_bytes", sa.BigInteger(), nullable=False),
        sa.Column("trace_evicted", sa.Boolean(), nullable=False),
        sa.Column("overhead", _json(), nullable=False),
        sa.Column("analysis", _json(), nullable=False),
        sa.Column("input_share_profiler", sa.Float(), nullable=True),
        sa.Column("input_share_stoker", sa.Float(), nullable=True),
        sa.ForeignKeyConstraint(["run_id"], ["run.id"], ondelete="CASCADE"),
        sa.PrimaryKeyConstraint("id"),
    )
    op.create_index("ix_profile_run_id", "profile", ["run_id"])


def downgrade() -> None:
    op.drop_index("ix_profile_run_id", table_name="profile")
    op.drop_table("profile")
    sa.Enum(name="profilestatus").drop(op.get_bind(), checkfirst=True)
