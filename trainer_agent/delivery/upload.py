"""Sending runs that the agent spooled to disk: `stoker upload DIR`, and the same in the
background of the next agent that starts with that spool directory.

Each spooled run directory holds the run's hello, its batches and, when the process ended
cleanly, its end status and final counters. Batches go to `POST /api/v1/ingest` in order and
in chunks, posted and answered as the live HTTP transport's (delivery/classify.py); the
server ignores seqs it already stored, so uploading twice is harmless. A chunk the server
refuses (422: retrying cannot help) is dropped and said, as the live sender does; an answer
to retry (the server away, busy, or a setting to fix) stops the upload with the rest kept.
A run directory is deleted once everything in it is stored or refused. A run whose process
still holds its spool lock (still writing or replaying it) is left alone.

Profiler traces spooled beside a run's batches (trainer_agent/delivery/profile_spool.py) go the same
ways, each to the server and profile it was captured for, after the batches.
"""

import contextlib
import logging
import os
import sys
import threading
from pathlib import Path
from typing import Any

from trainer_agent.config import resolve_server, resolve_token
from trainer_agent.delivery import profile_spool
from trainer_agent.delivery.backoff import Backoff
from trainer_agent.delivery.classify import Verdict, say_once
from trainer_agent.delivery.http import http_chunks, post_ingest
from trainer_agent.delivery.spool import UNREADABLE, Spool, left_behind_count, run_directories
from trainer_agent.delivery.transport import Batch, Misconfigured
from trainer_agent.random_state import script_random_untouched

with script_random_untouched():  # httpx imports rich, which draws from `random` on import
    import httpx

log = logging.getLogger("trainer_agent")


class RunInUse(Exception):
    """Another process holds the run's spool lock."""


def upload_run(directory: Path, *, server: str, token: str | None = None) -> dict[str, Any]:
    """Upload one spooled run; returns the server's run id and how many batches were sent.

    Raises RunInUse when its own process (or another uploader) still holds it.
    """
    spool = Spool(directory)
    if not spool.claim() and Spool.can_lock():
        raise RunInUse(f"{directory} is in use by a running Stoker agent")
    try:
        return _upload_claimed(spool, server=server, token=token)
    finally:
        spool.release()


def _upload_claimed(spool: Spool, *, server: str, token: str | None) -> dict[str, Any]:
    hello = Spool.load(spool.hello_path)
    sent = refused = 0
    refusal = ""
    run_id = None
    last_seq = 0

    def send(client: httpx.Client, batches: list[Batch], end: dict[str, Any] | None) -> bool:
        """Post; True when stored, False when refused for good (said). Raises to retry."""
        nonlocal run_id, refusal
        answer = post_ingest(
            client.post, server=server, token=token, timeout=60.0, hello=hello,
            batches=batches, end=end,
        )  # fmt: skip
        if answer.verdict is Verdict.RETRY:
            raise answer.failure()
        if answer.verdict is Verdict.REFUSED:
            seqs = [batch["seq"] for batch in batches]
            what = f"batches {min(seqs)}-{max(seqs)}" if end is None else "the end"
            refusal = answer.reason
            log.warning(
                "Stoker: the server refused %s of the run spooled in %s, so they are dropped "
                "(retrying cannot help): %s", what, spool.directory, answer.reason,
            )  # fmt: skip
            return False
        run_id = answer.body.get("run_id", run_id)
        return True

    with httpx.Client() as client:
        for chunk in http_chunks(spool.batch_paths(), lambda path: path.stat().st_size):
            # A file that cannot be read is moved aside and counted; the rest goes on.
            loaded = [spool.load_or_set_aside(path) for path in chunk]
            batches = [batch for batch in loaded if batch is not None]
            if not batches:
                continue
            if send(client, batches, None):
                sent += len(batches)
            else:
                refused += len(batches)
            last_seq = max(last_seq, *(b["seq"] for b in batches))
            for path, batch in zip(chunk, loaded, strict=True):
                if batch is not None:
                    spool.remove(path)
        end = spool.read_end() or {"status": "interrupted", "agent": None}
        final: list[dict[str, Any]] = []
        counters = dict(end.get("agent") or {})
        if spool.unreadable_files:  # set aside by this upload: the server counts them too
            counters["unreadable_spool_files"] = (
                counters.get("unreadable_spool_files", 0) + spool.unreadable_files
            )
        if counters:
            # The final counters (rows dropped at the spool cap) as one last batch.
            seq = max(int(end.get("next_seq") or 0), last_seq + 1)
            final = [{"type": "batch", "seq": seq, "agent": counters}]
        send(client, final, {"type": "end", "status": end["status"]})
    spool.discard()
    return {
        "run_id": run_id, "batches": sent, "status": end["status"], "refused": refused,
        "refusal": refusal, "unreadable": spool.unreadable_files,
    }  # fmt: skip


def main(path: Path, *, server: str | None = None, token: str | None = None) -> int:
    directories = run_directories(path)
    traces = profile_spool.spooled_traces(path)
    if not directories and not traces:
        print(f"no spooled runs under {path}", file=sys.stderr)
        return 1
    target = resolve_server(server)
    failed = 0
    for directory in directories:
        try:
            result = upload_run(directory, server=target, token=resolve_token(token))
        except RunInUse as busy:
            print(f"{busy}; skipped (it sends its records itself)", file=sys.stderr)
            continue
        except (httpx.HTTPError, OSError, ValueError, KeyError) as error:
            failed += 1
            print(f"upload failed ({error}) for {directory}", file=sys.stderr)
            continue
        print(
            f"run {result['run_id']} ({result['status']}) on {target}: {result['batches']} "
            f"batches sent from {directory}"
        )
        if result["unreadable"]:
            failed += 1
            print(
                f"{result['unreadable']} batch files of {directory} could not be read: moved "
                f"aside to {directory.parent / UNREADABLE}, the rest sent",
                file=sys.stderr,
            )
        if result["refused"]:
            failed += 1
            print(
                f"{result['refused']} batches of {directory} were refused by the server and "
                f"dropped: {result['refusal']}",
                file=sys.stderr,
            )
    if traces:
        # A trace belongs to a profile of the server it was captured for: only that one.
        sent, left = profile_spool.upload_spooled(path, server=target, token=resolve_token(token))
        print(f"{sent} profiler traces sent to {target}, {left} left to retry")
        failed += left
    return 1 if failed else 0


# --- in the background of a new agent ------------------------------------------------------
_background_lock = threading.Lock()
_background: dict[tuple[Path, str], threading.Thread] = {}
# The spool's left-behind count when the last look for each directory and server began.
_looked: dict[tuple[Path, str], int] = {}


def upload_left_behind(spool_dir: Path, *, server: str, token: str | None) -> tuple[int, int]:
    """One pass: upload every run under `spool_dir` spooled for `server` that no live process
    holds. Returns (runs uploaded, runs that failed and may be retried)."""
    uploaded = failed = 0
    for directory in run_directories(spool_dir):
        if Spool(directory).target_server != server:
            continue  # meant for another server, or from an agent that did not record it
        try:
            result = upload_run(directory, server=server, token=token)
        except RunInUse:
            continue
        except Misconfigured as problem:  # said once; tried again, the setting may be fixed
            failed += 1
            say_once(
                f"Stoker: {problem}. The runs that earlier processes left in {spool_dir} are "
                "kept and sent again until this is fixed"
            )
            continue
        except (httpx.HTTPError, OSError, ValueError, KeyError) as error:
            failed += 1
            log.debug("background upload of %s failed: %s", directory, error)
            continue
        uploaded += 1
        log.warning(
            "Stoker: sent %d batches that an earlier process left in %s (run %s, %s)",
            result["batches"], directory, result["run_id"], result["status"],
        )  # fmt: skip
    try:
        sent, left = profile_spool.upload_spooled(spool_dir, server=server, token=token)
    except (OSError, ValueError, KeyError) as error:
        log.debug("background upload of profiler traces failed: %s", error)
        sent, left = 0, 1
    return uploaded + sent, failed + left


def _lower_this_threads_priority() -> None:
    """Nice only this thread (Linux schedules threads separately), so it yields the CPU to
    training; elsewhere this is a no-op."""
    with contextlib.suppress(AttributeError, OSError):
        os.setpriority(os.PRIO_PROCESS, threading.get_native_id(), 19)


def _upload_until_done(
    spool_dir: Path, server: str, token: str | None, stop: threading.Event
) -> None:
    _lower_this_threads_priority()
    backoff = Backoff(initial_s=5.0, max_s=300.0)
    try:
        while True:
            _, failed = upload_left_behind(spool_dir, server=server, token=token)
            if not failed or stop.wait(backoff.next_delay_s()):
                return
    except Exception:
        log.debug("background upload stopped", exc_info=True)


def start_background_upload(
    spool_dir: Path | None, *, server: str, token: str | None, stop: threading.Event | None = None
) -> threading.Thread | None:
    """Upload, in a daemon thread at the lowest CPU priority, what earlier processes left in
    `spool_dir` for `server`; at most one such thread per directory and server at a time."""
    if spool_dir is None or not Spool.can_lock():
        return None
    key = (Path(spool_dir), server)
    with _background_lock:
        running = _background.get(key)
        if running is not None and running.is_alive():
            return running
        # What earlier processes left is looked for once; later, only when a run of this
        # process was left there since (a fit per epoch starts no thread per fit).
        if _looked.get(key) == left_behind_count() or not Path(spool_dir).is_dir():
            return None
        _looked[key] = left_behind_count()
        thread = threading.Thread(
            target=_upload_until_done,
            args=(Path(spool_dir), server, token, stop or threading.Event()),
            name="stoker-upload",
            daemon=True,
        )
        _background[key] = thread
        thread.start()
        return thread
