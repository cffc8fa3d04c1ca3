"""tune groups (`stoker tune`: a group of trial runs and the table comparing them)

Revision ID: 0019
Revises: 0018
Create Date: 2026-11-29 09:00:00.000000
"""

from collections.abc import Sequence

import sqlalchemy as sa
import sqlmodel
from alembic import op
from sqlalchemy.dialects import postgresql

revision: str = "0019"
down_revision: str | None = "0018"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def _json() -> sa.types.TypeEngine[object]:
    return sa.JSON().with_variant(postgresql.JSONB(astext_type=sa.Text()), "postgresql")


def upgrade() -> None:
    op.create_table(
        "tunegroup",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("key", sqlmodel.sql.sqltypes.AutoString(length=64), nullable=False),
        sa.Column("name", sqlmodel.sql.sqltypes.AutoString(length=200), nullable=False),
        sa.Column("project", sqlmodel.sql.sqltypes.AutoString(length=200), nullable=False),
        sa.Column("command", _json(), nullable=False),
        sa.Column("cwd", sqlmodel.sql.sqltypes.AutoString(length=2000), nullable=False),
        sa.Column("steps", sa.Integer(), nullable=False),
        sa.Column(
            "status",
            sa.Enum("running", "finished", "failed", "interrupted", name="tunestatus"),
            nullable=False,
        ),
        sa.Column("created_at", sqlmodel.sql.sqltypes.UTCDateTime(), nullable=False),
        sa.Column("updated_at", sqlmodel.sql.sqltypes.UTCDateTime(), nullable=False),
        sa.Column("trials", _json(), nullable=False),
        sa.Column("table", _json(), nullable=False),
        sa.PrimaryKeyConstraint("id"),
    )
    op.create_index("ix_tunegroup_key", "tunegroup", ["key"], unique=True)
    op.create_index("ix_tunegroup_created_at", "tunegroup", ["created_at"], unique=False)


def downgrade() -> None:
    op.drop_index("ix_tunegroup_created_at", table_name="tunegroup")
    op.drop_index("ix_tunegroup_key", table_name="tunegroup")
    op.drop_table("tunegroup")
    sa.Enum(name="tunestatus").drop(op.get_bind(), checkfirst=True)
