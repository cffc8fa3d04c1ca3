"""One monitored run: its buffer, its sender, and the hello that names it.

A run's end need not wait for the server: `close(wait=False)` returns at once and the run's
sender drains in the background. At process exit one handler ends the runs still open and
waits for every sender still draining (each bounded by its drain cap), so nothing recorded
is lost; `flush()` waits for them earlier.
"""

import atexit
import functools
import gc
import logging
import os
import socket
import sys
import threading
import time
import uuid
import weakref
from collections import deque
from collections.abc import Callable, Mapping
from typing import Any

from trainer_agent.capture.input_wait import Row
from trainer_agent.capture.pipeline_model import PipelineSource
from trainer_agent.capture.recorder import Recorder
from trainer_agent.config import AgentConfig
from trainer_agent.delivery.sender import Sender
from trainer_agent.delivery.upload import start_background_upload
from trainer_agent.delivery.wire import within_bytes
from trainer_agent.profiling.profile import (
    BASELINE_STEPS,
    Profiler,
    TraceUploader,
    wait_for_uploads,
)
from trainer_agent.telemetry.nvml import Nvml, shared_nvml
from trainer_agent.telemetry.samplers import DeviceSource, HostSource, Sampler

log = logging.getLogger("trainer_agent")

PROTOCOL_VERSION = 1

# The hello's environment, or a function that reads it on the sender thread (it can be slow).
Environment = dict[str, Any] | Callable[[], dict[str, Any]]
# (step, start in perf_counter seconds, duration s, input wait s or None, batch size or None)
StepListener = Callable[[int, float, float, float | None, int | None], None]

_registry_lock = threading.Lock()
_open_sessions: set["RunSession"] = set()
_draining: set[Sender] = set()
# Every run's trace uploader: the exit waits for the traces they still deliver (an uploader
# lives on, by its thread, while its run is gone).
_uploaders: "weakref.WeakSet[TraceUploader]" = weakref.WeakSet()
_exit_handler_registered = False


def _new_run_key() -> str:
    return uuid.uuid4().hex


def _register(session: "RunSession") -> None:
    global _exit_handler_registered
    session.sender.when_done = functools.partial(_forget_sender, session.sender)
    with _registry_lock:
        _open_sessions.add(session)
        _draining.add(session.sender)
        _uploaders.add(session.profiler.uploader)
        if not _exit_handler_registered:
            _exit_handler_registered = True
            atexit.register(_end_runs_at_exit)


def _forget_sender(sender: Sender) -> None:
    """A sender finished (delivered, or left the rest in the spool): nothing waits for it."""
    with _registry_lock:
        _draining.discard(sender)


def flush(timeout_s: float | None = None) -> bool:
    """Wait until every run that ended in this process is delivered (or spooled).

    `fit()` returns without waiting for the server's acknowledgement; call this before
    reading a run you just trained from the server. True when every run's sender finished
    within `timeout_s` (by default each is bounded by its drain cap).

    Example:
        model.fit(cb.wrap(train_ds), epochs=3, callbacks=[cb])
        trainer_agent.flush()
    """
    deadline = None if timeout_s is None else time.monotonic() + timeout_s
    with _registry_lock:
        still_open = {session.sender for session in _open_sessions}
        senders = [sender for sender in _draining if sender not in still_open]
    finished = True
    for sender in senders:
        left = None if deadline is None else max(0.0, deadline - time.monotonic())
        finished = sender.join(left) and finished
    with _registry_lock:
        _draining.difference_update(sender for sender in senders if sender.done)
    return finished


def _end_runs_at_exit() -> None:
    """End the runs still open (with the status their exception says) and wait for every
    sender to drain. Ctrl-C meanwhile stops the drain: what is left goes to the spool."""
    with _registry_lock:
        sessions = list(_open_sessions)
    for session in sessions:
        session.end_at_exit()
    with _registry_lock:
        senders = list(_draining)
    try:
        for sender in senders:
            sender.join()
        with _registry_lock:
            uploaders = list(_uploaders)
        if uploaders:
            cap_s = max(uploader.drain_timeout_s for uploader in uploaders)
            wait_for_uploads(uploaders, cap_s)
    except KeyboardInterrupt:
        log.warning("Stoker: interrupted; what is not sent yet is kept in the spool")
        for sender in senders:
            sender.abandon()
        for sender in senders:
            sender.join(5.0)
    _collect_before_finalizing()


def _collect_before_finalizing() -> None:
    """Free what the training left in reference cycles while other threads can still run.
    Keras leaves a fit that `stop_training` ended in cycles that hold its tf.data iterator;
    freed only during the interpreter's finalization, that iterator's destructor waits for a
    pipeline thread inside a `numpy_function`/`py_function`, which can no longer take the GIL:
    the process never exits (plain Keras too, 3 of 3 tries; docs/agent.md)."""
    try:
        gc.collect()
    except Exception as error:  # a destructor's failure is not the script's
        log.debug("Stoker: collecting at exit failed: %s", error)


def scalars(values: dict[str, Any]) -> dict[str, float]:
    """The values that are numbers (floats, NumPy or tensor scalars), as floats, by name."""
    numbers = {}
    for name, value in values.items():
        try:
            numbers[str(name)] = float(value)
        except (TypeError, ValueError):
            continue
    return numbers


class RunSession:
    """Owns the resources of one run; the training thread only calls the `record_*` methods."""

    def __init__(
        self,
        config: AgentConfig,
        *,
        environment: Environment | None = None,
        run_key: str | None = None,
        rank: int = 0,
        nvml: Nvml | None = None,
    ) -> None:
        self.config = config
        self._nvml = nvml
        self.run_key = run_key or _new_run_key()
        self.recorder = Recorder(max_rows=config.max_pending_rows)
        hello = {
            "type": "hello",
            "protocol": PROTOCOL_VERSION,
            "run_key": self.run_key,
            "name": config.run_name,
            "project": config.project,
            "tags": list(config.tags),
            "config": within_bytes(config.config),
            "environment": within_bytes(environment) if isinstance(environment, dict) else {},
            "host": socket.gethostname()[:200],
            "pid": os.getpid(),
            "rank": rank,
        }
        self.sender = Sender(
            config=config, hello=hello, buffer=self.recorder, new_run=run_key is None
        )
        if callable(environment):
            self.sender.before_connect = _environment_filler(environment)
        self.sender.before_final_flush = self._stop_sampling
        # Durations come from the monotonic perf_counter; this offset turns them into wall time.
        self._wall_offset_s = time.time() - time.perf_counter()
        self.sampler: Sampler | None = None
        # The owner hands it the training iterator; the sampler thread reads its model.
        self.pipeline = PipelineSource(config.pipeline_interval_s)
        # The last steps recorded: what a profiler capture's steps are compared with.
        self._recent_step_s: deque[float] = deque(maxlen=BASELINE_STEPS)
        # Profiler captures the server asks for (trainer_agent/profiling/profile.py).
        self.profiler = Profiler(
            config, lambda: self.sender.run_id, recent_step_s=self._recent_step_s.copy
        )
        self.closed = False
        # Told every step recorded (step, start, duration, wait, batch size): `stoker tune`
        # measures its trials with it (trainer_agent/tune/trial.py).
        self.step_listener: StepListener | None = None
        # Set by the owner to hand over what it still holds before an abnormal close.
        self.before_abnormal_close: Callable[[], None] | None = None

    def start(self) -> None:
        """Start the run's sender and sampler. On the training thread (a fit's start): what
        need not run here runs on their threads (the host source is made by the sampler's
        first reading, the spool is looked at by the sender)."""
        self.sender.on_command = self._on_command
        config = self.config
        # Runs that earlier processes left in the spool go to the server in the background.
        self.sender.before_first_flush = functools.partial(
            start_background_upload, config.spool_dir, server=config.server, token=config.token
        )
        _register(self)
        self.sender.start()
        device = DeviceSource(self._nvml or shared_nvml(), all_gpus=config.all_gpus)
        self.sampler = Sampler(
            self.recorder,
            interval_s=config.sample_interval_s,
            device=device,
            make_host=HostSource,
            pipeline=self.pipeline,
        )
        self.sampler.start()

    def _on_command(self, command: dict[str, Any]) -> None:
        """Server commands (`watch` is the sender's own); unknown ones are ignored
        (docs/protocol.md)."""
        if command.get("name") == "profile":
            self.profiler.request(command)

    def wall_time(self, perf_s: float) -> float:
        return perf_s + self._wall_offset_s

    def record_step(
        self,
        step: int,
        start_perf_s: float,
        duration_s: float,
        wait_s: float | None = None,
        batch_size: int | None = None,
        *,
        tell_sampler: bool = True,
    ) -> None:
        """One step, as it ends. `tell_sampler=False` where the step boundary tells the
        sampler of long steps itself (a fit's `StepBoundary`)."""
        self.recorder.steps.append(
            step, self.wall_time(start_perf_s), duration_s, wait_s, batch_size
        )
        self._recent_step_s.append(duration_s)
        if self.step_listener is not None:
            self.step_listener(step, start_perf_s, duration_s, wait_s, batch_size)
        if tell_sampler and self.sampler is not None:  # GPM windows line up with long steps
            self.sampler.step_ended(duration_s)

    def record_steps(self, rows: list[Row]) -> None:
        """`record_step` for many steps resolved together (a fit's, on the sender thread before
        each flush): one lock. The sampler learns of long steps from the fit's step boundary
        as they end (`StepBoundary`), not from here."""
        if not rows:
            return
        offset = self._wall_offset_s
        self.recorder.steps.extend(
            [(step, start + offset, dur, wait, size) for step, start, dur, wait, size in rows]
        )
        self._recent_step_s.extend([row[2] for row in rows[-BASELINE_STEPS:]])
        listener = self.step_listener
        if listener is not None:
            for row in rows:
                listener(*row)

    def record_metric(self, step: int, name: str, value: float | None) -> None:
        self.recorder.metrics.append(step, name[:100], value)

    def record_epoch(self, epoch: int, step: int, metrics: Mapping[str, float | None]) -> None:
        """An epoch's metrics (Keras's epoch logs, validation included), ended at `step`."""
        t = time.time()
        for name, value in metrics.items():
            self.recorder.epochs.append(epoch, step, t, name[:100], value)

    def close(self, status: str = "finished", *, wait: bool = True) -> None:
        """End the run with `status`: stop sampling and deliver what is left.

        With `wait`, return once that is done (the sender drains while the server keeps
        acknowledging, up to `drain_timeout_s`); without, at once: the sender stops the
        sampler and drains in the background, and the process waits for it at exit.
        """
        if self.closed:
            return
        self.closed = True
        with _registry_lock:
            _open_sessions.discard(self)
        self.sender.close(status, wait=wait)
        if wait:
            with _registry_lock:
                _draining.discard(self.sender)

    def _stop_sampling(self) -> None:
        """On the sender thread, before its final flush: the sampler's last reading is in."""
        if self.sampler is not None:
            self.sampler.close()

    def end_at_exit(self) -> None:
        """The process is exiting with the run still open: training raised (the interpreter
        keeps the uncaught exception in sys.last_value), was interrupted, or just ended."""
        error = getattr(sys, "last_value", None)
        if isinstance(error, KeyboardInterrupt):
            status = "interrupted"
        elif error is not None:
            status = "failed"
        else:
            status = "finished"
        log.info("Stoker: process exiting; ending run as %s", status)
        self._hand_over()
        self.close(status, wait=False)  # the exit handler waits for all senders at once

    def close_abnormally(self, status: str) -> None:
        """End a run its owner did not close (training raised or the process is exiting)."""
        self._hand_over()
        self.close(status)

    def _hand_over(self) -> None:
        if self.before_abnormal_close is not None:
            try:
                self.before_abnormal_close()
            except Exception:
                log.debug("could not hand over the last records", exc_info=True)


def _environment_filler(read: Callable[[], dict[str, Any]]) -> Callable[[dict[str, Any]], None]:
    def fill(hello: dict[str, Any]) -> None:
        hello["environment"] = within_bytes(read())

    return fill
