"""starvation cost in stored run summaries

Runs stored before the summary had `input_wait_s` and `lost_gpu_s` get them from their
running statistics (which always held the wait sums), so ended runs show their cost, sort by
it and count in GET /starvation. No schema change: summaries are JSON.

Revision ID: 0007
Revises: 0006
Create Date: 2026-11-24 11:40:00.000000
"""

from collections.abc import Sequence
from typing import Any

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision: str = "0007"
down_revision: str | None = "0006"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

_JSON = sa.JSON().with_variant(postgresql.JSONB(astext_type=sa.Text()), "postgresql")
_run = sa.table(
    "run",
    sa.column("id", sa.Integer()),
    sa.column("environment", _JSON),
    sa.column("stats", _JSON),
    sa.column("summary", _JSON),
)


def _gpus(environment: dict[str, Any]) -> int:
    """ingest.summary.gpu_count as of this revision (a migration must not change later)."""
    counts = [environment.get(key) for key in ("gpus", "tf_gpus")]
    visible = next((len(c) for c in counts if isinstance(c, list) and c), 0)
    replicas = environment.get("replicas")
    if visible and isinstance(replicas, int) and not isinstance(replicas, bool) and replicas >= 1:
        visible = min(visible, replicas)
    return max(visible, 1)


def upgrade() -> None:
    connection = op.get_bind()
    rows = connection.execute(
        sa.select(_run.c.id, _run.c.environment, _run.c.stats, _run.c.summary)
    )
    for run_id, environment, stats, summary in rows.all():
        if not isinstance(summary, dict) or "lost_gpu_s" in summary:
            continue
        stats = stats if isinstance(stats, dict) else {}
        # Only the first hello's environment was kept: every worker gets its GPU count.
        gpus = _gpus(environment if isinstance(environment, dict) else {})
        worker_stats = stats.get("workers", {})
        workers = []
        for worker in summary.get("workers", []):
            timing = worker_stats.get(str(worker.get("rank")), {}).get("timing", {})
            workers.append({**worker, "input_wait_s": timing.get("wait_sum_s", 0.0), "gpus": gpus})
        input_wait_s = stats.get("wait_sum_s", 0.0)
        lost = sum(w["input_wait_s"] * gpus for w in workers) if workers else input_wait_s
        new = {**summary, "input_wait_s": input_wait_s, "lost_gpu_s": lost, "workers": workers}
        connection.execute(sa.update(_run).where(_run.c.id == run_id).values(summary=new))


def downgrade() -> None:
    # The older summary shape ignores the added keys; nothing to undo.
    pass
