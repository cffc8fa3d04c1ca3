"""On-demand TensorFlow profiler captures the server asks for.

The server sends `{"type": "command", "name": "profile", "id": PID, "steps": N, "max_s": S}`
over the agent's socket. `request` (sender thread) only notes it, and arms the step markers
(`on_armed(True)`: in `fit`, the step boundary then hands `step_begin` each batch-begin and
`step_end` each return, trainer_agent/capture/step_boundary.py; until then they cost no
step anything; `Monitor` calls `step_begin` at every step). The next `step_begin` starts
`tf.profiler.experimental.start`, and each step runs inside a
`tf.profiler.experimental.Trace("train", step_num=..., _r=1)` (xprof's input-pipeline
analysis needs those step markers); after N steps, or `max_s`, the profiler stops and the
markers are disarmed (`on_armed(False)`). The capture's overhead compares its steps with
the run's last 50 recorded ones (`recent_step_s`). Start,
stop and the step markers must run on the training thread (TensorFlow's API); everything else
(finding the trace, uploading it in chunks, reporting status) runs on the run's upload
thread, which runs only while it has something to send.
Any failure is reported to the server as `profile failed: ...` and never reaches training.

The command names the worker's rank and the run's key: with a spool directory the profiler
writes straight into `<spool_dir>/<run_key>/profiles/<pid>.r<rank>/` (profile_spool.py), so
a finished trace is on disk, beside the run's spooled batches, before anything is sent. It
is uploaded from there and deleted once the server accepted it; if the process ends first,
the next agent started with that spool directory, or `stoker upload`, sends it. A trace that
would take the run's spool over its size bound is sent from a temporary directory instead,
while the process lives (said once in the log); so is every trace without a spool.
"""

import logging
import os
import shutil
import statistics
import tempfile
import threading
import time
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from trainer_agent.config import AgentConfig
from trainer_agent.delivery import profile_spool
from trainer_agent.delivery.backoff import Backoff
from trainer_agent.delivery.classify import Post, Verdict, http_post
from trainer_agent.delivery.clock import SYSTEM_CLOCK, Clock
from trainer_agent.delivery.spool import Spool

log = logging.getLogger("trainer_agent")

DEFAULT_MAX_S = 60.0
# At exit, how long to keep waiting for a trace upload once the server stopped answering
# (the trace stays in the spool for the next agent); while it answers, up to the drain cap.
EXIT_GIVE_UP_UNREACHABLE_S = 2.0
BASELINE_STEPS = 50
ENDED_BEFORE_START = "profile failed: the run's training ended before the capture could start"
RETRY_MAX_S = 30.0


def _ignore_armed(armed: bool) -> None:
    return None


@dataclass
class Capture:
    id: int
    steps: int
    max_s: float
    rank: int = 0
    # Where the trace is kept: in the spool, or a temporary directory (see _place).
    directory: Path = field(default_factory=lambda: Path(tempfile.mkdtemp(prefix="stoker-prof-")))
    spooled: bool = False
    lock: Any = None  # the spooled directory's flock, held until the trace is delivered
    ended: bool = False  # the profiler stopped: a "capturing" report no longer matters
    status: dict[str, Any] = field(default_factory=dict)
    first_step: int = -1
    last_step: int = -1
    steps_done: int = 0
    started: float = 0.0
    start_cost_s: float = 0.0
    durations: list[float] = field(default_factory=list)
    before: list[float] = field(default_factory=list)  # the run's last steps before it


class Profiler:
    """One run's on-demand captures, one at a time, in three roles that each own their state:

    - `CaptureRequests` (the sender thread): takes the server's command and holds the slot;
    - `StepCapture` (the training thread): starts and stops the profiler, marks the steps;
    - `TraceUploader` (its own thread, only while it has work): reports and delivers traces.

    The training thread calls only `step_begin`/`step_end`/`end`; the sender, `request`."""

    def __init__(
        self,
        config: AgentConfig,
        run_id: Callable[[], int | None],
        post: Post = http_post,
        *,
        clock: Clock = SYSTEM_CLOCK,
        recent_step_s: Callable[[], Sequence[float]] = tuple,
    ) -> None:
        slot = threading.Lock()  # held from a request to the end of its upload
        self.uploader = TraceUploader(config, run_id, post, slot, clock=clock)
        self.requests = CaptureRequests(config, run_id, slot, self.uploader)
        self.capture = StepCapture(self.requests, self.uploader, recent_step_s)
        self.request = self.requests.request
        self.step_begin = self.capture.step_begin
        self.step_end = self.capture.step_end
        self.end = self.capture.end
        self.stop = self.uploader.stop

    def arm_with(self, on_armed: Callable[[bool], None]) -> None:
        """`on_armed(True)` when a capture is asked for (on the sender thread), `False` once
        it ended (on the training thread): while armed, `step_begin` and `step_end` must be
        called at every step boundary; otherwise they need not be (a fit's `StepBoundary`
        calls them only then). With a request already waiting, armed at once."""
        self.requests.on_armed = self.capture.on_armed = on_armed
        if self.requests.pending is not None or self.capture.active is not None:
            on_armed(True)

    @property
    def undelivered(self) -> "dict[int, Capture]":
        return self.uploader.undelivered

    @property
    def server_away(self) -> bool:
        return self.uploader.server_away

    @property
    def busy(self) -> bool:
        return self.uploader.busy

    @property
    def drain_timeout_s(self) -> float:
        return self.uploader.drain_timeout_s


class CaptureRequests:
    """The server's profile commands (sender thread): one capture at a time, placed in the
    spool when it can be; the training thread's `StepCapture` takes it from here."""

    def __init__(
        self,
        config: AgentConfig,
        run_id: Callable[[], int | None],
        slot: threading.Lock,
        uploader: "TraceUploader",
    ) -> None:
        self._config = config
        self._run_id = run_id
        self._slot = slot
        self._uploader = uploader
        self.pending: Capture | None = None
        # The run's training ended (`close`): a command that comes later, while the run's
        # connection still drains (and the process may train its next run already), can
        # never start and is failed at once. `_lock` orders the two threads' hand-over.
        self._lock = threading.Lock()
        self._closed = False
        self.on_armed: Callable[[bool], None] = _ignore_armed

    def request(self, command: dict[str, Any]) -> None:
        pid, rank = int(command["id"]), int(command.get("rank") or 0)
        with self._lock:
            if self._closed:
                self._uploader.report(pid, rank, status="failed", error=ENDED_BEFORE_START)
                return
        if not self._slot.acquire(blocking=False):
            self._uploader.report(
                pid, rank, status="failed", error="profile failed: a capture is in progress"
            )
            return
        steps = max(1, int(command.get("steps", 20)))
        capture = Capture(pid, steps, float(command.get("max_s") or DEFAULT_MAX_S), rank)
        try:
            self._place(capture, command.get("run_key"))
        except Exception as error:  # a spool that cannot be written: a temporary directory
            log.debug("profile %s: not spooled: %s", pid, error)
        with self._lock:
            if not self._closed:
                self.pending = capture
                self.on_armed(True)
                return
        # The training ended while the capture was being placed.
        self._uploader.report(pid, rank, status="failed", error=ENDED_BEFORE_START)
        self._uploader.send(lambda: self._uploader.release(capture))

    def close(self) -> Capture | None:
        """The run's training ended (training thread): no request starts from now on. Returns
        the request that was waiting for a step, if any."""
        with self._lock:
            self._closed = True
            pending, self.pending = self.pending, None
        return pending

    def _place(self, capture: Capture, run_key: Any) -> None:
        """Capture into the spool (the process holds its lock), with a first status that says
        where the trace goes, so that even a process that dies mid-capture leaves word."""
        spool_dir, run_id = self._config.spool_dir, self._run_id()
        if spool_dir is None or not isinstance(run_key, str) or not run_key or run_id is None:
            return
        if "/" in run_key or run_key.startswith("."):
            return
        directory = profile_spool.trace_dir(spool_dir, run_key, capture.id, capture.rank)
        lock = profile_spool.lock_for_capture(directory)
        if lock is None:  # no flock here (Windows), or another process's: keep it to ourselves
            shutil.rmtree(directory, ignore_errors=True)
            return
        status = {
            "server": self._config.server, "run_id": run_id, "profile": capture.id,
            "rank": capture.rank, "process": os.getpid(), "status": "capturing",
        }  # fmt: skip
        try:
            profile_spool.write_status(directory, status)
        except BaseException:  # a full disk: leave no locked directory without a status
            lock.close()
            profile_spool.remove(directory)
            raise
        capture.status = status
        shutil.rmtree(capture.directory, ignore_errors=True)  # the temporary one, unused
        capture.directory, capture.spooled, capture.lock = directory, True, lock


def _start_profiler(directory: Path) -> None:
    import tensorflow as tf

    tf.profiler.experimental.start(str(directory))


class StepCapture:
    """The training thread's part: at a step boundary after a request, start
    `tf.profiler.experimental`, mark each step with a `Trace`, stop after the capture's steps
    or `max_s`, and hand the trace to the uploader. Start, stop and the markers must run on
    the training thread (TensorFlow's API); a marker is closed only on the thread that
    opened it (Keras may run batch-end hooks on a thread pool)."""

    def __init__(
        self,
        requests: CaptureRequests,
        uploader: "TraceUploader",
        recent_step_s: Callable[[], Sequence[float]] = tuple,
    ) -> None:
        self._requests = requests
        self._uploader = uploader
        self._recent_step_s = recent_step_s
        self.active: Capture | None = None
        self._trace: Any = None
        self._trace_thread = 0  # the thread that opened `_trace`
        self._last_begin: float | None = None
        self._last_n = 1
        self.on_armed: Callable[[bool], None] = _ignore_armed

    def step_begin(self, step: int, now: float, n: int = 1) -> None:
        """A step (or an execution of `n` steps) begins; the one before it ended at `now`."""
        active = self.active
        if active is not None and self._last_begin is not None:
            active.durations.append((now - self._last_begin) / self._last_n)
        self._last_begin, self._last_n = now, n or 1
        if active is None and self._requests.pending is None:
            return
        try:
            self._exit_trace()
            capture = self.active
            if capture is None:
                capture = self._requests.pending
                assert capture is not None
                self._start(capture, step)  # on failure the request stays, for _fail to report
                self._requests.pending = None
            elif capture.steps_done >= capture.steps or now - capture.started >= capture.max_s:
                self._stop(capture)
                return
            self._enter_trace(step)
            capture.steps_done += n
            capture.last_step = step + n - 1
        except Exception as error:
            self._fail(error)

    def step_end(self) -> None:
        """The step's computation returned (Keras); its marker closes here, on the thread that
        opened it. Elsewhere (a batch-end hook on Keras's thread pool) the next `step_begin`
        closes it."""
        if self._trace is None or threading.get_ident() != self._trace_thread:
            return
        try:
            self._exit_trace()
        except Exception as error:
            self._fail(error)

    def end(self) -> None:
        """Training ended (or the run closes): a capture still running stops with what it has;
        one asked for and not started fails, now and for every request that comes later."""
        pending = self._requests.close()
        if self.active is None and pending is None:
            return
        try:
            self._exit_trace()
            if self.active is not None:
                self._stop(self.active)
        except Exception as error:
            self._fail(error)
        if pending is not None:
            self._uploader.report(
                pending.id, pending.rank, status="failed", error=ENDED_BEFORE_START
            )
            self._uploader.send(lambda: self._uploader.release(pending))

    def _start(self, capture: Capture, step: int) -> None:
        began = time.perf_counter()
        _start_profiler(capture.directory / profile_spool.CAPTURE)
        capture.start_cost_s = time.perf_counter() - began
        capture.started = began
        capture.first_step = step
        capture.before = list(self._recent_step_s())[-BASELINE_STEPS:]
        self.active = capture
        self._uploader.report_capturing(capture, {"status": "capturing", "first_step": step})

    def _enter_trace(self, step: int) -> None:
        import tensorflow as tf

        trace = tf.profiler.experimental.Trace("train", step_num=step, _r=1)
        trace.__enter__()
        self._trace, self._trace_thread = trace, threading.get_ident()

    def _exit_trace(self) -> None:
        trace, self._trace = self._trace, None
        if trace is not None:
            trace.__exit__(None, None, None)

    def _stop(self, capture: Capture) -> None:
        import tensorflow as tf

        capture.ended = True
        began = time.perf_counter()
        tf.profiler.experimental.stop()  # on failure _fail reports the capture, still active
        self.active = None
        stop_cost_s = time.perf_counter() - began
        self.on_armed(False)
        self._uploader.upload(capture, self._overhead(capture, stop_cost_s))

    def _fail(self, error: BaseException) -> None:
        """Stop whatever was started, report, and free the slot; training goes on."""
        capture = self.active or self._requests.pending
        self.active = self._requests.pending = None
        self._trace = None
        self.on_armed(False)
        try:
            import tensorflow as tf

            tf.profiler.experimental.stop()
        except Exception:
            pass  # it was not started
        message = f"profile failed: {type(error).__name__}: {error}"[:500]
        log.warning("Stoker: %s; training continues", message)
        if capture is not None:
            self._uploader.report(capture.id, capture.rank, status="failed", error=message)
            self._uploader.send(lambda: self._uploader.release(capture))

    def _overhead(self, capture: Capture, stop_cost_s: float) -> dict[str, Any]:
        before = statistics.median(capture.before) if capture.before else None
        during = statistics.median(capture.durations) if capture.durations else None
        return {
            "step_s_before": before,
            "step_s_during": during,
            "ratio": during / before if before and during else None,
            "start_s": capture.start_cost_s,
            "stop_s": stop_cost_s,
            "steps": capture.steps_done,
            "steps_per_execution": self._last_n,
        }


class TraceUploader:
    """Reports statuses and delivers finished traces on its own thread, which runs only while
    there is work (it ends when its queue is empty, and starts again with the next job) and
    waits between retries on its clock until `stop()`: no thread outlives what it sends."""

    def __init__(
        self,
        config: AgentConfig,
        run_id: Callable[[], int | None],
        post: Post,
        slot: threading.Lock,
        *,
        clock: Clock = SYSTEM_CLOCK,
    ) -> None:
        self._config = config
        self._run_id = run_id
        self._post = post
        self._slot = slot
        # The thread waits (between retries) on this clock, until `stop()` sets this.
        self._clock = clock
        self._closing = threading.Event()
        self._lock = threading.Lock()
        self._jobs: deque[Callable[[], None]] = deque()
        self._unfinished = 0  # jobs queued or running
        self._worker: threading.Thread | None = None
        self._warned_too_big = False
        # Captures that stopped and whose trace the server does not have yet, by profile id,
        # and whether the last attempt to reach the server failed: what the process's exit
        # waits for, and how long (wait_for_uploads).
        self.undelivered: dict[int, Capture] = {}
        self.server_away = False

    def send(self, job: Callable[[], None]) -> None:
        with self._lock:
            if self._closing.is_set():
                return  # the process is ending: what is spooled waits for the next agent
            self._jobs.append(job)
            self._unfinished += 1
            if self._worker is None:
                self._worker = threading.Thread(
                    target=self._work, name="stoker-profile-upload", daemon=True
                )
                self._worker.start()

    def _work(self) -> None:
        while True:
            with self._lock:
                if not self._jobs or self._closing.is_set():
                    self._unfinished -= len(self._jobs)  # let go once stopped
                    self._jobs.clear()
                    self._worker = None
                    return
                job = self._jobs.popleft()
            try:
                job()
            except Exception:
                log.warning("Stoker: profile upload failed", exc_info=True)
            finally:
                with self._lock:
                    self._unfinished -= 1

    def stop(self) -> None:
        """End the upload thread: a retry waiting on the server stops waiting, and the jobs
        still queued are let go. A spooled trace stays in the spool for the next agent or
        `stoker upload`."""
        self._closing.set()

    @property
    def thread(self) -> threading.Thread | None:
        """The upload thread while it runs."""
        return self._worker

    def _wait(self, backoff: Backoff) -> bool:
        """Wait out the next retry delay; True when `stop()` came meanwhile."""
        return self._clock.wait(self._closing, backoff.next_delay_s())

    @property
    def drain_timeout_s(self) -> float:
        return self._config.drain_timeout_s

    @property
    def busy(self) -> bool:
        """Statuses or a trace are still to be sent (by the background thread)."""
        return self._unfinished > 0

    def report(self, pid: int, rank: int, **status: Any) -> None:
        self.send(lambda: self._post_retrying(pid, rank, "status", status))

    def report_capturing(self, capture: Capture, report: dict[str, Any]) -> None:
        """The capture started: said until it is said, or the capture has ended."""
        self.send(
            lambda: self._post_retrying(
                capture.id, capture.rank, "status", report, until=lambda: capture.ended
            )
        )

    def upload(self, capture: Capture, overhead: dict[str, Any]) -> None:
        """Deliver a stopped capture's trace (on the upload thread)."""
        self.undelivered[capture.id] = capture
        self.send(lambda: self._upload(capture, overhead))

    def release(self, capture: Capture) -> None:
        if capture.spooled:
            profile_spool.remove(capture.directory)
            capture.lock.close()
        else:
            shutil.rmtree(capture.directory, ignore_errors=True)
        if self._slot.locked():
            self._slot.release()

    def _upload(self, capture: Capture, overhead: dict[str, Any]) -> None:
        """Keep the finished trace (and what to report with it) in the spool, then send it from
        there until the server has it; without a spool, send it while the process lives. Any
        failure on the way is reported to the server, which otherwise waits for the trace."""
        settled = True
        try:
            settled = self._keep_and_deliver(capture, overhead)
        except Exception as error:
            message = f"profile failed: {type(error).__name__}: {error}"[:500]
            log.warning("Stoker: %s", message)
            self._post_retrying(capture.id, capture.rank, "status",
                                {"status": "failed", "error": message})  # fmt: skip
        finally:
            if settled:
                self.undelivered.pop(capture.id, None)
                self.release(capture)
            else:  # stopped first: a spooled trace stays for the next agent
                self._let_go(capture)

    def _let_go(self, capture: Capture) -> None:
        if capture.spooled:
            capture.lock.close()
        else:
            shutil.rmtree(capture.directory, ignore_errors=True)
        if self._slot.locked():
            self._slot.release()

    def _keep_and_deliver(self, capture: Capture, overhead: dict[str, Any]) -> bool:
        trace = profile_spool.finish_capture(capture.directory)
        capture.status.update(
            status="uploading", first_step=capture.first_step, last_step=capture.last_step,
            overhead=overhead, bytes=trace.stat().st_size,
        )  # fmt: skip
        if capture.spooled:
            self._keep_within_bound(capture)
        if capture.spooled:
            profile_spool.write_status(capture.directory, capture.status)
        return self._deliver(capture)

    def _keep_within_bound(self, capture: Capture) -> None:
        """A trace that takes the run's spool over its bound leaves the spool (said once)."""
        run_dir = capture.directory.parent.parent
        used = Spool(run_dir).used_bytes()
        if used <= self._config.spool_max_bytes:
            return
        if not self._warned_too_big:
            self._warned_too_big = True
            log.warning(
                "Stoker: profile %s's trace (%.1f MiB) does not fit in the spool's %.0f MiB "
                "bound (%s); it is sent while this process lives and lost if it ends first",
                capture.id, capture.status["bytes"] / 2**20,
                self._config.spool_max_bytes / 2**20, run_dir,
            )  # fmt: skip
        outside = Path(tempfile.mkdtemp(prefix="stoker-prof-"))
        shutil.move(capture.directory / profile_spool.TRACE, outside / profile_spool.TRACE)
        profile_spool.remove(capture.directory)
        capture.lock.close()
        capture.directory, capture.spooled, capture.lock = outside, False, None

    def _deliver(self, capture: Capture) -> bool:
        """Send the status and the trace, retrying with capped backoff while the server is
        away or busy, or a setting is to be fixed (for as long as the process lives: what is
        spooled survives it). True once settled (delivered, or refused for good); False when
        `stop()` came first."""
        if not capture.spooled:  # the status goes with it in memory
            capture.status.update(
                server=self._config.server, run_id=self._run_id(), profile=capture.id,
                rank=capture.rank,
            )  # fmt: skip
            profile_spool.write_status(capture.directory, capture.status)
        backoff = Backoff(max_s=RETRY_MAX_S)
        while True:
            if capture.status.get("run_id") is None:
                capture.status["run_id"] = self._run_id()
                profile_spool.write_status(capture.directory, capture.status)
            if capture.status.get("run_id") is not None:
                answer = profile_spool.deliver(
                    capture.directory, post=self._post, token=self._config.token
                )
                self.server_away = answer.verdict is Verdict.RETRY
                if not self.server_away:
                    return True
            if self._wait(backoff):
                return False

    def _post_retrying(
        self,
        pid: int,
        rank: int,
        what: str,
        report: dict[str, Any],
        until: Callable[[], bool] = bool,
    ) -> None:
        """POST `report` to the run's profile `what` (status); retry with capped backoff while
        the server is away or busy, or a setting is to be fixed (for as long as the process
        lives, or until `until()` or `stop()`); give up on a refusal, which is said."""
        backoff = Backoff(max_s=RETRY_MAX_S)
        while True:
            run_id = self._run_id()
            if run_id is not None:
                answer = profile_spool.post_to_profile(
                    self._post, self._config.server, run_id, pid, what,
                    body=report, token=self._config.token, params={"rank": rank},
                )  # fmt: skip
                self.server_away = answer.verdict is Verdict.RETRY
                if answer.verdict is Verdict.REFUSED:
                    log.warning("Stoker: the server refused the profile: %s",
                                answer.reason[:300])  # fmt: skip
                if not self.server_away:
                    return
            if until() or self._wait(backoff):
                return


def wait_for_uploads(profilers: Sequence[Profiler | TraceUploader], cap_s: float) -> None:
    """At the process's exit: let the profilers' uploads finish while the server takes them
    (up to `cap_s`), not long once it stops answering; then say where what is left is kept,
    and stop their upload threads."""
    started = time.monotonic()
    away_since: float | None = None
    while any(profiler.busy for profiler in profilers):
        now = time.monotonic()
        if any(profiler.server_away for profiler in profilers):
            away_since = now if away_since is None else away_since
        else:
            away_since = None
        if now - started >= cap_s or (
            away_since is not None and now - away_since >= EXIT_GIVE_UP_UNREACHABLE_S
        ):
            break
        time.sleep(0.05)
    for profiler in profilers:
        for capture in list(profiler.undelivered.values()):
            if capture.spooled:
                log.warning(
                    "Stoker: profile %s's trace is not delivered yet; it is kept in %s and sent "
                    "by the next Stoker agent started with this spool directory, or now with: "
                    "stoker upload %s",
                    capture.id, capture.directory, capture.directory.parent.parent,
                )  # fmt: skip
            else:
                log.warning(
                    "Stoker: profile %s's trace could not be delivered before exit and is lost "
                    "(it was not in the spool)",
                    capture.id,
                )
    for profiler in profilers:
        profiler.stop()
