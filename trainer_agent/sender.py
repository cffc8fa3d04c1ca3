"""The one background thread that talks to the server.

It wakes every `flush_interval_s` (1 s; 50 ms while a browser watches the run, which the
server says with a `watch` command), turns what the recorder holds into seq-numbered batches,
sends them over the agent WebSocket (or HTTP POST when the WebSocket upgrade is refused or
`transport="http"`), and forgets a batch only once the server acknowledged it (after its
commit). While the server is unreachable it moves unsent batches to the disk spool
(bounded; what does not fit is counted as dropped), retries with capped, jittered backoff,
and replays the spool in seq order when the server is back; the server ignores a seq it
already stored. It never blocks or raises into the training thread.

When the run ends it drains: it keeps sending for as long as the server keeps acknowledging
(up to `drain_timeout_s`), and gives up early only when the server stops answering or cannot
be reached. What is left then stays in the spool, the run's end tells the server how many
steps are still to come, and the next agent that starts with this spool directory sends them
(upload.start_background_upload).
"""

import contextlib
import errno
import logging
import random
import socket
import threading
import time
from collections import deque
from collections.abc import Callable
from pathlib import Path
from typing import Any

from trainer_agent import wire
from trainer_agent.config import AgentConfig, websocket_url
from trainer_agent.recorder import Columns, Recorder, row_count
from trainer_agent.spool import Spool

log = logging.getLogger("trainer_agent")

Batch = dict[str, Any]
Connect = Callable[..., Any]
Post = Callable[..., Any]
SECTIONS = ("steps", "metrics", "epochs", "device", "host", "pipeline")
HTTP_CHUNK_BYTES = 4 * 2**20
DRAIN_ANNOUNCE_AFTER_S = 2.0


def _default_connect(url: str, **kwargs: Any) -> Any:
    from websockets.sync.client import connect

    # Entering the connection is the supported way to use it directly (websockets >= 17.1
    # warns otherwise); the sender closes it explicitly.
    return connect(url, **kwargs).__enter__()


def _default_post(url: str, *, payload: dict[str, Any], headers: dict[str, str], timeout: float):
    import httpx

    headers = {**headers, "Content-Type": "application/json"}
    return httpx.post(url, content=wire.dumps(payload), headers=headers, timeout=timeout)


class Backoff:
    """Capped exponential backoff with full jitter."""

    def __init__(self, initial_s: float = 0.5, max_s: float = 30.0) -> None:
        self._initial_s = initial_s
        self._max_s = max_s
        self._attempt = 0

    def next_delay_s(self) -> float:
        ceiling = min(self._max_s, self._initial_s * 2**self._attempt)
        self._attempt += 1
        return random.uniform(ceiling / 2, ceiling)

    def reset(self) -> None:
        self._attempt = 0


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


def _handshake_refused(error: Exception) -> bool:
    """The server (or a proxy) answered HTTP but refused the WebSocket upgrade."""
    return type(error).__name__ in ("InvalidStatus", "InvalidStatusCode", "InvalidUpgrade")


UNREACHABLE_ERRNOS = {
    errno.ECONNREFUSED, errno.EHOSTUNREACH, errno.ENETUNREACH, errno.EHOSTDOWN,
    errno.ENETDOWN, errno.EADDRNOTAVAIL,
}  # fmt: skip


def is_slow(error: BaseException) -> bool:
    """A timeout: the server (or the network) did not answer in time, rather than refusing.

    Connection refused, no route and name lookup failures mean the server is unreachable.
    """
    if isinstance(error, TimeoutError) or "Timeout" in type(error).__name__:
        return True
    cause: BaseException | None = error
    while cause is not None:  # httpx wraps the socket error
        if (
            isinstance(cause, socket.gaierror)
            or getattr(cause, "errno", None) in UNREACHABLE_ERRNOS
        ):
            return False
        cause = cause.__cause__ or cause.__context__
    return False


class DrainCapReached(TimeoutError):
    """The drain at the run's end ran out of time while the server was still answering."""


class Sender:
    def __init__(
        self,
        *,
        config: AgentConfig,
        hello: dict[str, Any],
        buffer: Recorder,
        connect: Connect = _default_connect,
        post: Post = _default_post,
    ) -> None:
        self._config = config
        self._hello = hello
        self._buffer = buffer
        self._connect = connect
        self._post = post
        self._url = websocket_url(config.server, "/api/v1/agent")
        self._stop = threading.Event()
        self._abandon = threading.Event()
        # While draining at the end, no network wait may outlast this.
        self._flush_deadline = float("inf")
        self._last_error: BaseException | None = None
        self._drain_started: float | None = None
        self._drain_announced = False
        self._thread = threading.Thread(target=self._run, name="stoker-sender", daemon=True)
        self._pending: deque[Batch] = deque()
        self._pending_rows = 0
        self._next_seq = 1
        self._ws: Any = None
        self._welcomed_once = False
        self._backoff = Backoff()
        self._next_connect_at = 0.0
        self._warned_unreachable = False
        self._end_status = "finished"
        self._use_http = config.transport == "http"
        self._spool = (
            Spool(
                config.spool_dir / hello["run_key"],
                max_bytes=config.spool_max_bytes,
                server=config.server,
            )
            if config.spool_dir is not None
            else None
        )
        self._spooled_steps = 0  # step rows in this run's spool, for the end's count
        self._spool_dropped = 0
        # Listing the spool directory every flush costs more than the rest of a flush: it is
        # listed only while it may hold batches (at start, and after an outage).
        self._spool_may_hold_batches = self._spool is not None
        self._warned_spool_error = False
        self._pending_dropped = 0
        self._reported_counters: dict[str, int] | None = None
        self.run_id: int | None = None
        self.spooled_rows = 0
        self.rejected_rows = 0
        self.acked_batches = 0
        self.unsent_steps = 0  # steps left in the spool when the run ended
        self.connected = threading.Event()
        # Called (on the sender thread) with each server command, e.g. set_interval.
        self.on_command: Callable[[dict[str, Any]], None] | None = None
        # A browser watches the run: send every `watched_flush_interval_s`, not every
        # `flush_interval_s`. Read by the training thread too (a plain bool).
        self.watched = False
        # Called on the sender thread before the first connection (e.g. to fill in the hello's
        # environment), and before the final flush (e.g. to take the sampler's last reading).
        self.before_connect: Callable[[dict[str, Any]], None] | None = None
        self.before_final_flush: Callable[[], None] | None = None

    def start(self) -> None:
        self._thread.start()

    def close(
        self, status: str = "finished", timeout_s: float | None = None, *, wait: bool = True
    ) -> None:
        """End the run with `status`: drain what is left and tell the server.

        With `wait`, return once that is done (at most `timeout_s`, by default
        `drain_bound_s()`); without, at once while the sender thread drains in the background
        (`join` waits for it).
        """
        self._end_status = status
        self._stop.set()
        if wait:
            self.join(timeout_s)

    def drain_bound_s(self) -> float:
        """The longest the end of a run can take: the drain, then one wait for the end's ack."""
        return self._config.drain_timeout_s + self._config.ack_timeout_s + 1.0

    def join(self, timeout_s: float | None = None) -> bool:
        """Wait for the sender thread to finish; True when it did."""
        if self._thread.ident is None:
            return True
        self._thread.join(self.drain_bound_s() if timeout_s is None else timeout_s)
        return not self._thread.is_alive()

    def abandon(self) -> None:
        """Stop draining now (the user interrupted the exit): what is left goes to the spool.

        Closing the socket from here wakes the sender thread out of its wait for an ack.
        """
        self._abandon.set()
        self._flush_deadline = time.monotonic()
        ws = self._ws
        if ws is not None:
            with contextlib.suppress(Exception):
                ws.close()

    @property
    def done(self) -> bool:
        return self._stop.is_set() and not self._thread.is_alive()

    @property
    def dropped_rows(self) -> int:
        return self._buffer.dropped + self._pending_dropped + self._spool_dropped

    @property
    def pending_rows(self) -> int:
        return self._pending_rows + len(self._buffer)

    def counters(self) -> dict[str, int]:
        return {"dropped_rows": self.dropped_rows, "spooled_rows": self.spooled_rows}

    # --- the loop -------------------------------------------------------------------------
    def _run(self) -> None:
        try:
            if self.before_connect is not None:
                try:
                    self.before_connect(self._hello)
                except Exception:
                    log.debug("could not complete the hello", exc_info=True)
            while not self._stop.is_set():
                self._cycle()
                self._stop.wait(self.flush_interval_s)
            if self.before_final_flush is not None:
                self.before_final_flush()
            self._final_flush()
        except Exception:
            log.exception("Stoker sender failed; training continues without monitoring")
        finally:
            self._disconnect()
            if self._spool is not None:
                self._spool.release()

    def _cycle(self, *, force_connect: bool = False) -> bool:
        self._collect()
        if self._deliver(force=force_connect):
            return True
        self._spool_pending()
        return False

    def _final_flush(self) -> None:
        """Deliver everything and end the run; give up only at the drain cap, when the server
        stops acknowledging for `ack_timeout_s`, or when it cannot be reached (not for long
        when the spool keeps the records)."""
        started = time.monotonic()
        cap = started + self._config.drain_timeout_s
        reach_for_s = self._config.close_timeout_s
        if self._spool is not None:
            reach_for_s = min(reach_for_s, 2.0)
        self._flush_deadline = cap
        self._drain_started = started
        last_progress = started
        while not self._abandon.is_set():
            acked = self.acked_batches
            self._last_error = None
            if self._cycle(force_connect=True) and self._end_run():
                return
            now = time.monotonic()
            if self.acked_batches > acked:
                last_progress = now
            if now >= cap or self._abandon.is_set():
                break
            if self._last_error is not None and not is_slow(self._last_error):
                if now - started >= reach_for_s:  # refused, no route: it is not coming back now
                    break
            elif now - last_progress >= self._config.ack_timeout_s:  # connected, no acks
                break
            self._announce_slow_drain()
            if self._ws is None:
                time.sleep(min(0.2, max(0.0, cap - now)))
        self._leave_the_rest()

    def _announce_slow_drain(self) -> None:
        """One line when the run's end takes over 2 s: the user sees why the process waits."""
        if self._drain_started is None or self._drain_announced:
            return
        now = time.monotonic()
        if now - self._drain_started < DRAIN_ANNOUNCE_AFTER_S:
            return
        self._drain_announced = True
        log.warning(
            "Stoker: sending this run's last records to %s (%d batches acknowledged so far, "
            "%d records still to send); waiting up to %.0f s more while it keeps acknowledging",
            self._config.server, self.acked_batches, self.pending_rows, self._flush_deadline - now,
        )  # fmt: skip

    def _end_run(self) -> bool:
        """Send the end (everything is delivered); True once the server acknowledged it."""
        try:
            self._send_end()
        except Exception as error:
            log.debug("end failed: %s", error)
            self._last_error = error
            self._disconnect()
            return False
        self._discard_delivered_spool()
        return True

    def _leave_the_rest(self) -> None:
        """Spool what is left, record the run's end there, tell the server how many steps are
        still to come when it is answering, and say what happened."""
        self._spool_pending(force=True)
        error = self._last_error
        if self._spool is None:
            if self.pending_rows:
                log.warning(
                    "Stoker: %d records could not be delivered to %s before exit (%s)",
                    self.pending_rows, self._config.server, self._describe(error),
                )  # fmt: skip
            return
        try:
            self._spool.write_end(
                self._hello, self._end_status, self.counters(), next_seq=self._next_seq
            )
        except OSError as error_writing:
            log.warning("Stoker: cannot record the run's end in the spool (%s)", error_writing)
        self.unsent_steps = self._spooled_steps
        told = self._tell_unsent(error)
        if told and not self._spool.batch_paths():
            self._discard_delivered_spool()  # only the end was late: nothing is left
            return
        dropped = (
            f" {self.dropped_rows} records were dropped (spool full or disk full)."
            if self.dropped_rows
            else ""
        )
        directory = self._spool.directory
        if error is not None and is_slow(error):
            log.warning(
                "Stoker: the server at %s is up but busy (%s): %d batches were acknowledged "
                "before the %.0f s limit. The %d steps still to send are kept in %s%s and are "
                "sent by the next Stoker agent that starts on this machine with this spool "
                "directory, or now with: stoker upload %s.%s",
                self._config.server, self._describe(error), self.acked_batches,
                self._config.drain_timeout_s, self.unsent_steps, directory,
                " (the server shows the run as finished with them still to upload)" if told else "",
                directory, dropped,
            )  # fmt: skip
        else:
            log.warning(
                "Stoker: the server at %s is unreachable (%s); this run's records are kept in "
                "%s and are sent by the next Stoker agent that starts on this machine with "
                "this spool directory, or now with: stoker upload %s.%s",
                self._config.server, self._describe(error), directory, directory, dropped,
            )  # fmt: skip

    def _tell_unsent(self, error: BaseException | None) -> bool:
        """End the run on a server that is up but behind, with the count of steps it still
        lacks, so that it shows the run as ended (not running, then interrupted)."""
        if self._abandon.is_set() or (error is not None and not is_slow(error)):
            return False
        self._flush_deadline = time.monotonic() + self._config.ack_timeout_s
        try:
            if not self._use_http and self._ws is None and not self._ensure_connected(force=True):
                return False
            self._send_end(unsent_steps=self.unsent_steps)
        except Exception as failure:
            log.debug("could not end the run with its unsent count: %s", failure)
            return False
        return True

    def _describe(self, error: BaseException | None) -> str:
        if error is None:
            return "no answer"
        if isinstance(error, DrainCapReached):
            return f"still acknowledging when the {self._config.drain_timeout_s:.0f} s limit came"
        if is_slow(error):
            return f"no answer within {self._config.ack_timeout_s:.0f} s"
        return str(error) or type(error).__name__

    # --- batching -------------------------------------------------------------------------
    def _collect(self) -> None:
        sections = self._buffer.drain()
        self._drop_oldest_beyond_cap()
        counters = self.counters()
        if not sections and counters == self._reported_counters:
            return
        for chunk in split_sections(sections, self._config.max_batch_rows) or [{}]:
            batch: Batch = {"type": "batch", "seq": self._next_seq, **chunk, "agent": counters}
            self._pending.append(batch)
            self._next_seq += 1
            self._pending_rows += batch_rows(batch)
        self._reported_counters = counters

    def _drop_oldest_beyond_cap(self) -> None:
        while self._pending_rows > self._config.max_pending_rows and self._pending:
            rows = batch_rows(self._pending.popleft())
            self._pending_rows -= rows
            self._pending_dropped += rows

    def _spool_pending(self, *, force: bool = False) -> None:
        """Move unsent batches to disk, oldest first (only while the server is unreachable)."""
        if self._spool is None or (not force and not self._warned_unreachable):
            return
        while self._pending:
            batch = self._pending.popleft()
            rows = batch_rows(batch)
            self._pending_rows -= rows
            try:
                stored = self._spool.add(self._hello, batch)
            except OSError as error:
                if not self._warned_spool_error:
                    self._warned_spool_error = True
                    log.warning(
                        "Stoker: cannot write the spool in %s (%s); records that do not fit "
                        "are dropped and counted",
                        self._spool.directory,
                        error,
                    )
                stored = False
            if stored:
                self.spooled_rows += rows
                self._spooled_steps += row_count(batch.get("steps") or {})
                self._spool_may_hold_batches = True
            else:
                self._spool_dropped += rows

    # --- delivery -------------------------------------------------------------------------
    def _deliver(self, *, force: bool) -> bool:
        """Send the spool, then memory, in seq order; False when the server is unreachable."""
        if not self._use_http:
            if self._ensure_connected(force=force):
                try:
                    self._read_commands()
                    self._send_spooled_ws()
                    self._send_pending_ws()
                    return True
                except DrainCapReached as error:  # still connected and answering: keep it
                    self._last_error = error
                    return False
                except Exception as error:
                    log.debug("send failed: %s", error)
                    self._disconnect()
                    self._schedule_reconnect(error)
                    return False
            if not self._use_http:  # a refused upgrade switches to HTTP right away
                return False
        if not force and time.monotonic() < self._next_connect_at:
            return False
        try:
            self._send_http()
        except Exception as error:
            self._schedule_reconnect(error)
            return False
        self._on_reachable()
        return True

    def _headers(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self._config.token}"} if self._config.token else {}

    def _ensure_connected(self, *, force: bool) -> bool:
        if self._ws is not None:
            return True
        if not force and time.monotonic() < self._next_connect_at:
            return False
        flush_left_s = max(0.1, self._flush_deadline - time.monotonic())
        try:
            ws = self._connect(
                self._url,
                open_timeout=min(self._config.connect_timeout_s, flush_left_s),
                additional_headers=self._headers(),
                max_size=None,
            )
            ws.send(wire.dumps_text(self._hello))
            welcome = wire.loads(ws.recv(timeout=min(self._config.ack_timeout_s, flush_left_s)))
            if welcome.get("type") != "welcome":
                ws.close()
                raise ConnectionError(f"server refused the run: {welcome}")
        except Exception as error:
            if _handshake_refused(error):
                log.warning(
                    "Stoker: %s refused the WebSocket upgrade (%s); sending over HTTP POST",
                    self._config.server,
                    error,
                )
                self._use_http = True
                return False
            self._schedule_reconnect(error)
            return False
        self._ws = ws
        self._on_welcome(welcome)
        self.connected.set()
        self._on_reachable()
        return True

    def _on_reachable(self) -> None:
        self._backoff.reset()
        if self._warned_unreachable:
            log.warning("Stoker: reconnected to %s; sending buffered data", self._config.server)
            self._warned_unreachable = False

    def _on_welcome(self, welcome: dict[str, Any]) -> None:
        self.run_id = welcome["run_id"]
        last_seq = int(welcome.get("last_seq", 0))
        if not self._welcomed_once:
            self._welcomed_once = True
            if last_seq and not (self._spool and self._spool.batch_paths()):
                # A new process resuming a run: continue numbering after what the server holds.
                for offset, batch in enumerate(self._pending):
                    batch["seq"] = last_seq + 1 + offset
                self._next_seq = last_seq + 1 + len(self._pending)
            return
        while self._pending and self._pending[0]["seq"] <= last_seq:
            self._pending_rows -= batch_rows(self._pending.popleft())

    def _schedule_reconnect(self, error: Exception) -> None:
        self._last_error = error
        delay = self._backoff.next_delay_s()
        self._next_connect_at = time.monotonic() + delay
        self.connected.clear()
        if self._warned_unreachable:
            return
        self._warned_unreachable = True
        if self._flush_deadline != float("inf"):
            return  # the run is ending: its end says what happened, once
        if is_slow(error):
            log.warning(
                "Stoker: the server at %s is not answering in time (%s); it is busy or the "
                "network is slow. Training continues; records are kept and sent as it catches up",
                self._config.server, self._describe(error),
            )  # fmt: skip
        else:
            log.warning(
                "Stoker: cannot reach the server at %s (%s); training continues, "
                "records are kept and sent when it is back",
                self._config.server, error,
            )  # fmt: skip

    def _spooled_paths(self, spool: Spool) -> list[Path]:
        if not self._spool_may_hold_batches:
            return []
        paths = spool.batch_paths()
        self._spool_may_hold_batches = bool(paths)
        return paths

    def _send_spooled_ws(self) -> None:
        if self._spool is None:
            return
        for path in self._spooled_paths(self._spool):
            batch = self._spool.load(path)
            self._send_one_ws(batch)
            self._spool.remove(path)
            self._spooled_steps -= row_count(batch.get("steps") or {})

    def _send_pending_ws(self) -> None:
        while self._pending:
            batch = self._pending[0]
            self._send_one_ws(batch)
            self._pending.popleft()
            self._pending_rows -= batch_rows(batch)

    def _send_one_ws(self, batch: Batch) -> None:
        self._ws.send(wire.dumps_text(batch))
        reply = self._await_reply(lambda m, seq=batch["seq"]: m.get("seq") == seq)
        self._count_reply(batch, reply.get("type") == "error", reply)

    def _count_reply(self, batch: Batch, refused: bool, reply: Any) -> None:
        if refused:
            self.rejected_rows += batch_rows(batch)
            log.warning("Stoker: the server rejected batch %s: %s", batch["seq"], reply)
        else:
            self.acked_batches += 1
            self._announce_slow_drain()

    def _send_http(self) -> None:
        """POST the spool and then memory to `/api/v1/ingest`, in chunks."""
        if self._spool is not None:
            paths = self._spooled_paths(self._spool)
            for chunk in http_chunks(paths, lambda p: p.stat().st_size):
                batches = [self._spool.load(p) for p in chunk]
                self._post_batches(batches)
                for path in chunk:
                    self._spool.remove(path)
                self._spooled_steps -= sum(row_count(b.get("steps") or {}) for b in batches)
        for chunk in http_chunks(list(self._pending), lambda b: len(wire.dumps(b))):
            self._post_batches(chunk)
            for batch in chunk:
                self._pending.popleft()
                self._pending_rows -= batch_rows(batch)

    def _post_batches(self, batches: list[Batch], end: dict[str, Any] | None = None) -> None:
        payload: dict[str, Any] = {"hello": self._hello, "batches": batches}
        if end is not None:
            payload["end"] = end
        response = self._post(
            self._config.server + "/api/v1/ingest",
            payload=payload,
            headers=self._headers(),
            timeout=self._config.ack_timeout_s,
        )
        if response.status_code == 422:  # refused as invalid: retrying cannot help
            for batch in batches:
                self._count_reply(batch, True, response.text[:500])
            return
        response.raise_for_status()
        body = response.json()
        self.run_id = body.get("run_id", self.run_id)
        self.acked_batches += len(batches)
        self._announce_slow_drain()

    def _discard_delivered_spool(self) -> None:
        """The server holds everything, the end included: leave no run behind on disk, where
        `stoker upload` would later take it for a run that never ended."""
        if self._spool is None or self._spool.batch_paths():
            return
        self._spool.discard()

    def _send_end(self, unsent_steps: int = 0) -> None:
        end: dict[str, Any] = {"type": "end", "status": self._end_status}
        if unsent_steps:  # only then: servers before this field refuse unknown fields
            end["unsent_steps"] = unsent_steps
        if self._use_http:
            self._post_batches([], end=end)
            return
        self._ws.send(wire.dumps_text(end))
        self._await_reply(lambda m: bool(m.get("end")))

    def _await_reply(self, matches: Callable[[dict[str, Any]], bool]) -> dict[str, Any]:
        ack_deadline = time.monotonic() + self._config.ack_timeout_s
        deadline = min(ack_deadline, self._flush_deadline)
        while True:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                if deadline < ack_deadline:
                    raise DrainCapReached("the drain's time is up")
                raise TimeoutError("no acknowledgement from the server")
            try:
                message = wire.loads(self._ws.recv(timeout=remaining))
            except TimeoutError:
                if deadline < ack_deadline:
                    raise DrainCapReached("the drain's time is up") from None
                raise
            if message.get("type") == "command":
                self._handle_command(message)
                continue
            if matches(message):
                return message
            if message.get("type") == "error" and "seq" not in message:
                raise ConnectionError(f"server error: {message.get('message')}")

    def _read_commands(self) -> None:
        """Take the commands the server sent since the last send (nothing is in flight here,
        so whatever waits on the socket is a command); never waits."""
        assert self._ws is not None
        while True:
            try:
                message = wire.loads(self._ws.recv(timeout=0))
            except TimeoutError:
                return
            if message.get("type") == "command":
                self._handle_command(message)

    @property
    def flush_interval_s(self) -> float:
        config = self._config
        return config.watched_flush_interval_s if self.watched else config.flush_interval_s

    def _handle_command(self, command: dict[str, Any]) -> None:
        if command.get("name") == "watch":  # a browser started or stopped watching the run
            self.watched = bool(command.get("watched"))
            return
        if self.on_command is None:
            return
        try:
            self.on_command(command)
        except Exception:
            log.debug("command %s failed", command, exc_info=True)

    def _disconnect(self) -> None:
        ws, self._ws = self._ws, None
        self.connected.clear()
        if ws is not None:
            with contextlib.suppress(Exception):
                ws.close()


def http_chunks(items: list[Any], size_of: Callable[[Any], int]) -> list[list[Any]]:
    """Consecutive groups of at most ~HTTP_CHUNK_BYTES (and 1000 items), each non-empty: what
    one `POST /api/v1/ingest` carries."""
    chunks: list[list[Any]] = []
    current: list[Any] = []
    current_bytes = 0
    for item in items:
        size = size_of(item)
        if current and (current_bytes + size > HTTP_CHUNK_BYTES or len(current) >= 1000):
            chunks.append(current)
            current, current_bytes = [], 0
        current.append(item)
        current_bytes += size
    if current:
        chunks.append(current)
    return chunks
