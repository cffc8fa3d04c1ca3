"""Test helpers: a real `stoker serve` on a loopback port, and waiting on conditions."""

import asyncio
import contextlib
import os
import socket
import sqlite3
import subprocess
import sys
import threading
import time
import traceback
from collections.abc import Callable, Coroutine
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

import httpx

if TYPE_CHECKING:
    from stoker_server.core.step_chunks import StepArrays

T = TypeVar("T")
REPO = Path(__file__).resolve().parents[2]


def upload_spool(spool_dir: Path, server_url: str) -> None:
    """Run `stoker upload` on an agent spool directory, as a user would after an outage."""
    upload = subprocess.run(
        [sys.executable, "-m", "stoker_server.cli", "upload", str(spool_dir), "--server",
         server_url],
        cwd=REPO, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert upload.returncode == 0, upload.stderr


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_for(
    condition: Callable[[], T], *, timeout_s: float = 30.0, interval_s: float = 0.05, what: str = ""
) -> T:
    """Poll `condition` until it returns something truthy; fail after the deadline."""
    deadline = time.monotonic() + timeout_s
    while True:
        value = condition()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(
                f"timed out after {timeout_s}s waiting for {what or condition}\n" + thread_stacks()
            )
        time.sleep(interval_s)


def thread_stacks(frames_per_thread: int = 12) -> str:
    """Where every thread of this process is now, newest frames last: a wait that timed out
    says whether the training, the agent's sender or a finalizer held it up."""
    names = {thread.ident: thread.name for thread in threading.enumerate()}
    parts = []
    for ident, frame in sys._current_frames().items():
        stack = "".join(traceback.format_stack(frame)[-frames_per_thread:])
        parts.append(f"--- thread {names.get(ident, ident)} ---\n{stack}")
    return "".join(parts) + native_stacks()


def native_stacks() -> str:
    """Every thread's native stack too (py-spy, a dev dependency), where one is installed: a
    thread stuck in C code (a finalizer run by the garbage collector, a TensorFlow call) shows
    there, and only there."""
    spy = Path(sys.executable).parent / "py-spy"
    if not spy.exists():
        return ""
    try:
        dump = subprocess.run(
            [str(spy), "dump", "--native", "--pid", str(os.getpid())],
            capture_output=True, text=True, timeout=60,
        )  # fmt: skip
    except (OSError, subprocess.SubprocessError) as error:
        return f"--- py-spy failed: {error} ---\n"
    return f"--- native stacks (py-spy) ---\n{dump.stdout}{dump.stderr}"


def run_coroutine(coroutine: Coroutine[Any, Any, T], *, timeout_s: float = 60.0) -> T:
    """`asyncio.run` in a thread of its own: other tests (Playwright's sync API) may leave an
    event loop running in this one, where `asyncio.run` refuses to start."""
    outcome: list[tuple[T | None, BaseException | None]] = []

    def run() -> None:
        try:
            outcome.append((asyncio.run(coroutine), None))
        except BaseException as error:
            outcome.append((None, error))

    runner = threading.Thread(target=run, daemon=True)
    runner.start()
    runner.join(timeout_s)
    assert outcome, f"the coroutine did not finish within {timeout_s} s\n{thread_stacks()}"
    result, error = outcome[0]
    if error is not None:
        raise error
    return result  # type: ignore[return-value]


class _OnLoopback:
    """A server on a loopback port: its URLs, and a JSON GET."""

    port: int

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def ws_url(self) -> str:
        return f"ws://127.0.0.1:{self.port}"

    def get(self, path: str, **params: Any) -> Any:
        response = httpx.get(f"{self.url}{path}", params=params, timeout=10)
        response.raise_for_status()
        return response.json()


@dataclass
class ServerProcess(_OnLoopback):
    """`stoker serve` in a child process, the way a user runs it."""

    data_dir: Path
    port: int = field(default_factory=free_port)
    env: dict[str, str] = field(default_factory=dict)
    extra_args: list[str] = field(default_factory=list)
    process: subprocess.Popen[bytes] | None = None
    log_path: Path | None = None

    def start(self) -> "ServerProcess":
        env = {**os.environ, **self.env}
        self.log_path = self.data_dir / f"server-{self.port}.log"
        self.data_dir.mkdir(parents=True, exist_ok=True)
        log = self.log_path.open("ab")
        command = [
            sys.executable, "-m", "stoker_server.cli", "serve",
            "--port", str(self.port), "--data-dir", str(self.data_dir), *self.extra_args,
        ]  # fmt: skip
        self.process = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, env=env)
        wait_for(self._healthy, timeout_s=60, what=f"server on {self.url}")
        return self

    def _healthy(self) -> bool:
        assert self.process is not None
        if self.process.poll() is not None:
            raise AssertionError(f"server exited: {self.log_text()}")
        try:
            return httpx.get(f"{self.url}/healthz", timeout=1).status_code == 200
        except httpx.HTTPError:
            return False

    def log_text(self) -> str:
        return self.log_path.read_text(errors="replace") if self.log_path else ""

    def stop(self) -> None:
        if self.process and self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=15)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()

    def kill(self) -> None:
        if self.process and self.process.poll() is None:
            self.process.kill()
            self.process.wait()

    def rows(self, sql: str, *params: Any) -> list[tuple[Any, ...]]:
        """Read the server's SQLite store directly, for what the REST API does not expose yet."""
        url = self.env.get("STOKER_DATABASE_URL", "")
        path = url.removeprefix("sqlite:///") if url.startswith("sqlite:///") else None
        with contextlib.closing(
            sqlite3.connect(path or self.data_dir / "stoker.db", timeout=10)
        ) as db:
            return db.execute(sql, params).fetchall()

    def steps(self, run_id: int, rank: int | None = None) -> "StepArrays":
        """A run's stored raw steps, read from the server's SQLite store."""
        from stoker_server.core.step_chunks import SELECT_CHUNKS, decode

        where, params = "run_id = ?", [run_id]
        if rank is not None:
            where, params = where + " AND rank = ?", [run_id, rank]
        return decode(
            self.rows(
                f"{SELECT_CHUNKS} WHERE {where} ORDER BY rank, first_step",
                *params,
            )
        )


@dataclass
class InProcessServer(_OnLoopback):
    """A real uvicorn serving `app` on a loopback port, in a thread of this process: for tests
    that hand the app a part of their own (FastAPI's `app.dependency_overrides`)."""

    app: Any
    port: int = field(default_factory=free_port)
    server: Any = None
    thread: threading.Thread | None = None

    def start(self) -> "InProcessServer":
        import uvicorn

        config = uvicorn.Config(
            self.app, host="127.0.0.1", port=self.port, log_level="warning", access_log=False
        )
        self.server = uvicorn.Server(config)
        self.thread = threading.Thread(target=self.server.run, name="test-uvicorn", daemon=True)
        self.thread.start()
        wait_for(lambda: self.server.started, timeout_s=60, what=f"in-process server {self.url}")
        return self

    def stop(self) -> None:
        if self.server is not None and self.thread is not None:
            self.server.should_exit = True
            self.thread.join(30)


PG_BIN = Path(os.environ.get("STOKER_PG_BIN", "/usr/lib/postgresql/15/bin"))


@dataclass
class PostgresServer:
    """A throwaway PostgreSQL cluster on a temp data dir and a loopback port.

    PostgreSQL refuses to run as root, so as root the cluster belongs to the `postgres` user.
    """

    port: int = field(default_factory=free_port)
    data_dir: Path | None = None
    _counter: int = 0

    @staticmethod
    def available() -> bool:
        return (PG_BIN / "initdb").exists() and (PG_BIN / "pg_ctl").exists()

    def _run(self, *args: str) -> None:
        command = list(args)
        if os.geteuid() == 0:
            command = ["runuser", "-u", "postgres", "--", *command]
        subprocess.run(command, check=True, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)

    def start(self) -> "PostgresServer":
        import shutil
        import tempfile

        root = Path(tempfile.mkdtemp(prefix="stoker-pg-"))
        if os.geteuid() == 0:
            shutil.chown(root, "postgres", "postgres")
        self.data_dir = root / "data"
        self._run(
            str(PG_BIN / "initdb"), "-D", str(self.data_dir), "-U", "postgres",
            "--auth=trust", "--encoding=UTF8", "--no-sync",
        )  # fmt: skip
        options = (
            f"-p {self.port} -k {root} -c listen_addresses=127.0.0.1 -c fsync=off "
            "-c synchronous_commit=off -c full_page_writes=off -c max_connections=300"
        )
        self._run(
            str(PG_BIN / "pg_ctl"), "-D", str(self.data_dir), "-o", options,
            "-l", str(root / "server.log"), "-w", "start",
        )  # fmt: skip
        return self

    def stop(self) -> None:
        if self.data_dir is not None:
            self._run(str(PG_BIN / "pg_ctl"), "-D", str(self.data_dir), "-m", "fast", "stop")
            import shutil

            shutil.rmtree(self.data_dir.parent, ignore_errors=True)
            self.data_dir = None

    def url(self, database: str = "postgres") -> str:
        return f"postgresql+psycopg://postgres@127.0.0.1:{self.port}/{database}"

    def create_database(self) -> str:
        """A fresh empty database; returns its SQLAlchemy URL."""
        import psycopg

        self._counter += 1
        name = f"stoker_{os.getpid()}_{self._counter}"
        with psycopg.connect(
            f"host=127.0.0.1 port={self.port} user=postgres dbname=postgres", autocommit=True
        ) as connection:
            connection.execute(f'CREATE DATABASE "{name}"')
        return self.url(name)
