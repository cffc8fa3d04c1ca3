"""device rollups: a long run's device chart reads buckets, not every sample

devicerollup: device samples aggregated at ingest into buckets of 10, 60 and 600 s per
(run, rank, GPU), so the device chart of a long run reads buckets instead of every sample.
No foreign key, as for the raw rows (migration 0011); a run's deletion removes them. The
samples already stored are rolled up here (one pass over devicesample per width), so a run
that was live during the upgrade keeps one consistent set; a run compacted before it has
rollups of its thinned samples.

Revision ID: 0015
Revises: 0014
Create Date: 2026-11-27 18:05:00.000000
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0015"
down_revision: str | None = "0014"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

FIELDS = (
    "util", "mem_util", "mem_used", "mem_total", "proc_mem", "tf_mem_current", "tf_mem_peak",
    "temp_c", "power_w", "power_limit_w", "sm_clock_mhz", "throttle", "pcie_tx_bps",
    "pcie_rx_bps", "sm_util", "sm_occupancy", "tensor_util", "dram_bw_util", "fp32_util",
    "fp16_util", "energy_j",
)  # fmt: skip


def upgrade() -> None:
    op.create_table(
        "devicerollup",
        sa.Column("run_id", sa.Integer(), nullable=False),
        sa.Column("rank", sa.Integer(), nullable=False),
        sa.Column("gpu", sa.Integer(), nullable=False),
        sa.Column("width", sa.Integer(), nullable=False),
        sa.Column("bucket", sa.BigInteger(), nullable=False),
        sa.Column("n", sa.Integer(), nullable=False),
        sa.Column("t_min", sa.Float(), nullable=False),
        sa.Column("t_max", sa.Float(), nullable=False),
        *(
            sa.Column(
                f"{field}_{part}",
                sa.Integer() if part == "n" else sa.Float(),
                nullable=part in ("min", "max"),
            )
            for field in FIELDS
            for part in ("sum", "n", "min", "max")
        ),
        sa.PrimaryKeyConstraint("run_id", "rank", "gpu", "width", "bucket"),
    )
    _backfill()


WIDTHS = (10, 60, 600)
COLUMNS = ", ".join(
    ["run_id", "rank", "gpu", "width", "bucket", "n", "t_min", "t_max"]
    + [f"{f}_{p}" for f in FIELDS for p in ("sum", "n", "min", "max")]
)


def _backfill() -> None:
    postgres = op.get_bind().dialect.name == "postgresql"
    parts = ", ".join(
        f"coalesce(sum(CAST({f} AS FLOAT)), 0), count({f}), min(CAST({f} AS FLOAT)),"
        f" max(CAST({f} AS FLOAT))"
        for f in FIELDS
    )
    for width in WIDTHS:
        # t >= 0: truncation is floor.
        bucket = f"floor(t / {width})::bigint" if postgres else f"CAST(t / {width} AS INTEGER)"
        op.execute(
            f"INSERT INTO devicerollup ({COLUMNS}) SELECT run_id, rank, gpu, {width}, {bucket},"
            f" count(*), min(t), max(t), {parts} FROM devicesample"
            f" GROUP BY run_id, rank, gpu, {bucket}"
        )


def downgrade() -> None:
    op.drop_table("devicerollup")
