"""Profiler traces kept in the agent's spool until the server has them.

A capture writes straight into the spool: `<run directory>/profiles/<pid>.r<rank>/`, where the run
directory is `<spool_dir>/<run_key>` for rank 0 and `<spool_dir>/<run_key>.r<rank>` for the others,
beside the run's spooled batches (trainer_agent/delivery/spool.py), holds

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
cap). Each request is posted and its answer read as every other one the agent sends
(delivery/classify.py): a busy server (429, 408, 5xx) is retried, a setting to fix is said.
A process that ended during the capture left no trace: its worker is reported failed.
"""

import contextlib
import json
import logging
import os
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import IO, Any

from trainer_agent.delivery.classify import (
    DELIVERED,
    PROFILE_STATUS,
    PROFILE_TRACE,
    Answer,
    Post,
    Route,
    Verdict,
    http_post,
    post,
    say_once,
)
from trainer_agent.delivery.spool import PROFILES, run_spool_directory, take_lock, write_atomically

log = logging.getLogger("trainer_agent")

STATUS = "status.json"
TRACE = "trace.xplane.pb"
CAPTURE = "capture"
CHUNK_BYTES = 4 * 2**20


def trace_dir(spool_dir: Path, run_key: str, pid: int, rank: int) -> Path:
    """Beside the batches this rank spools (each rank has its own run directory)."""
    return run_spool_directory(spool_dir, run_key, rank) / PROFILES / f"{pid}.r{rank}"


def profile_path(run_id: Any, pid: Any, what: str) -> str:
    """The route of a profile's `status` or `trace`."""
    return f"/api/v1/runs/{run_id}/profiles/{pid}/{what}"


def post_to_profile(
    send: Post,
    server: str,
    run_id: Any,
    pid: Any,
    what: str,
    *,
    body: dict[str, Any] | bytes,
    token: str | None,
    params: dict[str, Any],
) -> Answer:
    """POST a status report (`what="status"`, JSON) or a trace chunk (`"trace"`, bytes) to a
    profile. A setting to fix (a refused token, not a Stoker server) is said once."""
    route: Route = PROFILE_STATUS if what == "status" else PROFILE_TRACE
    path = profile_path(run_id, pid, what)
    answer = post(send, server, route, path, body=body, token=token, timeout=30.0, params=params)
    if answer.problem is not None:
        say_once(
            f"Stoker: {answer.problem}. Profiler reports and traces are kept and sent again "
            "until this is fixed"
        )
    elif answer.verdict is Verdict.RETRY:
        log.debug("profile %s: %s", what, answer.reason)
    return answer


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
    try:
        return take_lock(Path(directory) / ".lock")
    except OSError:  # deleted meanwhile
        return None


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
) -> Answer:
    """Send one trace directory's status and trace (to `server`, by default the one it was
    captured for): DELIVERED once the server has the trace (or the worker's failure), else the
    answer that stopped it (REFUSED: never, RETRY: later). The caller holds its lock; deleting
    it is the caller's."""
    status = read_status(directory)
    target = server or status["server"]
    params = {"rank": status.get("rank", 0)}

    def send(what: str, body: dict[str, Any] | bytes, params: dict[str, Any]) -> Answer | None:
        """None when accepted, else how it ended."""
        answer = post_to_profile(
            post, target, status["run_id"], status["profile"], what,
            body=body, token=token, params=params,
        )  # fmt: skip
        if answer.verdict is Verdict.DELIVERED:
            return None
        if answer.verdict is Verdict.REFUSED:
            log.warning("Stoker: the server refused profile %s's trace: %s",
                        status["profile"], answer.reason[:300])  # fmt: skip
        return answer

    trace = find_trace(directory)
    if trace is None:  # the process ended during the capture
        error = status.get("error") or "profile failed: the training process ended during it"
        return send("status", {"status": "failed", "error": error}, params) or DELIVERED
    data = trace.read_bytes()
    keys = ("first_step", "last_step", "overhead")
    report = {"status": "uploading", "bytes": len(data)} | {k: status.get(k) for k in keys}
    stopped = send("status", report, params)
    if stopped is not None:
        return stopped
    for offset in range(0, len(data), CHUNK_BYTES) or [0]:
        chunk = data[offset : offset + CHUNK_BYTES]
        stopped = send("trace", chunk, {**params, "offset": offset, "total": len(data)})
        if stopped is not None:
            return stopped
    return DELIVERED


def upload_spooled(
    path: Path, *, server: str | None, token: str | None, post: Post = http_post
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
            verdict = deliver(directory, post=post, token=token).verdict
            if verdict is Verdict.RETRY:
                left += 1
                continue
            remove(directory)
            done += 1
            if verdict is Verdict.DELIVERED:
                log.warning(
                    "Stoker: sent profile %s's trace (rank %s) that an earlier process left in %s",
                    status["profile"], status.get("rank", 0), directory,
                )  # fmt: skip
    return done, left
