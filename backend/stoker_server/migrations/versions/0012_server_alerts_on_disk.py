"""server alerts: the disk free-space alert metric, alerts that belong to no run

Alert metrics gain disk_free_share (the free share of the data directory's disk). Such a rule
watches the server, not a run: its alerts have no run (alert.run_id null).

Revision ID: 0012
Revises: 0011
Create Date: 2026-11-27 13:50:00.000000
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0012"
down_revision: str | None = "0011"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

NEW_METRICS = ("disk_free_share",)


def upgrade() -> None:
    # Alert metrics: a native enum on PostgreSQL; on SQLite a VARCHAR wide enough already.
    if op.get_bind().dialect.name == "postgresql":
        for metric in NEW_METRICS:
            op.execute(f"ALTER TYPE alertmetric ADD VALUE IF NOT EXISTS '{metric}'")
    with op.batch_alter_table("alert", schema=None) as batch_op:
        batch_op.alter_column("run_id", existing_type=sa.Integer(), nullable=True)


def downgrade() -> None:
    # PostgreSQL cannot drop an enum value; rules using it are removed so none names it.
    names = ", ".join(f"'{metric}'" for metric in NEW_METRICS)
    op.execute(f"DELETE FROM alert_rule WHERE metric IN ({names})")
    op.execute("DELETE FROM alert WHERE run_id IS NULL")
    with op.batch_alter_table("alert", schema=None) as batch_op:
        batch_op.alter_column("run_id", existing_type=sa.Integer(), nullable=False)
