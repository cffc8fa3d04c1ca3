"""The schema comes from the Alembic migrations, on SQLite and PostgreSQL alike."""

from types import SimpleNamespace
from typing import Any

import pytest
from alembic import command
from alembic.autogenerate import compare_metadata
from alembic.runtime.migration import MigrationContext
from sqlalchemy import create_engine, inspect, text
from sqlmodel import Session, SQLModel, select

from stoker_server.core.db import (
    alembic_config,
    head_revision,
    make_engine,
    migrate,
    schema_revision,
)
from stoker_server.core.models import DEVICE_ROLLUP_FIELDS, AlertRule, SeedMarker
from stoker_server.core.settings import Settings
from stoker_server.core.step_chunks import read_steps
from stoker_server.diagnosis.alerting import (
    DEFAULT_RULES,
    DISK_RULES,
    END_AND_METRIC_RULES,
    seed_default_rules,
)
from stoker_server.ingest.device_rollups import device_part, rollup_rows
from tests.conftest import DATABASES

pytestmark = pytest.mark.parametrize("database", DATABASES, indirect=True)
LATER_RULES = END_AND_METRIC_RULES + DISK_RULES


def test_migrations_create_every_table_at_head(database: str, tmp_path) -> None:
    engine = make_engine(Settings(data_dir=tmp_path, database_url=database))
    with engine.connect() as connection:
        assert schema_revision(connection) == head_revision()
        tables = set(inspect(connection).get_table_names())
    assert set(SQLModel.metadata.tables) <= tables
    engine.dispose()


def test_migrations_match_the_models(database: str) -> None:
    """A model change without its migration fails here: add one (docs/migrations.md)."""
    engine = create_engine(database)
    migrate(engine)
    with engine.connect() as connection:
        context = MigrationContext.configure(connection, opts={"compare_type": True})
        differences = compare_metadata(context, SQLModel.metadata)
    engine.dispose()
    assert differences == []


def test_migrate_twice_is_a_no_op(database: str) -> None:
    engine = create_engine(database)
    migrate(engine)
    migrate(engine)
    with engine.connect() as connection:
        assert schema_revision(connection) == head_revision()
    engine.dispose()


def test_database_from_before_migrations_is_refused_clearly(database: str) -> None:
    engine = create_engine(database)
    SQLModel.metadata.create_all(engine)  # what the walking skeleton did
    with pytest.raises(RuntimeError, match="before Stoker used migrations"):
        migrate(engine)
    engine.dispose()


def test_device_rollups_of_stored_samples_are_made_by_their_migration(database: str) -> None:
    """Samples stored before migration 0015 get the rollups ingest would have written."""
    engine = create_engine(database)
    migrate(engine, "0014")
    fields = ("util", "throttle", "sm_util")
    rows: list[dict[str, Any]] = [
        {"run_id": 1, "rank": rank, "gpu": gpu, "t": 1.7e9 + i * 3.7 + gpu,
         "util": float(i % 13), "throttle": i % 3 * 2**40, "sm_util": None if i % 4 else 1.0 * i}
        for rank, gpu in ((0, 0), (0, 5), (1, 0))
        for i in range(400)
    ]  # fmt: skip
    columns = ["run_id", "rank", "gpu", "t", *fields]
    with engine.begin() as connection:
        connection.execute(
            text(
                f"INSERT INTO devicesample ({', '.join(columns)}) "
                f"VALUES ({', '.join(':' + c for c in columns)})"
            ),
            rows,
        )
    migrate(engine)
    with engine.connect() as connection:
        stored = connection.execute(
            text("SELECT * FROM devicerollup ORDER BY run_id, rank, gpu, width, bucket")
        ).all()
    engine.dispose()

    parts = []
    for rank, gpu in ((0, 0), (0, 5), (1, 0)):
        picked = [r for r in rows if (r["rank"], r["gpu"]) == (rank, gpu)]
        sent: dict[str, list[Any]] = {f: [r[f] for r in picked] for f in fields}
        section = SimpleNamespace(**{f: sent.get(f) for f in DEVICE_ROLLUP_FIELDS})
        parts.append(device_part(1, rank, [gpu] * len(picked), [r["t"] for r in picked], section))
    expected = rollup_rows(parts)
    order = sorted(range(len(expected[0])), key=lambda i: tuple(int(c[i]) for c in expected[:5]))
    assert len(stored) == len(order) > 0
    for row, i in zip(stored, order, strict=True):
        want = [c[i] for c in expected]
        for got, value in zip(row, want, strict=True):
            if got is None:
                assert value != value, (row[:5], want)  # NaN: no values
            else:
                assert got == pytest.approx(float(value), rel=1e-12), (row[:5], got, value)


def test_stored_steps_move_into_chunks_and_back(database: str) -> None:
    """Steps stored one row each before migration 0016 read back the same from chunks, a
    restarted worker's steps (counted from 0 again) included; the downgrade restores rows."""
    engine = create_engine(database)
    migrate(engine, "0015")
    rows: list[dict[str, Any]] = [
        {"run_id": 1, "rank": rank, "step": step, "t": 1.7e9 + life * 1e5 + step * 0.25,
         "dur": 0.25 + step % 7 / 100, "wait": None if step % 5 == 0 else step % 3 / 100,
         "batch_size": None if rank else 64}
        for rank, life, steps in ((0, 0, range(10_000)), (0, 1, range(300)), (1, 0, range(50)))
        for step in steps
    ] + [  # a gap wider than a chunk may span
        {"run_id": 2, "rank": 0, "step": s, "t": 1.8e9 + s, "dur": 0.5, "wait": 0.1,
         "batch_size": 8} for s in (0, 1, 70_000, 70_001)
    ]  # fmt: skip
    columns = ["run_id", "rank", "step", "t", "dur", "wait", "batch_size"]
    insert = text(
        f"INSERT INTO step ({', '.join(columns)}) VALUES ({', '.join(':' + c for c in columns)})"
    )
    with engine.begin() as connection:
        connection.execute(insert, rows)
    migrate(engine)

    def expected(run_id: int) -> list[tuple[Any, ...]]:
        picked = [r for r in rows if r["run_id"] == run_id]
        picked.sort(key=lambda r: (r["rank"], r["step"], r["t"]))
        return [tuple(r[c] for c in columns[1:]) for r in picked]

    with engine.connect() as connection:
        for run_id in (1, 2):
            steps = read_steps(connection, run_id)
            stored = list(
                zip(
                    steps.rank.tolist(), steps.step.tolist(), steps.t.tolist(),
                    steps.dur.tolist(), steps.wait_or_none(), steps.batch_size_or_none(),
                    strict=True,
                )
            )  # fmt: skip
            assert stored == expected(run_id)
        spans = connection.execute(
            text("SELECT n, last_step - first_step FROM stepchunk WHERE run_id = 2")
        ).all()
        assert sorted(spans) == [(2, 1), (2, 1)]
        # Ranges read through the chunks: a window inside one chunk, one across two.
        window = read_steps(connection, 1, rank=0, first_step=4090, last_step=4100)
        assert window.step.tolist() == list(range(4090, 4101))
    with engine.begin() as connection:
        config = alembic_config()
        config.attributes["connection"] = connection
        command.downgrade(config, "0015")
    with engine.connect() as connection:
        back = connection.execute(
            text(f"SELECT {', '.join(columns[1:])} FROM step WHERE run_id = 1")
        ).all()
    engine.dispose()
    assert sorted(tuple(r) for r in back) == sorted(expected(1))


@pytest.mark.parametrize(
    "seeded", ["first three, edited", "first three", "every set"], ids=lambda s: s
)
def test_a_database_seeded_by_an_older_server_gets_the_later_default_rules_once(
    database: str, seeded: str
) -> None:
    """Before migration 0018 each set of default rules had a seed marker of its own."""
    engine = create_engine(database)
    migrate(engine, "0017")
    with Session(engine) as session:
        old = DEFAULT_RULES if seeded != "every set" else DEFAULT_RULES + LATER_RULES
        for spec in old:
            fields = {
                k: v for k, v in spec.items() if k != "profile_steps" or seeded == "every set"
            }
            session.add(AlertRule(**fields, channels=[{"type": "browser"}]))
        session.add(SeedMarker(key="default_alert_rules"))
        if seeded == "every set":
            session.add(SeedMarker(key="default_alert_rules_31"))
            session.add(SeedMarker(key="default_alert_rules_30"))
        session.commit()
        if seeded.endswith("edited"):
            rule = session.exec(
                select(AlertRule).where(AlertRule.builtin == "highly_input_bound")
            ).one()
            rule.threshold = 0.3
            session.add(rule)
            session.commit()
    migrate(engine)
    migrate(engine)  # once
    with Session(engine) as session:
        rules = {r.builtin: r for r in session.exec(select(AlertRule)).all()}
        count = len(session.exec(select(AlertRule)).all())
        markers = {m.key for m in session.exec(select(SeedMarker)).all()}
        assert seed_default_rules(session=session) == 0
    engine.dispose()
    assert count == len(rules) == 9 and markers == {"default_alert_rules"}
    assert {b for b, r in rules.items() if r.enabled} == {
        "low_gpu_util", "highly_input_bound", "stalled", "run_failed", "disk_low",
    }  # fmt: skip
    # As the rules the server seeds today (alerting.py), but the ones the user edited.
    for spec in LATER_RULES:
        rule = rules[spec["builtin"]]
        assert {k: getattr(rule, k) for k in spec} == spec
    # The profile action comes to the input-bound rule only if the user never edited it.
    assert rules["highly_input_bound"].profile_steps == (None if seeded.endswith("edited") else 20)
