"""The disk spool: batches the server has not acknowledged, kept in order across outages.

One directory per run: `hello.json`, `batches/<seq>.json`, and `end.json` (the run's end
status and the agent's final counters). Files are written to a temporary name, flushed to
the disk (fsync) and renamed, and the rename is flushed too (the directory's fsync), so
neither a crash nor a power cut leaves half a batch, or loses one the sender let go of. The
spool holds the user's configs and metrics: its directories are 0700, its files 0600. Each
run's directory is capped in bytes (`max_bytes`), and all runs' together
(`total_max_bytes`); a batch that does not fit, under a cap or on a full disk, is dropped and
counted, never silently. A batch file that cannot be read back (the disk corrupted it, a
half-written file from an older agent) is moved aside to `unreadable/` under the spool
directory as `<run>.<name>.bad`, counted, and the rest is sent.
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
import logging
import math
import os
import shutil
import time
from pathlib import Path
from typing import IO, Any

from trainer_agent.delivery import wire
from trainer_agent.settings import DEFAULT_SPOOL_MAX_BYTES, DEFAULT_SPOOL_TOTAL_MAX_BYTES

log = logging.getLogger("trainer_agent")

try:
    import fcntl
except ImportError:  # Windows: no flock; spooled runs are then only sent by `stoker upload`
    fcntl = None  # type: ignore[assignment]

UNREADABLE = "unreadable"  # where unreadable batch files are moved aside, under the spool dir
# How long the other runs' share of the total is trusted before it is measured again.
OTHERS_FRESH_S = 30.0
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
    # Held past this function: the open file is the lock.
    lock = os.fdopen(os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600), "ab")
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


def private_directory(path: Path) -> None:
    """`path` created with mode 0700 (its missing parents too); an existing one of this user
    that others may read is made 0700."""
    path = Path(path)
    missing = []
    while not path.exists() and path != path.parent:
        missing.append(path)
        path = path.parent
    for directory in reversed(missing):
        with contextlib.suppress(FileExistsError):
            directory.mkdir(mode=0o700)
    target = missing[0] if missing else path
    with contextlib.suppress(OSError, AttributeError):
        info = target.stat()
        if info.st_uid == os.getuid() and info.st_mode & 0o077:
            os.chmod(target, 0o700)


def sync_directory(path: Path) -> None:
    """Flush a directory's entries (a rename into it) to the disk, where the OS allows it."""
    with contextlib.suppress(OSError):
        descriptor = os.open(path, os.O_RDONLY)
        try:
            os.fsync(descriptor)
        finally:
            os.close(descriptor)


def _write_private(path: Path, data: bytes, flags: int = os.O_TRUNC) -> None:
    descriptor = os.open(path, os.O_WRONLY | os.O_CREAT | flags, 0o600)
    try:
        view = memoryview(data)
        while view:
            view = view[os.write(descriptor, view) :]
        os.fsync(descriptor)
    finally:
        os.close(descriptor)


def write_atomically(path: Path, data: bytes) -> None:
    """`path` holds `data` whole (mode 0600), on the disk, or is left as it was."""
    temporary = path.with_name(path.name + ".tmp")
    try:
        _write_private(temporary, data)
    except OSError:  # a full disk: leave no partial file taking the space
        temporary.unlink(missing_ok=True)
        raise
    os.replace(temporary, path)
    sync_directory(path.parent)


class Spool:
    """The spooled batches of one run."""

    def __init__(
        self,
        directory: Path,
        *,
        max_bytes: int = DEFAULT_SPOOL_MAX_BYTES,
        total_max_bytes: int = DEFAULT_SPOOL_TOTAL_MAX_BYTES,
        server: str | None = None,
    ) -> None:
        self.directory = Path(directory)
        self.max_bytes = max_bytes
        self.total_max_bytes = total_max_bytes
        self.server = server
        self._batches = self.directory / "batches"
        self._bytes: int | None = None
        self._lock: IO[bytes] | None = None
        self._others_bytes = 0
        self._others_at = -math.inf
        # Why the last batch refused was refused (a cap), for the one warning about it.
        self.refusal = ""
        self.unreadable_files = 0  # batch files moved aside, unreadable

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
        private_directory(self.directory)
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
        used = self.used_bytes()
        if used + len(data) > self.max_bytes:
            self.refusal = f"this run's spool reached its {self.max_bytes}-byte cap"
            return False
        if used + self._other_runs_bytes() + len(data) > self.total_max_bytes:
            self.refusal = (
                f"the spool directory {self.directory.parent} reached its "
                f"{self.total_max_bytes}-byte cap for all runs (STOKER_SPOOL_TOTAL_MAX_BYTES)"
            )
            return False
        self._start(hello)
        write_atomically(self._batches / f"{batch['seq']:012d}.json", data)
        assert self._bytes is not None
        self._bytes += len(data)
        return True

    def _other_runs_bytes(self) -> int:
        """What the other runs left in the spool directory take (measured at most every
        `OTHERS_FRESH_S`: a walk of the directory costs more than a batch)."""
        now = time.monotonic()
        if now - self._others_at >= OTHERS_FRESH_S:
            self._others_at = now
            root = self.directory.parent
            try:
                children = [p for p in root.iterdir() if p != self.directory]
            except OSError:
                children = []
            self._others_bytes = sum(tree_bytes(child) for child in children)
        return self._others_bytes

    def _start(self, hello: dict[str, Any]) -> None:
        """Create the run's directory, the lock, the reserved end record and the hello, once.

        The lock is taken before `hello.json` exists, and uploaders only look at directories
        that have one: none can catch a run between its creation and its lock.
        """
        if not self.end_path.exists():
            private_directory(self.directory.parent)  # the spool directory itself
            private_directory(self._batches)
            self.claim()
            if self.server:
                write_atomically(self.directory / "server.txt", self.server.encode())
            _write_private(self.end_path, b" " * END_RESERVED_BYTES)
            sync_directory(self.directory)
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

    def load_or_set_aside(self, path: Path) -> dict[str, Any] | None:
        """The batch in `path`; None when it cannot be read: then it is moved aside (see
        `set_aside`), or it is gone already."""
        try:
            return self.load(path)
        except FileNotFoundError:
            return None
        except (OSError, ValueError) as error:
            self.set_aside(path, error)
            return None

    def set_aside(self, path: Path, error: BaseException) -> Path | None:
        """Move an unreadable batch file to `<spool dir>/unreadable/<run>.<name>.bad` and count
        it: the rest of the run is sent, and the file is kept for whoever wants to look."""
        size = path.stat().st_size if path.exists() else 0
        aside = self.directory.parent / UNREADABLE / f"{self.directory.name}.{path.name}.bad"
        kept: Path | None = aside
        try:
            private_directory(aside.parent)
            os.replace(path, aside)
            sync_directory(aside.parent)
        except OSError:
            path.unlink(missing_ok=True)  # it cannot stay where it would be read again
            kept = None
        self.unreadable_files += 1
        if self._bytes is not None:
            self._bytes = max(0, self._bytes - size)
        log.warning(
            "Stoker: a spooled batch file cannot be read (%s: %s); it is %s, counted, and the "
            "rest of the run is sent", path, error,
            f"moved aside to {kept}" if kept is not None else "deleted",
        )  # fmt: skip
        return kept

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
            record.flush()
            os.fsync(record.fileno())

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
