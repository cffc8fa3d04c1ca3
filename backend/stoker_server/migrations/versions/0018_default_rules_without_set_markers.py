"""default alert rules: the rules added since a database was first seeded, by migration

A server seeds the default alert rules once, on a database's first start (seed marker
`default_alert_rules`). The rules added to the defaults later, on how training ends and
misbehaves and on the server's disk, were seeded by markers of their own
(`default_alert_rules_31`, `default_alert_rules_30`), and the input-bound rule gained its
profile action where the user never edited it. A database seeded before them gets them here,
once, as the server would have seeded them; the two markers go. From here on one marker
says the defaults were seeded, and a new default rule comes with its own migration.

The rules are written out as they were when added (a migration is history: the defaults in
diagnosis/alerting.py may change later).

Revision ID: 0018
Revises: 0017
Create Date: 2026-11-29 12:00:00.000000
"""

from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any

import sqlalchemy as sa
import sqlmodel
from alembic import op
from sqlalchemy.dialects import postgresql

revision: str = "0018"
down_revision: str | None = "0017"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

SEEDED = "default_alert_rules"
LATER_MARKERS = ("default_alert_rules_31", "default_alert_rules_30")
BROWSER = [{"type": "browser"}]
PROFILE_STEPS = 20
# What every default rule holds unless it says otherwise (AlertRuleBase's defaults).
BASE: dict[str, Any] = {
    "for_s": 0.0, "keep_firing_for_s": 0.0, "only_while_stepping": False, "scope": "all",
    "enabled": True, "metric_name": None, "profile_steps": None,
}  # fmt: skip
# Added with marker default_alert_rules_31: how training ends and misbehaves.
END_AND_METRIC_RULES: list[dict[str, Any]] = [
    {"builtin": "run_failed", "name": "Run failed (an error, or its process died)",
     "metric": "run_failed", "comparison": "ge", "threshold": 1.0, "keep_firing_for_s": 60.0},
    {"builtin": "run_finished", "name": "Run finished", "metric": "run_finished",
     "comparison": "ge", "threshold": 1.0, "keep_firing_for_s": 60.0, "enabled": False},
    {"builtin": "run_interrupted", "name": "Run interrupted", "metric": "run_interrupted",
     "comparison": "ge", "threshold": 1.0, "keep_firing_for_s": 60.0, "enabled": False},
    {"builtin": "loss_nonfinite", "name": "Loss is NaN or infinite",
     "metric": "metric_nonfinite", "metric_name": "loss", "comparison": "ge", "threshold": 1.0,
     "keep_firing_for_s": 10.0, "enabled": False},
    {"builtin": "loss_rise", "name": "Loss rose to 2x its best", "metric": "metric_rise",
     "metric_name": "loss", "comparison": "ge", "threshold": 2.0, "for_s": 30.0,
     "keep_firing_for_s": 10.0, "enabled": False},
]  # fmt: skip
# Added with marker default_alert_rules_30: the server's disk.
DISK_RULES: list[dict[str, Any]] = [
    {"builtin": "disk_low", "name": "Disk nearly full (under 5 % free where the data directory is)",
     "metric": "disk_free_share", "comparison": "lt", "threshold": 0.05, "for_s": 60.0,
     "keep_firing_for_s": 60.0},
]  # fmt: skip
# The input-bound rule as first seeded: it gains the profile action only if still so.
INPUT_BOUND_AS_SEEDED: dict[str, Any] = {
    "name": "Highly input-bound (input wait ≥ 20 % of step time)",
    "metric": "input_wait_share", "comparison": "ge", "threshold": 0.2, "for_s": 60.0,
    "keep_firing_for_s": 10.0, "only_while_stepping": True, "scope": "all", "enabled": True,
}  # fmt: skip

# Native enums on PostgreSQL (with the values this migration writes and reads).
METRIC = sa.Enum(
    "input_wait_share", "run_failed", "run_finished", "run_interrupted", "metric_nonfinite",
    "metric_rise", "disk_free_share", name="alertmetric", create_type=False,
)  # fmt: skip
seed_marker = sa.table(
    "seed_marker",
    sa.column("key", sa.String()),
    sa.column("at", sqlmodel.sql.sqltypes.UTCDateTime()),
)
alert_rule = sa.table(
    "alert_rule",
    sa.column("id", sa.Integer()),
    sa.column("builtin", sa.String()),
    sa.column("name", sa.String()),
    sa.column("metric", METRIC),
    sa.column("comparison", sa.Enum("lt", "ge", name="comparison", create_type=False)),
    sa.column("threshold", sa.Float()),
    sa.column("for_s", sa.Float()),
    sa.column("keep_firing_for_s", sa.Float()),
    sa.column("only_while_stepping", sa.Boolean()),
    sa.column("scope", sa.Enum("all", name="alertscope", create_type=False)),
    sa.column("channels", sa.JSON().with_variant(postgresql.JSONB(), "postgresql")),
    sa.column("enabled", sa.Boolean()),
    sa.column("metric_name", sa.String()),
    sa.column("profile_steps", sa.Integer()),
    sa.column("created_at", sqlmodel.sql.sqltypes.UTCDateTime()),
    sa.column("updated_at", sqlmodel.sql.sqltypes.UTCDateTime()),
)


def _markers(connection: sa.Connection) -> set[str]:
    return set(connection.execute(sa.select(seed_marker.c.key)).scalars())


def _rows(specs: list[dict[str, Any]], now: datetime) -> list[dict[str, Any]]:
    return [
        {**BASE, **spec, "channels": BROWSER, "created_at": now, "updated_at": now}
        for spec in specs
    ]


def _give_input_bound_rule_its_action(connection: sa.Connection) -> None:
    rule = connection.execute(
        sa.select(alert_rule).where(alert_rule.c.builtin == "highly_input_bound")
    ).first()
    if rule is None or rule.profile_steps is not None or rule.channels != BROWSER:
        return
    if any(getattr(rule, name) != value for name, value in INPUT_BOUND_AS_SEEDED.items()):
        return  # the user edited it: theirs
    connection.execute(
        sa.update(alert_rule).where(alert_rule.c.id == rule.id).values(profile_steps=PROFILE_STEPS)
    )


def upgrade() -> None:
    connection = op.get_bind()
    markers = _markers(connection)
    if SEEDED in markers:  # seeded by an older server: the later defaults it lacks
        now = datetime.now(UTC)
        if "default_alert_rules_31" not in markers:
            op.bulk_insert(alert_rule, _rows(END_AND_METRIC_RULES, now))
            _give_input_bound_rule_its_action(connection)
        if "default_alert_rules_30" not in markers:
            op.bulk_insert(alert_rule, _rows(DISK_RULES, now))
    connection.execute(sa.delete(seed_marker).where(seed_marker.c.key.in_(LATER_MARKERS)))


def downgrade() -> None:
    # An older server seeds the later rules unless their markers say it did.
    connection = op.get_bind()
    if SEEDED in _markers(connection):
        now = datetime.now(UTC)
        op.bulk_insert(seed_marker, [{"key": key, "at": now} for key in LATER_MARKERS])
