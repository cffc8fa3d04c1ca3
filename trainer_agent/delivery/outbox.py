"""Seq-numbered batches on their way to the server: in memory until acknowledged, on disk
(the spool) while the server cannot be reached.

Every flush turns what the recorder holds into batches of at most `max_batch_rows` rows per
section, each with the next seq and the agent's counters. A batch leaves memory only once
the server acknowledged it (after its commit), or when the spool took it; the spool is
replayed first, so the server sees seqs in order, and it ignores a seq it already stored.
Beyond `max_pending_rows` in memory the oldest batches are dropped and counted.
"""

import logging
from collections import deque
from collections.abc import Callable
from pathlib import Path
from typing import Any

from trainer_agent.capture.recorder import Columns, Recorder, row_count
from trainer_agent.delivery import wire
from trainer_agent.delivery.http import HttpTransport
from trainer_agent.delivery.spool import Spool
from trainer_agent.delivery.transport import Batch, Transport

log = logging.getLogger("trainer_agent")

SECTIONS = ("steps", "metrics", "epochs", "device", "host", "pipeline")
# Called once per delivered batch: None when the server stored it, else why it refused.
OnOutcome = Callable[[Batch, str | None], None]


def split_sections(sections: dict[str, Columns], max_rows: int) -> list[dict[str, Columns]]:
    """Cut sections into chunks of at most `max_rows` rows per section, in order."""
    longest = max((row_count(columns) for columns in sections.values()), default=0)
    if 0 < longest <= max_rows:  # the usual case: one chunk, no copies
        return [sections]
    chunks = []
    for start in range(0, longest, max_rows):
        chunk = {}
        for name, columns in sections.items():
            if start < row_count(columns):
                chunk[name] = {k: v[start : start + max_rows] for k, v in columns.items()}
        chunks.append(chunk)
    return chunks


def batch_rows(batch: Batch) -> int:
    return sum(row_count(batch[name]) for name in SECTIONS if name in batch)


def step_rows(batch: Batch) -> int:
    return row_count(batch.get("steps") or {})


def _encoded_size(batch: Batch) -> int:
    return len(wire.dumps(batch))


def _file_size(path: Path) -> int:
    return path.stat().st_size


class Outbox:
    def __init__(
        self,
        recorder: Recorder,
        hello: dict[str, Any],
        *,
        max_batch_rows: int,
        max_pending_rows: int,
        spool: Spool | None,
    ) -> None:
        self._recorder = recorder
        self._hello = hello
        self._max_batch_rows = max_batch_rows
        self._max_pending_rows = max_pending_rows
        self.spool = spool
        self._pending: deque[Batch] = deque()
        self._pending_rows = 0
        self._pending_dropped = 0
        self.next_seq = 1
        self._reported_counters: dict[str, int] | None = None
        self._welcomed_once = False
        self.spooled_rows = 0  # rows ever moved to the spool
        self.spooled_steps = 0  # step rows in this run's spool now, for the end's count
        self._spool_dropped = 0
        # Listing the spool directory every flush costs more than the rest of a flush: it is
        # listed only while it may hold batches (at start, and after an outage).
        self._spool_may_hold_batches = spool is not None
        self._warned_spool_error = False
        self._warned_spool_full = False

    # --- counts -------------------------------------------------------------------------
    @property
    def dropped_rows(self) -> int:
        return self._recorder.dropped + self._pending_dropped + self._spool_dropped

    @property
    def pending_rows(self) -> int:
        """Rows not yet delivered nor spooled: in batches, and still in the recorder."""
        return self._pending_rows + len(self._recorder)

    def counters(self) -> dict[str, int]:
        counters = {"dropped_rows": self.dropped_rows, "spooled_rows": self.spooled_rows}
        unreadable = self.spool.unreadable_files if self.spool is not None else 0
        if unreadable:  # only then: servers before this counter refuse unknown fields
            counters["unreadable_spool_files"] = unreadable
        return counters

    # --- in ----------------------------------------------------------------------------
    def collect(self) -> None:
        """Turn what the recorder holds into batches; one without rows when only the counters
        changed (the server shows them)."""
        sections = self._recorder.drain()
        self._drop_oldest_beyond_cap()
        counters = self.counters()
        if not sections and counters == self._reported_counters:
            return
        for chunk in split_sections(sections, self._max_batch_rows) or [{}]:
            batch: Batch = {"type": "batch", "seq": self.next_seq, **chunk, "agent": counters}
            self._pending.append(batch)
            self.next_seq += 1
            self._pending_rows += batch_rows(batch)
        self._reported_counters = counters

    def _drop_oldest_beyond_cap(self) -> None:
        while self._pending_rows > self._max_pending_rows and self._pending:
            rows = batch_rows(self._pending.popleft())
            self._pending_rows -= rows
            self._pending_dropped += rows

    # --- to disk -----------------------------------------------------------------------
    def spool_pending(self) -> None:
        """Move the batches in memory to the spool, oldest first; what does not fit (cap or
        full disk) is dropped and counted."""
        if self.spool is None:
            return
        while self._pending:
            batch = self._pending.popleft()
            rows = batch_rows(batch)
            self._pending_rows -= rows
            if self._spool_one(self.spool, batch):
                self.spooled_rows += rows
                self.spooled_steps += step_rows(batch)
                self._spool_may_hold_batches = True
            else:
                self._spool_dropped += rows

    def _spool_one(self, spool: Spool, batch: Batch) -> bool:
        try:
            if spool.add(self._hello, batch):
                return True
        except OSError as error:
            if not self._warned_spool_error:
                self._warned_spool_error = True
                log.warning(
                    "Stoker: cannot write the spool in %s (%s); records that do not fit "
                    "are dropped and counted",
                    spool.directory,
                    error,
                )
            return False
        if not self._warned_spool_full:
            self._warned_spool_full = True
            log.warning(
                "Stoker: %s; records that do not fit are dropped and counted", spool.refusal
            )
        return False

    def spooled_paths(self) -> list[Path]:
        if self.spool is None or not self._spool_may_hold_batches:
            return []
        paths = self.spool.batch_paths()
        self._spool_may_hold_batches = bool(paths)
        return paths

    # --- out ---------------------------------------------------------------------------
    def deliver(self, transport: Transport, deadline: float, on_outcome: OnOutcome) -> None:
        """Send the spool, then memory, in seq order. A batch is forgotten once the server
        answered for it; a failure raises with the rest kept."""
        if self.spool is not None:
            for group in transport.groups(self.spooled_paths(), _file_size):
                loaded = [self.spool.load_or_set_aside(path) for path in group]
                batches = [batch for batch in loaded if batch is not None]
                group = [path for path, batch in zip(group, loaded, strict=True) if batch]
                if not batches:
                    continue
                outcomes = transport.send(batches, deadline)
                for path in group:
                    self.spool.remove(path)
                self.spooled_steps -= sum(step_rows(batch) for batch in batches)
                for batch, outcome in zip(batches, outcomes, strict=True):
                    on_outcome(batch, outcome)
        for pending in transport.groups(list(self._pending), _encoded_size):
            outcomes = transport.send(pending, deadline)
            for sent, outcome in zip(pending, outcomes, strict=True):
                self._pending.popleft()
                self._pending_rows -= batch_rows(sent)
                on_outcome(sent, outcome)

    def deliver_with_end(
        self, transport: HttpTransport, end: dict[str, Any], on_outcome: OnOutcome
    ) -> bool | None:
        """What is left and the run's `end` in one request, when the spool holds nothing and
        memory fits one: True once the end is stored too, False when only the batches were
        answered for (refused), None when it does not fit one (deliver as usual). Raises as
        `deliver` does."""
        if self.spooled_paths():
            return None
        group = list(self._pending)
        if len(transport.groups(group, _encoded_size)) > 1:
            return None
        outcomes, end_stored = transport.send_with_end(group, end, float("inf"))
        for batch, outcome in zip(group, outcomes, strict=True):
            self._pending.popleft()
            self._pending_rows -= batch_rows(batch)
            on_outcome(batch, outcome)
        return end_stored

    def welcomed(self, last_seq: int) -> None:
        """The server holds this run up to `last_seq`."""
        if not self._welcomed_once:
            self._welcomed_once = True
            if last_seq and not (self.spool and self.spool.batch_paths()):
                # A new process resuming a run: continue numbering after what the server holds.
                for offset, batch in enumerate(self._pending):
                    batch["seq"] = last_seq + 1 + offset
                self.next_seq = last_seq + 1 + len(self._pending)
            return
        while self._pending and self._pending[0]["seq"] <= last_seq:
            self._pending_rows -= batch_rows(self._pending.popleft())

    # --- the run's end -----------------------------------------------------------------
    def spool_holds_batches(self) -> bool:
        return self.spool is not None and bool(self.spool.batch_paths())

    def write_end(self, status: str) -> None:
        """Record the run's end in the spool, for whoever sends what is left."""
        if self.spool is None:
            return
        try:
            self.spool.write_end(self._hello, status, self.counters(), next_seq=self.next_seq)
        except OSError as error:
            log.warning("Stoker: cannot record the run's end in the spool (%s)", error)

    def discard_delivered_spool(self) -> None:
        """The server holds everything, the end included: leave no run behind on disk, where
        `stoker upload` would later take it for a run that never ended."""
        if self.spool is None or self.spool.batch_paths():
            return
        self.spool.discard()

    def release(self) -> None:
        if self.spool is not None:
            self.spool.release()
