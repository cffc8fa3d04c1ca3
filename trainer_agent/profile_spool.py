"""Profiler traces kept in the agent's spool until the server has them (issue 19).

A capture writes straight into the spool: `<run directory>/profiles/<pid>.r<rank>/`, where the run
directory is `<spool_dir>/<run_key>` for rank 0 and `<spool_dir>/<run_key>.r<rank>` for the others,
beside the run's spooled batches (trainer_agent/spool.py), holds

- `status.json`: where it goes (server, run id, profile id, the worker's rank) and what the
  agent reports (first and last step, overhead, bytes), rewritten atomically as it changes;
- `capture/`: what `tf.profiler.experimental` writes while it runs, then
- `trace.xplane.pb`: the finished trace, moved out of `capture/` once the profiler stopped.

The process that captures holds an exclusive `flock` on the directory's `.lock` until the
trace is delivered, so nobody else sends it meanwhile; the kernel releases the lock when
the process ends, however it ends. Whatever is left then is sent by the next agent that
starts with this spool directory (upload.start_background_upload) or by `stoker upload`:
the status, then the trace in chunks, and the directory is deleted only once the server
accepted the last chunk (or refused the trace for good: an unknown profile, a trace over its
cap). A process that ended during the capture left no trace: its worker is reported failed.
"""

import contextlib
import json
import logging
import os
import shutil
from collections.abc import Callable, Iterator
from enum import Enum
from pathlib import Path
from typing import IO, Any

from trainer_agent.delivery.transport import bearer
from trainer_agent.spool import PROFILES, fcntl, run_spool_directory, write_atomically

log = logging.getLogger("trainer_agent")

STATUS = "status.json"
TRACE = "trace.xplane.pb"
CAPTURE = "capture"
CHUNK_BYTES = 4 * 2**20

Post = Callable[..., Any]


class Outcome(Enum):
    DELIVERED = "delivered"  # the server has the trace (or the worker's failure)
    REFUSED = "refused"  # the server will never take it (unknown profile, over its cap)
    RETRY = "retry"  # the server is away or busy; keep it


def trace_dir(spool_dir: Path, run_key: str, pid: int, rank: int) -> Path:
    """Beside the batches this rank spools (each rank has its own run directory)."""
    return run_spool_directory(spool_dir, run_key, rank) / PROFILES / f"{pid}.r{rank}"


def run_dir_bytes(run_dir: Path) -> int:
    """What one run's spool directory holds on disk: its batches and its traces."""
    total = 0
    for path in Path(run_dir).rglob("*"):
        with contextlib.suppress(OSError):
            if path.is_file():
                total += path.stat().st_size
    return total


def spooled_traces(path: Path) -> list[Path]:
    """The trace directories under `path`: a spool directory, one run's, or one trace's."""
    path = Path(path)
    if (path / STATUS).exists():
        return [path]
    found = sorted(path.glob(f"{PROFILES}/*/{STATUS}")) + sorted(
        path.glob(f"*/{PROFILES}/*/{STATUS}")
    )
    return [status.parent for status in found]


def read_status(directory: Path) -> dict[str, Any]:
    return json.loads((Path(directory) / STATUS).read_bytes())


def write_status(directory: Path, status: dict[str, Any]) -> None:
    write_atomically(Path(directory) / STATUS, json.dumps(status).encode())


def find_trace(directory: Path) -> Path | None:
    """The finished trace, or the biggest one the profiler left in `capture/`."""
    directory = Path(directory)
    if (directory / TRACE).exists():
        return directory / TRACE
    written = sorted((directory / CAPTURE).rglob("*.xplane.pb"), key=lambda p: p.stat().st_size)
    return written[-1] if written else None


def finish_capture(directory: Path) -> Path:
    """Move the profiler's trace to `trace.xplane.pb` and drop the rest of `capture/`."""
    found = find_trace(directory)
    if found is None:
        raise FileNotFoundError("the profiler wrote no .xplane.pb trace")
    trace = Path(directory) / TRACE
    if found != trace:
        os.replace(found, trace)
    shutil.rmtree(Path(directory) / CAPTURE, ignore_errors=True)
    return trace


@contextlib.contextmanager
def claimed(directory: Path) -> Iterator[bool]:
    """Hold the trace directory's lock while inside; yields False when someone else holds it
    (its own process, still sending it, or another uploader) or it is gone."""
    lock = _lock(directory)
    try:
        yield lock is not None and (Path(directory) / STATUS).exists()
    finally:
        if lock is not None:
            lock.close()


def _lock(directory: Path) -> IO[bytes] | None:
    if fcntl is None:
        return None
    try:
        lock = (Path(directory) / ".lock").open("ab")
    except OSError:  # deleted meanwhile
        return None
    try:
        fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        lock.close()
        return None
    return lock


def lock_for_capture(directory: Path) -> IO[bytes] | None:
    """Create the trace directory and take its lock for the capturing process."""
    Path(directory).mkdir(parents=True, exist_ok=True)
    return _lock(directory)


def remove(directory: Path) -> None:
    """Delete a delivered trace, and its run's directory when nothing else is left there."""
    directory = Path(directory)
    shutil.rmtree(directory, ignore_errors=True)
    for parent in (directory.parent, directory.parent.parent):  # profiles/, then the run's
        with contextlib.suppress(OSError):
            parent.rmdir()  # only when empty


def deliver(
    directory: Path,
    *,
    post: Post,
    token: str | None,
    server: str | None = None,
) -> Outcome:
    """Send one trace directory's status and trace (to `server`, by default the one it was
    captured for). The caller holds its lock; deleting it is the caller's."""
    status = read_status(directory)
    target = (server or status["server"]).rstrip("/")
    base = f"{target}/api/v1/runs/{status['run_id']}/profiles/{status['profile']}"
    params = {"rank": status.get("rank", 0)}
    headers = bearer(token)

    def send(what: str, **kwargs: Any) -> Outcome | None:
        """None when accepted, else how it ended."""
        try:
            response = post(f"{base}/{what}", headers=headers, timeout=30.0, **kwargs)
        except Exception as error:
            log.debug("profile %s: %s", what, error)
            return Outcome.RETRY
        code = response.status_code
        if code < 400:
            return None
        if code >= 500 or code in (401, 403, 408, 429):  # away, busy, or a token to fix
            log.debug("profile %s: %s %s", what, code, response.text[:300])
            return Outcome.RETRY
        log.warning("Stoker: the server refused profile %s's trace: %s",
                    status["profile"], response.text[:300])  # fmt: skip
        return Outcome.REFUSED

    trace = find_trace(directory)
    if trace is None:  # the process ended during the capture
        error = status.get("error") or "profile failed: the training process ended during it"
        report = {"status": "failed", "error": error}
        return send("status", json=report, params=params) or Outcome.DELIVERED
    data = trace.read_bytes()
    keys = ("first_step", "last_step", "overhead")
    report = {"status": "uploading", "bytes": len(data)} | {k: status.get(k) for k in keys}
    refused = send("status", json=report, params=params)
    if refused is not None:
        return refused
    for offset in range(0, len(data), CHUNK_BYTES) or [0]:
        chunk = data[offset : offset + CHUNK_BYTES]
        chunk_params = {**params, "offset": offset, "total": len(data)}
        refused = send("trace", content=chunk, params=chunk_params)
        if refused is not None:
            return refused
    return Outcome.DELIVERED


def default_post(url: str, **kwargs: Any) -> Any:
    import httpx

    return httpx.post(url, **kwargs)


def upload_spooled(
    path: Path, *, server: str | None, token: str | None, post: Post = default_post
) -> tuple[int, int]:
    """Send every trace under `path` that no live process holds; with `server`, only those
    captured for it. Returns (delivered or settled, left to retry)."""
    done = left = 0
    for directory in spooled_traces(path):
        with claimed(directory) as mine:
            if not mine:
                continue
            try:
                status = read_status(directory)
            except (OSError, ValueError):
                remove(directory)  # a status cut short: nothing can be sent
                continue
            wanted = (status.get("server") or "").rstrip("/")
            if server is not None and wanted != server.rstrip("/"):
                continue  # captured for another server
            outcome = deliver(directory, post=post, token=token)
            if outcome is Outcome.RETRY:
                left += 1
                continue
            remove(directory)
            done += 1
            if outcome is Outcome.DELIVERED:
                log.warning(
                    "Stoker: sent profile %s's trace (rank %s) that an earlier process left in %s",
                    status["profile"], status.get("rank", 0), directory,
                )  # fmt: skip
    return done, left
