"""alerts for run ends, metrics and throughput, and the profile action

Alert metrics gain run_finished, run_failed, run_interrupted, metric_nonfinite, metric_rise
and throughput_drop. Rules gain the metric they watch (metric_name), a throughput baseline
(baseline_run_id, baseline_s) and the action "capture profile_steps steps of profile"; an
alert links the profile its rule captured (profile_id), a profile the alert that asked for
it (alert_id). Nullable columns: old rows read null.

Revision ID: 0010
Revises: 0009
Create Date: 2026-11-27 10:30:00.000000
"""

from collections.abc import Sequence

import sqlalchemy as sa
import sqlmodel
from alembic import op

revision: str = "0010"
down_revision: str | None = "0009"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

NEW_METRICS = (
    "run_finished",
    "run_failed",
    "run_interrupted",
    "metric_nonfinite",
    "metric_rise",
    "throughput_drop",
)


def upgrade() -> None:
    # Alert metrics: a native enum on PostgreSQL; on SQLite a VARCHAR wide enough already.
    if op.get_bind().dialect.name == "postgresql":
        for metric in NEW_METRICS:
            op.execute(f"ALTER TYPE alertmetric ADD VALUE IF NOT EXISTS '{metric}'")
    with op.batch_alter_table("alert_rule", schema=None) as batch_op:
        batch_op.add_column(
            sa.Column("metric_name", sqlmodel.sql.sqltypes.AutoString(length=100), nullable=True)
        )
        batch_op.add_column(sa.Column("baseline_run_id", sa.Integer(), nullable=True))
        batch_op.add_column(sa.Column("baseline_s", sa.Float(), nullable=True))
        batch_op.add_column(sa.Column("profile_steps", sa.Integer(), nullable=True))
    with op.batch_alter_table("alert", schema=None) as batch_op:
        batch_op.add_column(sa.Column("profile_id", sa.Integer(), nullable=True))
    with op.batch_alter_table("profile", schema=None) as batch_op:
        batch_op.add_column(sa.Column("alert_id", sa.Integer(), nullable=True))


def downgrade() -> None:
    # PostgreSQL cannot drop an enum value; rules using them are removed so none names them.
    names = ", ".join(f"'{metric}'" for metric in NEW_METRICS)
    op.execute(f"DELETE FROM alert_rule WHERE metric IN ({names})")
    with op.batch_alter_table("profile", schema=None) as batch_op:
        batch_op.drop_column("alert_id")
    with op.batch_alter_table("alert", schema=None) as batch_op:
        batch_op.drop_column("profile_id")
    with op.batch_alter_table("alert_rule", schema=None) as batch_op:
        batch_op.drop_column("profile_steps")
        batch_op.drop_column("baseline_s")
        batch_op.drop_column("baseline_run_id")
        batch_op.drop_column("metric_name")
