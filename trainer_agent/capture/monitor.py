"""`Monitor`: step timing, input wait and scalars for custom training loops (no Keras needed)."""

import contextlib
import logging
import queue
import threading
import time
from collections.abc import Iterable, Iterator
from types import TracebackType
from typing import Any, TypeVar, Unpack

from trainer_agent.capture.dataset_graph import read_dataset
from trainer_agent.capture.guard import DISABLED_STATUS, Guard, end_in_background
from trainer_agent.capture.input_wait import StepRow, batch_size_of
from trainer_agent.capture.job import job_rank, job_run_key
from trainer_agent.capture.session import RunSession, scalars
from trainer_agent.config import AgentConfig, RunArguments, RunOptions, takes_run_options
from trainer_agent.telemetry.environment import collect
from trainer_agent.telemetry.nvml import shared_nvml

log = logging.getLogger("trainer_agent")
T = TypeVar("T")


class Monitor:
    """Streams a custom training loop's steps, input wait and scalars to a Stoker server.

    A step runs from one request for a batch to the next; its input wait is the time the
    `next()` on your dataset took. `log()` keeps the scalars of every `every_n_batches`-th
    step only, so tensors are converted (a device sync) rarely. If the monitor itself fails,
    it logs why once, ends its run and stays off; your loop and its data go on untouched.

    Takes the keyword arguments of `trainer_agent.config.RunOptions` (the same as
    `StokerCallback` and `autolog`): run_name, project, tags, config, server, token, run_key,
    every_n_batches, sample_interval_s, all_gpus.

    Example:
        with Monitor(run_name="custom-loop", server="http://127.0.0.1:8470") as mon:
            for x, y in mon.iterate(train_ds):
                loss = train_step(x, y)
                mon.log(loss=loss)
    """

    @takes_run_options
    def __init__(self, **options: Unpack[RunArguments]) -> None:
        self.options = RunOptions.of(type(self).__name__, options)
        self.config = AgentConfig.from_options(self.options)
        self.every_n_batches = self.options.every_n_batches
        self.session: RunSession | None = None
        self._step = 0
        # The step in progress: (step, asked for its batch, got it, batch size, whether the
        # step before was ready on the device when asked and when got; None: not known).
        self._open: tuple[int, float, float, int | None, bool | None, bool | None] | None = None
        self._ready = _ReadyWatch()
        self._next_log_step = 0
        self._guard = Guard(
            self,
            {
                "start": lambda: self,
                "iterate": _untimed,
                "log": None,
                "log_epoch": None,
                "close": None,
            },
            on_disable=self._end_disabled_run,
        )

    def start(self) -> "Monitor":
        try:
            nvml = shared_nvml()
            environment = collect(nvml, all_gpus=self.config.all_gpus)
            self.session = RunSession(
                self.config,
                environment=environment,
                rank=job_rank(),
                nvml=nvml,
                run_key=job_run_key(self.config.run_name, self.options.run_key),
            )
            self.session.start()
        except Exception as error:
            self._guard.trip("start", error)
        return self

    def __enter__(self) -> "Monitor":
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if exc_type is None:
            self.close("finished")
        elif issubclass(exc_type, KeyboardInterrupt):
            self.close("interrupted")
        else:
            self.close("failed")

    def iterate(self, iterable: Iterable[T]) -> Iterator[T]:
        """Yield the elements of `iterable`, timing each step and each wait for data.

        The iterable's own errors (and its end) reach the loop unchanged; if the timing fails,
        the monitor is disabled and the rest of the elements are yielded untimed.
        """
        iterator = iter(iterable)
        try:
            if self.session is not None and type(iterator).__module__.startswith("tensorflow"):
                self.session.pipeline.describe(read_dataset(iterable), stamped=False)
                self.session.pipeline.watch(iterator)
        except Exception as error:
            self._guard.trip("iterate", error)
        try:
            while True:
                try:
                    asked = time.perf_counter()
                    self._close_step(asked)
                    if self.session is not None:
                        self.session.profiler.step_begin(self._step, asked)
                except Exception as error:
                    self._guard.trip("iterate", error)
                    break
                before = self._ready.ready(self._step - 1)
                try:
                    element = next(iterator)
                except StopIteration:
                    return
                try:
                    got = time.perf_counter()
                    after = self._ready.ready(self._step - 1)
                    size = batch_size_of(element)
                    self._open = (self._step, asked, got, size, before, after)
                    self._step += 1
                except Exception as error:
                    self._guard.trip("iterate", error)
                    yield element
                    break
                yield element
        finally:
            try:
                self._close_step(time.perf_counter())
            except Exception as error:
                self._guard.trip("iterate", error)
        yield from iterator  # the guard tripped: the rest, untimed

    def log(self, **scalars: Any) -> None:
        """Record scalars (floats or tensors) for the current step, every n-th step."""
        try:
            session = self.session
            step = self._step - 1
            if session is None:
                return
            self._ready.watch(step, scalars.values())
            if step < self._next_log_step:
                return
            self._next_log_step = step - step % self.every_n_batches + self.every_n_batches
            for name, value in scalars.items():
                try:
                    if hasattr(value, "detach"):  # a PyTorch tensor that needs grad
                        value = value.detach()
                    session.record_metric(max(0, step), name, float(value))
                except (TypeError, ValueError):
                    continue
        except Exception as error:
            self._guard.trip("log", error)

    def log_epoch(self, epoch: int, **metrics: Any) -> None:
        """Record an epoch's metrics (e.g. `loss`, `val_loss`, `val_accuracy`), floats or
        tensors, at the end of epoch `epoch` (0-based): the curves runs are compared by."""
        try:
            if self.session is not None:
                self.session.record_epoch(int(epoch), self._step, scalars(metrics))
        except Exception as error:
            self._guard.trip("log_epoch", error)

    def close(self, status: str = "finished") -> None:
        """Flush what is recorded and end the run (bounded by the close timeout)."""
        try:
            self._close_step(time.perf_counter())
            session, self.session = self.session, None
            self._ready.stop()
            if session is not None:
                session.profiler.end()
                session.close(status)
        except Exception as error:
            self._guard.trip("close", error)

    def _end_disabled_run(self, reason: str) -> None:
        # The step still open is dropped: the state that raised is not trusted.
        session, self.session = self.session, None
        self._open = None
        self._ready.stop()
        if session is not None:
            end_in_background(session, DISABLED_STATUS)

    def _close_step(self, now: float) -> None:
        opened, self._open = self._open, None
        if opened is None:
            return
        step, asked, got, size, before, after = opened
        # Under asynchronous dispatch (JAX) the device may still run the step before while
        # the batch is fetched: only the time it sat idle is waiting.
        done = self._ready.done_at(step - 1)
        if before is None or before:  # not known, or the device was idle all along
            wait = got - asked
        elif not after:  # the device computed all along
            wait = 0.0
        else:  # it finished during the fetch: when, the watching thread says
            free = done if done is not None and asked <= done <= got else (asked + got) / 2
            wait = got - free
        self._record_step(StepRow(step, asked, now - asked, wait, size))

    def _record_step(self, row: StepRow) -> None:
        """Hand a timed step to the run (none before `start`, or once the monitor is disabled)."""
        if self.session is not None:
            self.session.record_step(row.step, row.start, row.dur, row.wait, row.batch_size)


def _untimed(iterable: Iterable[T]) -> Iterator[T]:
    """`iterate` once the monitor is disabled: the iterable's own iterator."""
    return iter(iterable)


_STOP_WATCHING: Any = object()


class _ReadyWatch:
    """When each step's logged outputs became ready on the device, for arrays that can say
    (`block_until_ready`: JAX). A daemon thread blocks on them in turn, so the training loop
    never does; with nothing logged, or plain floats, none is started. It ends with the run."""

    def __init__(self) -> None:
        self._queue: queue.SimpleQueue[tuple[int, Any]] = queue.SimpleQueue()
        self._done: dict[int, float] = {}
        self._pending: set[int] = set()
        self._thread: threading.Thread | None = None
        self._latest: tuple[int, Any] | None = None

    def watch(self, step: int, values: Iterable[Any]) -> None:
        if step in self._pending or step in self._done:
            return
        value = next((v for v in values if hasattr(v, "block_until_ready")), None)
        if value is None:
            return
        if self._thread is None:
            self._thread = threading.Thread(target=self._run, name="stoker-ready", daemon=True)
            self._thread.start()
        self._pending.add(step)
        self._latest = (step, value)
        self._queue.put((step, value))

    def stop(self) -> None:
        """The run ended: the thread ends once it has waited for what it was given."""
        if self._thread is not None:
            self._thread = None
            self._queue.put((-1, _STOP_WATCHING))

    def ready(self, step: int) -> bool | None:
        """Whether step's logged output is ready now (None: not known); never blocks."""
        latest = self._latest
        if latest is None or latest[0] != step:
            return None
        try:
            return bool(latest[1].is_ready())
        except Exception:
            return None

    def done_at(self, step: int) -> float | None:
        """When step's outputs were ready; +inf when still computing; None when unknown."""
        done = self._done.pop(step, None)
        if done is not None or step not in self._pending:
            self._pending.discard(step)
            return done
        self._pending.discard(step)  # its late answer is never asked for: cleared at 1000
        return float("inf")

    def _run(self) -> None:
        while True:
            step, value = self._queue.get()
            if value is _STOP_WATCHING:
                return
            with contextlib.suppress(Exception):  # a failed step: it ended all the same
                value.block_until_ready()
            self._done[step] = time.perf_counter()
            if len(self._done) > 1000:  # steps never asked about (a loop that ended)
                self._done.clear()
