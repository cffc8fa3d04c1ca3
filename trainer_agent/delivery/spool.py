"""The disk spool: batches the server has not acknowledged, kept in order across outages.

One directory per run: `hello.json`, `batches/<seq>.json`, and `end.json` (the run's end
status and the agent's final counters). Files are written to a temporary name and renamed,
so a crash never leaves half a batch. The directory is capped in bytes; a batch that does
not fit, under the cap or on a full disk, is dropped and counted, never silently.
`end.json` is reserved (blank) when the spool starts and overwritten in place at the end,
so the count of dropped records is kept even when the disk has filled up meanwhile.
`server.txt` names the server the run was meant for.

Profiler traces of the run wait in its `profiles/` (trainer_agent/delivery/profile_spool.py): they
count toward the cap, and they outlive `discard()` of the batches, which leaves them for
their own uploader.

A process that writes a run's spool holds an exclusive `flock` on its `.lock` file
(`take_lock`, which the trace directories use too) until it is done with it; the kernel
releases it when the process dies, however it dies. Whoever
uploads a spooled run (the next agent in the background, or `stoker upload DIR`) takes the
same lock first, so a run is never uploaded while its own process still writes or replays
it, nor by two uploaders at once.
"""

import contextlib
import json
import os
import shutil
from pathlib import Path
from typing import IO, Any

from trainer_agent.delivery import wire
from trainer_agent.settings import DEFAULT_SPOOL_MAX_BYTES

try:
    import fcntl
except ImportError:  # Windows: no flock; spooled runs are then only sent by `stoker upload`
    fcntl = None  # type: ignore[assignment]

PROFILES = "profiles"  # the run's spooled profiler traces (trainer_agent/delivery/profile_spool.py)
END_RESERVED_BYTES = 4096  # far more than an end record (a status and a few counters) needs

# Bumped whenever this process lets go of a run it left on disk: the background upload of
# what is left in a spool directory looks again only then (upload.start_background_upload).
_left_behind = 0


def left_behind_count() -> int:
    """How many times this process let go of a run it left in a spool directory."""
    return _left_behind


def run_spool_directory(spool_dir: Path, run_key: str, rank: int) -> Path:
    """Where one process of a run spools its batches. Every worker of a distributed job has
    the run's key and numbers its own batches from 1, so each rank has its own directory."""
    return Path(spool_dir) / (run_key if not rank else f"{run_key}.r{rank}")


def take_lock(path: Path) -> IO[bytes] | None:
    """An exclusive `flock` on the file `path` (created if need be), without waiting: the open
    file, which holds the lock until it is closed or the process ends, however it ends. None
    when another holder has it, or there is no flock here (Windows). Raises OSError when the
    file cannot be opened."""
    if fcntl is None:
        return None
    lock = Path(path).open("ab")  # noqa: SIM115  (held past this function: it is the lock)
    try:
        fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        lock.close()
        return None
    return lock


def tree_bytes(path: Path) -> int:
    """The bytes of every file under `path` (none when it does not exist)."""
    total = 0
    for child in Path(path).rglob("*"):
        with contextlib.suppress(OSError):
            if child.is_file():
                total += child.stat().st_size
    return total


def write_atomically(path: Path, data: bytes) -> None:
    temporary = path.with_name(path.name + ".tmp")
    try:
        temporary.write_bytes(data)
    except OSError:  # a full disk: leave no partial file taking the space
        temporary.unlink(missing_ok=True)
        raise
    os.replace(temporary, path)


class Spool:
    """The spooled batches of one run."""

    def __init__(
        self,
        directory: Path,
        *,
        max_bytes: int = DEFAULT_SPOOL_MAX_BYTES,
        server: str | None = None,
    ) -> None:
        self.directory = Path(directory)
        self.max_bytes = max_bytes
        self.server = server
        self._batches = self.directory / "batches"
        self._bytes: int | None = None
        self._lock: IO[bytes] | None = None

    @staticmethod
    def can_lock() -> bool:
        return fcntl is not None

    def claim(self) -> bool:
        """Take this run's lock (without waiting); False when another holder has it.

        Held until `release()` or the end of the process. Without flock (Windows), never.
        """
        if self._lock is not None:
            return True
        if fcntl is None:
            return False
        self.directory.mkdir(parents=True, exist_ok=True)
        self._lock = take_lock(self.directory / ".lock")
        return self._lock is not None

    def release(self) -> None:
        global _left_behind
        lock, self._lock = self._lock, None
        if lock is not None:
            lock.close()  # closing the file releases the flock
            if self.directory.exists():  # left for an uploader (discard() removes it first)
                _left_behind += 1

    @property
    def target_server(self) -> str | None:
        """The server this run was spooled for (None in spools written before it was kept)."""
        try:
            return (self.directory / "server.txt").read_text().strip() or None
        except OSError:
            return None

    @property
    def hello_path(self) -> Path:
        return self.directory / "hello.json"

    @property
    def end_path(self) -> Path:
        return self.directory / "end.json"

    def used_bytes(self) -> int:
        """What counts toward the cap: the batches (counted once, then kept up to date) and
        everything under `profiles/`, a capture the profiler is still writing included. The
        small bookkeeping files (hello, end, server, lock) do not count."""
        if self._bytes is None:
            self._bytes = sum(p.stat().st_size for p in self._batches.glob("*.json"))
        return self._bytes + tree_bytes(self.directory / PROFILES)

    def add(self, hello: dict[str, Any], batch: dict[str, Any]) -> bool:
        """Store one batch; False (nothing written) when it would exceed the cap.

        Raises OSError when the disk refuses the write (full, read-only): nothing is left
        half written, and the caller counts the batch as dropped.
        """
        data = wire.dumps(batch)
        if self.used_bytes() + len(data) > self.max_bytes:
            return False
        self._start(hello)
        write_atomically(self._batches / f"{batch['seq']:012d}.json", data)
        assert self._bytes is not None
        self._bytes += len(data)
        return True

    def _start(self, hello: dict[str, Any]) -> None:
        """Create the run's directory, the lock, the reserved end record and the hello, once.

        The lock is taken before `hello.json` exists, and uploaders only look at directories
        that have one: none can catch a run between its creation and its lock.
        """
        if not self.end_path.exists():
            self._batches.mkdir(parents=True, exist_ok=True)
            self.claim()
            if self.server:
                write_atomically(self.directory / "server.txt", self.server.encode())
            with self.end_path.open("wb") as reserved:
                reserved.write(b" " * END_RESERVED_BYTES)
        if not self.hello_path.exists():
            write_atomically(self.hello_path, wire.dumps(hello))

    def batch_paths(self) -> list[Path]:
        """Spooled batches, oldest seq first."""
        if not self._batches.is_dir():
            return []
        return sorted(self._batches.glob("*.json"))

    def __bool__(self) -> bool:
        return bool(self.batch_paths())

    @staticmethod
    def load(path: Path) -> dict[str, Any]:
        data = path.read_bytes()
        try:
            return wire.loads(data)
        except ValueError:  # NaN literals, which spools written before orjson may hold
            return json.loads(data)

    def remove(self, path: Path) -> None:
        size = path.stat().st_size if path.exists() else 0
        path.unlink(missing_ok=True)
        if self._bytes is not None:
            self._bytes = max(0, self._bytes - size)

    def write_end(
        self, hello: dict[str, Any], status: str, counters: dict[str, int], next_seq: int
    ) -> None:
        """Record how the run ended, its final counters, and the next unused seq.

        Written over the reserved blank record, in place: it needs no free disk space.
        """
        self._start(hello)
        data = wire.dumps({"status": status, "agent": counters, "next_seq": next_seq})
        with self.end_path.open("r+b") as record:
            record.write(data.ljust(END_RESERVED_BYTES))

    def read_end(self) -> dict[str, Any] | None:
        """The end record, or None when the run never ended (the record is still blank)."""
        if not self.end_path.exists():
            return None
        text = self.end_path.read_text().strip()
        return json.loads(text) if text else None

    def discard(self) -> None:
        """Delete the run's directory once everything in it is stored on the server; profiler
        traces still waiting in it stay (with the directory) for their own uploader."""
        if (self.directory / PROFILES).is_dir():
            for child in list(self.directory.iterdir()) if self.directory.is_dir() else []:
                if child.name == PROFILES:
                    with contextlib.suppress(OSError):
                        child.rmdir()  # only when empty
                elif child.is_dir():
                    shutil.rmtree(child, ignore_errors=True)
                else:
                    child.unlink(missing_ok=True)
            with contextlib.suppress(OSError):
                self.directory.rmdir()  # only when empty
        else:
            shutil.rmtree(self.directory, ignore_errors=True)
        self.release()


def run_directories(path: Path) -> list[Path]:
    """`path` itself when it is one spooled run, else the spooled runs directly under it."""
    path = Path(path)
    if (path / "hello.json").exists():
        return [path]
    if not path.is_dir():
        return []
    return sorted(p for p in path.iterdir() if (p / "hello.json").exists())
