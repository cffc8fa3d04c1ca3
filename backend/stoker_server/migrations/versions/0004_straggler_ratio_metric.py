"""alert metric straggler_ratio

Revision ID: 0004
Revises: 0003
Create Date: 2026-11-25 09:00:00.000000
"""

from collections.abc import Sequence

from alembic import op

revision: str = "0004"
down_revision: str | None = "0003"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    # A native enum on PostgreSQL; on SQLite the column is a VARCHAR wide enough already.
    if op.get_bind().dialect.name == "postgresql":
        op.execute("ALTER TYPE alertmetric ADD VALUE IF NOT EXISTS 'straggler_ratio'")


def downgrade() -> None:
    # PostgreSQL cannot drop an enum value; rules using it are removed so none names it.
    op.execute("DELETE FROM alert_rule WHERE metric = 'straggler_ratio'")
