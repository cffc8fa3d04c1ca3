"""The schema comes from the Alembic migrations, on SQLite and PostgreSQL alike."""

import pytest
from alembic.autogenerate import compare_metadata
from alembic.runtime.migration import MigrationContext
from sqlalchemy import create_engine, inspect
from sqlmodel import SQLModel

from stoker_server.core.db import head_revision, make_engine, migrate, schema_revision
from stoker_server.core.settings import Settings
from tests.conftest import DATABASES

pytestmark = pytest.mark.parametrize("database", DATABASES, indirect=True)


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
