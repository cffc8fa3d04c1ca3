"""Engine construction and sessions. The engine is built in the app lifespan, never at import."""

from collections.abc import Iterator
from typing import Any

from sqlalchemy import event
from sqlalchemy.engine import Engine
from sqlmodel import Session, SQLModel, create_engine

from backend import models  # noqa: F401  (registers the tables on SQLModel.metadata)
from backend.settings import Settings


def _enable_sqlite_wal(dbapi_connection: Any, _record: Any) -> None:
    cursor = dbapi_connection.cursor()
    cursor.execute("PRAGMA journal_mode=WAL")
    # NORMAL in WAL mode survives a process crash (kill -9); only an OS crash can lose the tail.
    cursor.execute("PRAGMA synchronous=NORMAL")
    cursor.execute("PRAGMA foreign_keys=ON")
    cursor.execute("PRAGMA busy_timeout=10000")
    cursor.close()


def make_engine(settings: Settings) -> Engine:
    """Create the engine for the configured database and make sure the schema exists."""
    url = settings.resolved_database_url()
    if url.startswith("sqlite"):
        settings.data_dir.mkdir(parents=True, exist_ok=True)
        engine = create_engine(url, connect_args={"check_same_thread": False})
        event.listen(engine, "connect", _enable_sqlite_wal)
    else:
        engine = create_engine(url, pool_pre_ping=True)
    SQLModel.metadata.create_all(engine)
    return engine


def session_scope(engine: Engine) -> Iterator[Session]:
    with Session(engine) as session:
        yield session
