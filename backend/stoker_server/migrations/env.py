"""Alembic environment: the server runs it on start (stoker_server.core.db.migrate) and so does the
`alembic` command line (alembic.ini at the repository root) when a developer adds a migration.
"""

from alembic import context
from sqlalchemy import create_engine
from sqlmodel import SQLModel

from stoker_server.core import models  # noqa: F401  (registers the tables on SQLModel.metadata)

config = context.config
target_metadata = SQLModel.metadata


def _configure(connection) -> None:
    context.configure(
        connection=connection,
        target_metadata=target_metadata,
        # SQLite cannot ALTER most things: batch mode copies the table instead.
        render_as_batch=connection.dialect.name == "sqlite",
        compare_type=True,
    )


def run_migrations_online() -> None:
    connection = config.attributes.get("connection")
    if connection is not None:  # handed in by stoker_server.core.db.migrate, inside its transaction
        _configure(connection)
        with context.begin_transaction():
            context.run_migrations()
        return
    from stoker_server.core.settings import Settings

    url = config.get_main_option("sqlalchemy.url") or Settings().resolved_database_url()
    engine = create_engine(url)
    with engine.connect() as connection:
        _configure(connection)
        with context.begin_transaction():
            context.run_migrations()
    engine.dispose()


if context.is_offline_mode():
    raise SystemExit("offline (--sql) migrations are not supported; run against a database")
run_migrations_online()
