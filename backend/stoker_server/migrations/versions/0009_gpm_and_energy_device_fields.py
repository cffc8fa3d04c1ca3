"""gpm and energy device fields

Device rows gain NVML GPM metrics (SM utilization, SM occupancy, tensor, DRAM bandwidth,
FP32 and FP16 pipe utilization; null where unsupported) and the GPU's energy since the run's
first reading (with whether it was integrated from power). Nullable columns: old rows read
null.

Revision ID: 0009
Revises: 0008
Create Date: 2026-11-27 07:09:54.210085
"""

from collections.abc import Sequence

import sqlalchemy as sa
import sqlmodel  # noqa: F401  (autogenerate may emit sqlmodel.sql.sqltypes.AutoString)
from alembic import op
from sqlalchemy import Text  # noqa: F401  (autogenerate may emit JSONB(astext_type=Text()))

revision: str = "0009"
down_revision: str | None = "0008"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    # Alert metrics: a native enum on PostgreSQL; on SQLite a VARCHAR wide enough already.
    if op.get_bind().dialect.name == "postgresql":
        op.execute("ALTER TYPE alertmetric ADD VALUE IF NOT EXISTS 'sm_util'")
        op.execute("ALTER TYPE alertmetric ADD VALUE IF NOT EXISTS 'tensor_util'")
    with op.batch_alter_table("devicesample", schema=None) as batch_op:
        batch_op.add_column(sa.Column("sm_util", sa.Float(), nullable=True))
        batch_op.add_column(sa.Column("sm_occupancy", sa.Float(), nullable=True))
        batch_op.add_column(sa.Column("tensor_util", sa.Float(), nullable=True))
        batch_op.add_column(sa.Column("dram_bw_util", sa.Float(), nullable=True))
        batch_op.add_column(sa.Column("fp32_util", sa.Float(), nullable=True))
        batch_op.add_column(sa.Column("fp16_util", sa.Float(), nullable=True))
        batch_op.add_column(sa.Column("energy_j", sa.Float(), nullable=True))
        batch_op.add_column(sa.Column("energy_integrated", sa.Boolean(), nullable=True))


def downgrade() -> None:
    # PostgreSQL cannot drop an enum value; rules using them are removed so none names them.
    op.execute("DELETE FROM alert_rule WHERE metric IN ('sm_util', 'tensor_util')")
    with op.batch_alter_table("devicesample", schema=None) as batch_op:
        batch_op.drop_column("energy_integrated")
        batch_op.drop_column("energy_j")
        batch_op.drop_column("fp16_util")
        batch_op.drop_column("fp32_util")
        batch_op.drop_column("dram_bw_util")
        batch_op.drop_column("tensor_util")
        batch_op.drop_column("sm_occupancy")
        batch_op.drop_column("sm_util")
