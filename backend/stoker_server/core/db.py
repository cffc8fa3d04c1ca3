"""Engine construction, schema migration and sessions.

The engine is built in the app lifespan, never at import. The schema is owned by the Alembic
migrations in `backend/stoker_server/migrations/versions/`: the server upgrades the database to the
newest revision on start (see docs/migrations.md to add one).
"""

from pathlib import Path
from typing import Any, cast

from alembic import command
from alembic.config import Config
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory
from sqlalchemy import event, inspect, text
from sqlalchemy.engine import Connection, Engine
from sqlmodel import create_engine, select
from sqlmodel.sql.expression import Select

from stoker_server.core import models  # noqa: F401  (registers the tables on SQLModel.metadata)
from stoker_server.core.settings import Settings

MIGRATIONS_DIR = Path(__file__).parent.parent / "migrations"
# Any constant: serialises concurrent migrations of several servers sharing one PostgreSQL.
_MIGRATION_LOCK_ID = 8470_0001


def _enable_sqlite_wal(dbapi_connection: Any, _record: Any) -> None:
    cursor = dbapi_connection.cursor()
    cursor.execute("PRAGMA journal_mode=WAL")
    # FULL: every commit flushes the WAL to the disk before the agent's ack is sent, and an
    # acknowledged batch is one the agent forgets. NORMAL survives a process crash (kill -9)
    # but an OS crash or power cut could lose acknowledged batches (docs/architecture.md,
    # "Durability"): one fdatasync per commit (a group of up to 64 batches) is the price.
    cursor.execute("PRAGMA synchronous=FULL")
    cursor.execute("PRAGMA foreign_keys=ON")
    cursor.execute("PRAGMA busy_timeout=10000")
    cursor.execute("PRAGMA cache_size=-65536")  # 64 MiB page cache per connection
    cursor.close()


def is_sqlite(url: str) -> bool:
    return url.startswith("sqlite")


def make_engine(settings: Settings, *, migrate_schema: bool = True) -> Engine:
    """Create the engine for the configured database and bring its schema up to date."""
    url = settings.resolved_database_url()
    if is_sqlite(url):
        settings.data_dir.mkdir(parents=True, exist_ok=True)
        engine = create_engine(url, connect_args={"check_same_thread": False})
        event.listen(engine, "connect", _enable_sqlite_wal)
    else:
        engine = create_engine(url, pool_pre_ping=True, pool_size=10, max_overflow=20)
    if migrate_schema:
        migrate(engine)
    return engine


def alembic_config() -> Config:
    config = Config()
    config.set_main_option("script_location", str(MIGRATIONS_DIR))
    return config


def migrate(engine: Engine, revision: str = "head") -> None:
    """Upgrade the schema to `revision` in one transaction (on PostgreSQL, under a lock)."""
    config = alembic_config()
    with engine.begin() as connection:
        if connection.dialect.name == "postgresql":
            connection.execute(
                text("SELECT pg_advisory_xact_lock(:id)"), {"id": _MIGRATION_LOCK_ID}
            )
        if schema_revision(connection) is None and inspect(connection).has_table("run"):
            raise RuntimeError(
                f"the database {engine.url.render_as_string(hide_password=True)} was created "
                "before Stoker used migrations (no alembic_version table): move it away and "
                "start again, the server then creates a fresh schema"
            )
        config.attributes["connection"] = connection
        command.upgrade(config, revision)


def schema_revision(connection: Connection) -> str | None:
    """The revision the database is at (None for an empty database)."""
    return MigrationContext.configure(connection).get_current_revision()


def head_revision() -> str | None:
    return ScriptDirectory.from_config(alembic_config()).get_current_head()


def placeholder(connection: Connection) -> str:
    """The DBAPI parameter marker of the connection's driver, for driver-level SQL."""
    return "?" if connection.dialect.paramstyle == "qmark" else "%s"


def select_columns(*columns: Any) -> Select[*tuple[Any, ...]]:
    """`sqlmodel.select` of more than four columns. It takes any number, but its typed
    overloads stop at four; past four, the rows' values are typed Any."""
    return cast("Select[*tuple[Any, ...]]", select(*columns))
