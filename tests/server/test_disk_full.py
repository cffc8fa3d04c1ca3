"""A full disk is an event, not a crash: SQLite on a small tmpfs, PostgreSQL with
its database's tables in a tablespace on one. The server keeps serving reads, refuses rows
with an answer agents retry (WebSocket close 1011, HTTP 507), says so in /metrics, and once
there is room the agent's resent rows are all stored, once."""

import json
import os
import shutil
import subprocess
import tempfile
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import httpx
import psycopg
import pytest
from sqlalchemy import create_engine
from websockets.asyncio.client import connect
from websockets.exceptions import ConnectionClosed

from stoker_server.core.step_chunks import read_steps
from stoker_server.ingest.disks import on_this_machine
from tests.conftest import DATABASES, require
from tests.harness.support import PostgresServer, ServerProcess, run_coroutine, wait_for

BATCH = 2_000
SMALL, ROOMY = "3m", "64m"
NEARLY_FULL = "3200k"  # SMALL and 128 KiB: room for an alert's row, not for a batch


def _mount(path: Path, size: str, *options: str) -> bool:
    command = ["mount", "-t", "tmpfs", "-o", ",".join([f"size={size}", *options]), "tmpfs"]
    result = subprocess.run([*command, str(path)], capture_output=True)
    return result.returncode == 0


@pytest.fixture
def small_disk(tmp_path: Path) -> Iterator[Path]:
    disk = tmp_path / "disk"
    disk.mkdir()
    require(_mount(disk, SMALL), "a tmpfs mount (root)")
    try:
        yield disk
    finally:
        subprocess.run(["umount", "-l", str(disk)], check=False)


@contextmanager
def _postgres_on(disk: Path, postgres: PostgresServer) -> Iterator[str]:
    """A fresh database of `postgres` whose tables (and indexes) all go to a tablespace on
    `disk`; its catalogs and the write-ahead log stay in the server's data directory."""
    if os.geteuid() == 0:  # the cluster runs as postgres (see PostgresServer)
        shutil.chown(disk, "postgres", "postgres")
    name = f"small_{uuid.uuid4().hex[:8]}"
    admin = f"host=127.0.0.1 port={postgres.port} user=postgres dbname=postgres"
    with psycopg.connect(admin, autocommit=True) as connection:
        connection.execute(f"CREATE TABLESPACE {name} LOCATION '{disk}'")
        connection.execute(f"CREATE DATABASE {name}")
        connection.execute(f"ALTER DATABASE {name} SET default_tablespace = {name}")
    try:
        yield postgres.url(name)
    finally:
        with psycopg.connect(admin, autocommit=True) as connection:
            connection.execute(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")
            connection.execute(f"DROP TABLESPACE IF EXISTS {name}")


@pytest.fixture(params=DATABASES)
def small_database(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[tuple[str, Path]]:
    """A database URL whose rows land on a 3 MB tmpfs, and that tmpfs's mount point."""
    if request.param == "sqlite":
        disk = request.getfixturevalue("small_disk")
        yield f"sqlite:///{disk / 'stoker.db'}", disk
        return
    postgres = request.getfixturevalue("postgres_server")
    # The server's user must reach the tablespace: not under pytest's root-only temp dir.
    disk = Path(tempfile.mkdtemp(prefix="stoker-small-disk-"))
    try:
        require(_mount(disk, SMALL), "a tmpfs mount (root)")
        with _postgres_on(disk, postgres) as url:
            yield url, disk
    finally:
        subprocess.run(["umount", "-l", str(disk)], check=False, capture_output=True)
        shutil.rmtree(disk, ignore_errors=True)


def _frame(seq: int) -> str:
    steps = list(range((seq - 1) * BATCH, seq * BATCH))
    return json.dumps(
        {
            "type": "batch",
            "seq": seq,
            "steps": {
                "step": steps,
                "t": [1.7e9 + s * 0.01 for s in steps],
                "dur": [0.01 + (s % 7) * 1e-4 for s in steps],
                "wait": [(s % 3) * 1e-4 for s in steps],
            },
        }
    )


async def _send(url: str, hello: dict, first_seq: int, last_seq: int) -> tuple[int, int, int]:
    """Send batches first_seq..last_seq one at a time; return (the server's last_seq on
    hello, the last acked seq, the close code if the server closed, else 0)."""
    async with connect(url, max_size=None) as ws:
        await ws.send(json.dumps(hello))
        welcome = json.loads(await ws.recv())
        acked = welcome["last_seq"]
        for seq in range(max(first_seq, acked + 1), last_seq + 1):
            try:
                await ws.send(_frame(seq))
                reply = json.loads(await ws.recv())
            except ConnectionClosed as closed:
                return welcome["last_seq"], acked, closed.rcvd.code if closed.rcvd else -1
            assert reply["type"] == "ack" and reply["seq"] == seq, reply
            acked = seq
        return welcome["last_seq"], acked, 0


def _metric(server: ServerProcess, name: str) -> float:
    for line in httpx.get(f"{server.url}/metrics").text.splitlines():
        if line.startswith(name + " "):
            return float(line.split()[1])
    raise AssertionError(f"{name} not in /metrics")


def test_full_disk_refuses_rows_keeps_reads_and_loses_nothing(
    small_database: tuple[str, Path], tmp_path: Path
) -> None:
    database, small_disk = small_database
    server = ServerProcess(
        data_dir=tmp_path / "server", env={"STOKER_DATABASE_URL": database}
    ).start()
    url = f"{server.ws_url}/api/v1/agent"
    hello = {"type": "hello", "protocol": 1, "run_key": uuid.uuid4().hex, "name": "full"}
    try:
        # 3 MB hold far fewer than 200 batches of 2,000 steps.
        total = 200
        _, acked, code = run_coroutine(_send(url, hello, 1, total))
        assert code == 1011, "the server closed with a retry-later code"
        assert 0 < acked < total

        assert httpx.get(f"{server.url}/healthz").status_code == 200
        (run,) = server.get("/api/v1/runs")["data"]
        assert run["summary"]["steps"] == acked * BATCH
        assert server.get(f"/api/v1/runs/{run['id']}/steps")["total"] == acked * BATCH
        assert _metric(server, "stoker_disk_full") == 1
        assert _metric(server, "stoker_disk_full_refusals") >= 1
        # The database's own disk is the small one (PostgreSQL's rows: their tablespace's).
        disk = server.get("/api/v1/disk")
        assert disk["full"] is True
        assert disk["database_total_bytes"] == shutil.disk_usage(small_disk).total
        assert disk["total_bytes"] == shutil.disk_usage(tmp_path).total
        assert disk["database_total_bytes"] != disk["total_bytes"]
        assert disk["low"] is True  # 3 MB: under the default 1 GB mark
        # /metrics serves both disks (the database's read at the scrape).
        assert _metric(server, "stoker_disk_database_total_bytes") == disk["database_total_bytes"]
        assert _metric(server, "stoker_disk_database_free_bytes") < 3 * 2**20
        assert _metric(server, "stoker_disk_total_bytes") == disk["total_bytes"]
        other = {"type": "hello", "protocol": 1, "run_key": uuid.uuid4().hex}
        response = httpx.post(
            f"{server.url}/api/v1/ingest",
            json={"hello": other, "batches": [json.loads(_frame(1))]},
            timeout=60,
        )
        assert response.status_code == 507, response.text
        assert "disk is full" in response.json()["detail"]

        # The disk rule judges the fuller disk: at a threshold the data directory's disk is
        # above, it fires on the database's own. The alert is a row too: a little room
        # is made for it first, the database's disk still nearly full (whether a full SQLite
        # file still takes a small write depends on what its last failed write left in the
        # write-ahead log). SQLite only: a PostgreSQL whose rows' disk is full refuses the
        # alert's own row too; /metrics and the banner say full.
        if database.startswith("sqlite"):
            assert _mount(small_disk, NEARLY_FULL, "remount")
            disk = server.get("/api/v1/disk")
            data_share = disk["free_bytes"] / disk["total_bytes"]
            database_share = disk["database_free_bytes"] / disk["database_total_bytes"]
            assert database_share < data_share, "this host's disk is as full as the test's"
            rule = next(
                r for r in server.get("/api/v1/alert-rules")["data"] if r["builtin"] == "disk_low"
            )
            # Between the two: the data directory's disk (this host's) is above it, however
            # full the host is, the database's below.
            threshold = (database_share + data_share) / 2
            changes = {"threshold": threshold, "for_s": 0.0, "keep_firing_for_s": 0.0}
            patched = httpx.patch(f"{server.url}/api/v1/alert-rules/{rule['id']}", json=changes)
            assert patched.status_code == 200, patched.text
            firing = wait_for(
                lambda: server.get("/api/v1/alerts", rule_id=rule["id"], state="firing")["data"],
                what="the disk alert on the database's disk",
            )[0]
            assert firing["value"] == pytest.approx(database_share, abs=0.05)

        # Room again. An HTTP agent's batch stored says so, as a WebSocket one would.
        assert _mount(small_disk, ROOMY, "remount")
        response = httpx.post(
            f"{server.url}/api/v1/ingest",
            json={"hello": other, "batches": [json.loads(_frame(1))]},
            timeout=60,
        )
        assert response.status_code == 200, response.text
        assert _metric(server, "stoker_disk_full") == 0
        assert server.get("/api/v1/disk")["database_total_bytes"] == 64 * 2**20
        # The agent reconnects, learns what is stored, sends the rest.
        resumed_from, acked_again, code = run_coroutine(_send(url, hello, acked + 1, total))
        assert resumed_from == acked and (acked_again, code) == (total, 0)
        assert server.get(f"/api/v1/runs/{run['id']}")["summary"]["steps"] == total * BATCH
        assert _metric(server, "stoker_disk_full") == 0
    finally:
        server.stop()
    engine = create_engine(database)
    with engine.connect() as connection:
        steps = read_steps(connection, run["id"])
    engine.dispose()
    assert len(steps) == len(set(steps.step.tolist())) == total * BATCH


@pytest.mark.parametrize("database", DATABASES, indirect=True)
def test_disk_reports_the_database_size_and_its_own_disk(database: str, tmp_path: Path) -> None:
    server = ServerProcess(data_dir=tmp_path / "server", env={"STOKER_DATABASE_URL": database})
    server.start()
    try:
        disk = server.get("/api/v1/disk")
    finally:
        server.stop()
    engine = create_engine(database)
    with engine.connect() as connection:
        if connection.dialect.name == "sqlite":
            size = connection.exec_driver_sql("PRAGMA page_count").scalar_one() * (
                connection.exec_driver_sql("PRAGMA page_size").scalar_one()
            )
            where = tmp_path
        else:
            size = connection.exec_driver_sql(
                "SELECT pg_database_size(current_database())"
            ).scalar_one()
            where = Path(connection.exec_driver_sql("SHOW data_directory").scalar_one())
    engine.dispose()
    assert disk["sqlite"] is database.startswith("sqlite")
    # Measured by the server a moment before (PostgreSQL may have added a page map since).
    assert abs(disk["database_bytes"] - size) <= 256 * 1024
    assert disk["database_total_bytes"] == shutil.disk_usage(where).total
    assert 0 < disk["database_free_bytes"] <= disk["database_total_bytes"]
    assert str(where) in disk["database_disk"]


@pytest.mark.postgres
def test_postgres_disk_unknown_to_a_role_that_may_not_read_settings(
    postgres_server: PostgresServer, tmp_path: Path
) -> None:
    """A plain role (as on a managed PostgreSQL) may not read the data directory: the sizes
    are there, the free space is unknown and says why, and `full` stays the refusal's."""
    name = f"plain_{uuid.uuid4().hex[:8]}"
    admin = f"host=127.0.0.1 port={postgres_server.port} user=postgres dbname=postgres"
    with psycopg.connect(admin, autocommit=True) as connection:
        connection.execute(f"CREATE ROLE {name} LOGIN")
        connection.execute(f"CREATE DATABASE {name} OWNER {name}")
    url = f"postgresql+psycopg://{name}@127.0.0.1:{postgres_server.port}/{name}"
    server = ServerProcess(data_dir=tmp_path / "server", env={"STOKER_DATABASE_URL": url})
    try:
        server.start()
        disk = server.get("/api/v1/disk")
        assert disk["database_bytes"] > 0
        assert disk["database_free_bytes"] is None and disk["database_total_bytes"] is None
        assert "pg_read_all_settings" in disk["database_disk"]
        assert "53100" in disk["database_disk"]
        assert disk["full"] is False
        assert disk["total_bytes"] == shutil.disk_usage(tmp_path).total
    finally:
        server.stop()
        with psycopg.connect(admin, autocommit=True) as connection:
            connection.execute(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")
            connection.execute(f"DROP ROLE IF EXISTS {name}")


def test_a_postgres_url_names_this_machine_only_over_loopback_or_a_socket() -> None:
    assert on_this_machine("postgresql+psycopg://u@127.0.0.1:5432/d")
    assert on_this_machine("postgresql+psycopg://u@localhost/d")
    assert on_this_machine("postgresql+psycopg://u@[::1]:5432/d")
    assert on_this_machine("postgresql+psycopg:///d?host=/var/run/postgresql")
    assert not on_this_machine("postgresql+psycopg://u@db:5432/d")  # a compose service
