"""The one background thread that talks to the server.

It wakes every `flush_interval_s`, turns what the training thread recorded into
seq-numbered batches, sends them over the agent WebSocket and forgets a batch only once
the server acknowledged it (after its commit). When the server is unreachable it keeps
the batches, retries with capped, jittered backoff, and never blocks or raises into the
training thread.
"""

import contextlib
import json
import logging
import random
import threading
import time
from collections import deque
from collections.abc import Callable
from typing import Any

from trainer_agent.config import AgentConfig, websocket_url
from trainer_agent.recorder import Columns, Recorder, row_count

log = logging.getLogger("trainer_agent")

Batch = dict[str, Any]
Connect = Callable[..., Any]


def _default_connect(url: str, **kwargs: Any) -> Any:
    from websockets.sync.client import connect

    # Entering the connection is the supported way to use it directly (websockets >= 17.1
    # warns otherwise); the sender closes it explicitly.
    return connect(url, **kwargs).__enter__()


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
    chunks = []
    for start in range(0, longest, max_rows):
        chunk = {}
        for name, columns in sections.items():
            if start < row_count(columns):
                chunk[name] = {k: v[start : start + max_rows] for k, v in columns.items()}
        chunks.append(chunk)
    return chunks


def batch_rows(batch: Batch) -> int:
    return sum(
        row_count(batch[name]) for name in ("steps", "metrics", "device", "host") if name in batch
    )


class Sender:
    def __init__(
        self,
        *,
        config: AgentConfig,
        hello: dict[str, Any],
        buffer: Recorder,
        connect: Connect = _default_connect,
    ) -> None:
        self._config = config
        self._hello = hello
        self._buffer = buffer
        self._connect = connect
        self._url = websocket_url(config.server, "/api/v1/agent")
        self._stop = threading.Event()
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
        self.run_id: int | None = None
        self.dropped_rows = 0
        self._reported_dropped = 0
        self.rejected_rows = 0
        self.acked_batches = 0
        self.connected = threading.Event()

    def start(self) -> None:
        self._thread.start()

    def close(self, status: str = "finished", timeout_s: float | None = None) -> None:
        """Flush what is left, tell the server the run ended, and stop (bounded by the timeout)."""
        self._end_status = status
        self._stop.set()
        self._thread.join(self._config.close_timeout_s if timeout_s is None else timeout_s)

    @property
    def pending_rows(self) -> int:
        return self._pending_rows + len(self._buffer)

    def _run(self) -> None:
        try:
            while not self._stop.is_set():
                self._cycle()
                self._stop.wait(self._config.flush_interval_s)
            self._final_flush(time.monotonic() + self._config.close_timeout_s)
        except Exception:
            log.exception("Stoker sender failed; training continues without monitoring")
        finally:
            self._disconnect()

    def _cycle(self, *, force_connect: bool = False) -> bool:
        self._collect()
        if not self._ensure_connected(force=force_connect):
            return False
        try:
            self._send_pending()
            return True
        except Exception as error:
            log.debug("send failed: %s", error)
            self._disconnect()
            self._schedule_reconnect(error)
            return False

    def _final_flush(self, deadline: float) -> None:
        while time.monotonic() < deadline:
            if self._cycle(force_connect=True):
                try:
                    self._send_end()
                    return
                except Exception as error:
                    log.debug("end failed: %s", error)
                    self._disconnect()
            time.sleep(min(0.2, max(0.0, deadline - time.monotonic())))
        lost = self.pending_rows
        if lost:
            log.warning(
                "Stoker: %d step records could not be delivered to %s before exit",
                lost,
                self._config.server,
            )

    def _collect(self) -> None:
        sections = self._buffer.drain()
        self.dropped_rows = self._buffer.dropped + self._dropped_from_pending()
        if not sections and self._reported_dropped == self.dropped_rows:
            return
        chunks = split_sections(sections, self._config.max_batch_rows) or [{}]
        for chunk in chunks:
            batch: Batch = {"type": "batch", "seq": self._next_seq, **chunk}
            batch["agent"] = {"dropped_rows": self.dropped_rows, "spooled_rows": 0}
            self._pending.append(batch)
            self._next_seq += 1
            self._pending_rows += batch_rows(batch)
        self._reported_dropped = self.dropped_rows

    def _dropped_from_pending(self) -> int:
        dropped = getattr(self, "_pending_dropped", 0)
        while self._pending_rows > self._config.max_pending_rows and self._pending:
            oldest = self._pending.popleft()
            rows = batch_rows(oldest)
            self._pending_rows -= rows
            dropped += rows
        self._pending_dropped = dropped
        return dropped

    def _ensure_connected(self, *, force: bool) -> bool:
        if self._ws is not None:
            return True
        if not force and time.monotonic() < self._next_connect_at:
            return False
        try:
            headers = {}
            if self._config.token:
                headers["Authorization"] = f"Bearer {self._config.token}"
            ws = self._connect(
                self._url,
                open_timeout=self._config.connect_timeout_s,
                additional_headers=headers,
                max_size=None,
            )
            ws.send(json.dumps(self._hello))
            welcome = json.loads(ws.recv(timeout=self._config.ack_timeout_s))
            if welcome.get("type") != "welcome":
                ws.close()
                raise ConnectionError(f"server refused the run: {welcome}")
        except Exception as error:
            self._schedule_reconnect(error)
            return False
        self._ws = ws
        self._on_welcome(welcome)
        self._backoff.reset()
        self.connected.set()
        if self._warned_unreachable:
            log.warning("Stoker: reconnected to %s; sending buffered data", self._config.server)
            self._warned_unreachable = False
        return True

    def _on_welcome(self, welcome: dict[str, Any]) -> None:
        self.run_id = welcome["run_id"]
        last_seq = int(welcome.get("last_seq", 0))
        if not self._welcomed_once:
            # A new process resuming a run: continue numbering after what the server holds.
            self._welcomed_once = True
            for offset, batch in enumerate(self._pending):
                batch["seq"] = last_seq + 1 + offset
            self._next_seq = last_seq + 1 + len(self._pending)
            return
        while self._pending and self._pending[0]["seq"] <= last_seq:
            self._pending_rows -= batch_rows(self._pending.popleft())

    def _schedule_reconnect(self, error: Exception) -> None:
        delay = self._backoff.next_delay_s()
        self._next_connect_at = time.monotonic() + delay
        self.connected.clear()
        if not self._warned_unreachable:
            self._warned_unreachable = True
            log.warning(
                "Stoker: cannot reach the server at %s (%s); training continues, "
                "records are kept and sent when it is back",
                self._config.server,
                error,
            )

    def _send_pending(self) -> None:
        while self._pending:
            batch = self._pending[0]
            self._ws.send(json.dumps(batch))
            reply = self._await_reply(lambda m, seq=batch["seq"]: m.get("seq") == seq)
            self._pending.popleft()
            rows = batch_rows(batch)
            self._pending_rows -= rows
            if reply.get("type") == "error":
                self.rejected_rows += rows
                log.warning("Stoker: the server rejected batch %s: %s", batch["seq"], reply)
            else:
                self.acked_batches += 1

    def _send_end(self) -> None:
        self._ws.send(json.dumps({"type": "end", "status": self._end_status}))
        self._await_reply(lambda m: bool(m.get("end")))

    def _await_reply(self, matches: Callable[[dict[str, Any]], bool]) -> dict[str, Any]:
        deadline = time.monotonic() + self._config.ack_timeout_s
        while True:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise TimeoutError("no acknowledgement from the server")
            message = json.loads(self._ws.recv(timeout=remaining))
            if matches(message):
                return message
            if message.get("type") == "error" and "seq" not in message:
                raise ConnectionError(f"server error: {message.get('message')}")

    def _disconnect(self) -> None:
        ws, self._ws = self._ws, None
        self.connected.clear()
        if ws is not None:
            with contextlib.suppress(Exception):
                ws.close()
