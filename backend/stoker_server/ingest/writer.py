"""The single database writer.

All writes go through one named thread, so SQLite never sees two writers fighting over its
lock, and the event loop never blocks on a commit. Agent batches that queue up while a commit
is running are stored together in the next transaction (group commit); each is acknowledged
only after that commit. When a group fails, its batches are retried one by one, so one bad
batch never fails another.

An agent may have several batches queued at once. Once a batch of a stream (an agent
process of a run) fails, the stream's later batches are refused unstored until the stream
connects again: storing them would move its seq cursor past the failed batch, and the
agent, told on reconnecting that everything up to the cursor is stored, would never resend
it.
"""

import asyncio
import logging
import queue
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypeVar, cast

from sqlalchemy.engine import Engine
from sqlmodel import Session

from stoker_server.core.errors import StokerError
from stoker_server.ingest.agent_writes import BatchJob, store_batches

T = TypeVar("T")
log = logging.getLogger(__name__)


class StreamFailed(RuntimeError):
    """An earlier batch of the same stream failed; this one was not stored."""


class DiskFull(StokerError):
    """The database's disk is full: nothing was stored. 507, a server error, so agents keep
    their rows (spooled) and send them again later."""

    status_code = 507


def is_disk_full(error: BaseException) -> bool:
    """Whether a database error says the disk (or the database's size limit) is full."""
    seen: BaseException | None = error
    while seen is not None:
        orig = getattr(seen, "orig", None)
        for candidate in (seen, orig):
            if candidate is None:
                continue
            if getattr(candidate, "sqlstate", None) == "53100":  # PostgreSQL disk_full
                return True
            text = str(candidate).lower()
            if "database or disk is full" in text or "no space left on device" in text:
                return True
        seen = seen.__cause__ or seen.__context__
    return False


StreamKey = tuple[int, str]  # (run id, stream)


@dataclass
class _Job:
    fn: Callable[..., Any] | None  # None: an agent batch (groupable) or a control action
    kwargs: dict[str, Any]
    future: asyncio.Future
    loop: asyncio.AbstractEventLoop
    batch: BatchJob | None = None
    control: Callable[[], Any] | None = None  # runs on the writer thread, no session
    stores_rows: bool = False  # its success shows the disk has room again


def _settle(job: _Job, result: Any = None, error: BaseException | None = None) -> None:
    def apply() -> None:
        if job.future.done():  # the waiter went away (agent disconnected)
            return
        if error is not None:
            job.future.set_exception(error)
        else:
            job.future.set_result(result)

    job.loop.call_soon_threadsafe(apply)


class Writer:
    def __init__(self, engine: Engine, *, max_group: int = 64) -> None:
        self._engine = engine
        self._max_group = max_group
        self._queue: queue.SimpleQueue[_Job | None] = queue.SimpleQueue()
        self._failed_streams: set[StreamKey] = set()  # touched only on the writer thread
        # Disk-full state for /metrics (telemetry.DiskGauges): set by the writer thread.
        self.disk_full = False
        self.disk_full_refusals = 0
        self._thread = threading.Thread(target=self._loop, name="stoker-writer", daemon=True)
        self._thread.start()

    def _enqueue(
        self, fn: Callable[..., Any] | None, kwargs: dict[str, Any], **job: Any
    ) -> "asyncio.Future[Any]":
        """Queue a job for the writer thread; its future resolves on this loop after it ran."""
        loop = asyncio.get_running_loop()
        queued = _Job(fn, kwargs, loop.create_future(), loop, **job)
        self._queue.put(queued)
        return queued.future

    def submit(self, fn: Callable[..., T], /, **kwargs: Any) -> "asyncio.Future[T]":
        """Queue `fn(session=..., **kwargs)` for the writer thread; its future resolves after."""
        return self._enqueue(fn, kwargs)

    async def run(self, fn: Callable[..., T], /, **kwargs: Any) -> T:
        """Run `fn(session=..., **kwargs)` in the writer thread with a fresh session."""
        return await self.submit(fn, **kwargs)

    async def store_rows(self, fn: Callable[..., T], /, **kwargs: Any) -> T:
        """`run` for a job that stores an agent's rows: once one succeeds, the disk is no
        longer full (a read or a small edit succeeding says nothing about room for rows)."""
        result: T = await self._enqueue(fn, kwargs, stores_rows=True)
        return result

    def submit_store(self, batch: BatchJob) -> "asyncio.Future[dict[str, Any] | None]":
        """Queue an agent batch (stored with others in one transaction; see store_batches)."""
        return self._enqueue(None, {}, batch=batch)

    async def store(self, batch: BatchJob) -> dict[str, Any] | None:
        """Store an agent batch (possibly with others); see agent_writes.store_batches."""
        return await self.submit_store(batch)

    async def forgive(self, key: StreamKey) -> None:
        """A stream connected again: accept its batches after everything queued before."""
        await self._enqueue(None, {}, control=lambda: self._failed_streams.discard(key))

    def _loop(self) -> None:
        pending: _Job | None = None
        while True:
            job = pending if pending is not None else self._queue.get()
            pending = None
            if job is None:
                return
            if job.control is not None:
                _settle(job, job.control())
                continue
            if job.batch is None:
                self._call(job)
                continue
            group = [job]
            while len(group) < self._max_group:
                try:
                    following = self._queue.get_nowait()
                except queue.Empty:
                    break
                if following is None or following.batch is None:
                    pending = following
                    if following is None:
                        self._store(group)
                        return
                    break
                group.append(following)
            self._store(group)

    def _refuse_failed(self, group: list[_Job]) -> list[_Job]:
        """The group without the batches of failed streams (those are answered with an error)."""
        kept = []
        for job in group:
            assert job.batch is not None
            if (job.batch.run_id, job.batch.stream) in self._failed_streams:
                _settle(job, error=StreamFailed("an earlier batch of this agent failed"))
            else:
                kept.append(job)
        return kept

    def _full(self, error: BaseException) -> BaseException:
        """`error`, or DiskFull in its place when it says the disk is full."""
        if not is_disk_full(error):
            return error
        if not self.disk_full:
            log.error("the database's disk is full: refusing rows until there is room (%s)", error)
        self.disk_full = True
        self.disk_full_refusals += 1
        return DiskFull(
            "the database's disk is full: nothing was stored; the agent keeps its rows and "
            "sends them again once there is room"
        )

    def _call(self, job: _Job) -> None:
        assert job.fn is not None
        try:
            with Session(self._engine, expire_on_commit=False) as session:
                result = job.fn(session=session, **job.kwargs)
        except BaseException as error:
            _settle(job, error=self._full(error))
        else:
            if job.stores_rows:
                self.disk_full = False
            _settle(job, result)

    def _store(self, group: list[_Job]) -> None:
        group = self._refuse_failed(group)
        if not group:
            return
        try:
            with Session(self._engine, expire_on_commit=False) as session:
                # Every job of a group carries a batch (_refuse_failed asserted it).
                jobs = cast("list[BatchJob]", [j.batch for j in group])
                results = store_batches(session=session, jobs=jobs)
        except BaseException as error:
            if len(group) == 1:
                batch = group[0].batch
                assert batch is not None
                self._failed_streams.add((batch.run_id, batch.stream))
                _settle(group[0], error=self._full(error))
                return
            if is_disk_full(error):  # one by one would fail the same way, each slowly
                for job in group:
                    assert job.batch is not None
                    self._failed_streams.add((job.batch.run_id, job.batch.stream))
                    _settle(job, error=self._full(error))
                return
            log.warning("group of %d batches failed (%s); storing one by one", len(group), error)
            for job in group:
                self._store([job])
            return
        self.disk_full = False
        for job, result in zip(group, results, strict=True):
            _settle(job, result)

    def close(self) -> None:
        self._queue.put(None)
        self._thread.join(timeout=30)
