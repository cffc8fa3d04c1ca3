"""profile workers: each worker's part of a capture (several workers)

Revision ID: 0008
Revises: 0007
Create Date: 2026-11-26 07:15:00.000000
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0008"
down_revision: str | None = "0007"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def _json() -> sa.types.TypeEngine:
    return sa.JSON().with_variant(sa.dialects.postgresql.JSONB(), "postgresql")


def upgrade() -> None:
    with op.batch_alter_table("profile") as batch:
        batch.add_column(sa.Column("workers", _json(), nullable=False, server_default="{}"))


def downgrade() -> None:
    with op.batch_alter_table("profile") as batch:
        batch.drop_column("workers")
