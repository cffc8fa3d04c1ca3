"""The one background thread that talks to the server.

It wakes every `flush_interval_s` (1 s; 50 ms while a browser watches the run, which the
server says with a `watch` command), has the outbox turn what the recorder holds into
batches, and delivers them over the transport: the agent WebSocket, or HTTP POST when the
upgrade is refused or `transport="http"`. While the server is unreachable it moves unsent
batches to the disk spool and tries again with capped, jittered backoff. It never blocks or
raises into the training thread.

When the run ends it drains: it keeps sending for as long as the server keeps acknowledging
(up to `drain_timeout_s`), and gives up early only when the server stops answering or cannot
be reached. What is left then stays in the spool, the run's end tells the server how many
steps are still to come, and the next agent that starts with this spool directory sends them
(upload.start_background_upload).
"""

import logging
import os
import queue
import shlex
import threading
from collections.abc import Callable
from enum import Enum, auto
from typing import Any

from trainer_agent.capture.recorder import Recorder
from trainer_agent.config import AgentConfig
from trainer_agent.delivery.backoff import Reconnect
from trainer_agent.delivery.classify import Post, shared_http_post
from trainer_agent.delivery.clock import SYSTEM_CLOCK, Clock
from trainer_agent.delivery.http import HttpTransport
from trainer_agent.delivery.outbox import Outbox, batch_rows
from trainer_agent.delivery.spool import Spool, run_spool_directory
from trainer_agent.delivery.transport import (
    Batch,
    DrainCapReached,
    HandshakeRefused,
    Misconfigured,
    TokenRefused,
    Transport,
    Welcome,
    is_slow,
)
from trainer_agent.delivery.websocket import Connect, WebSocketTransport, default_connect

log = logging.getLogger("trainer_agent")

DRAIN_ANNOUNCE_AFTER_S = 2.0
NO_DEADLINE = float("inf")


class Phase(Enum):
    """Where a sender is in its run. The sender thread moves it on, but for `start`."""

    NEW = auto()  # built; not started
    SENDING = auto()  # the run is live: a flush every interval
    DRAINING = auto()  # the run ended (`close`): what is left is sent, as its `Drain` allows
    DONE = auto()  # delivered, or left in the spool; the run's end said what happened


class Drain:
    """When the drain at the run's end stops: at the cap; when the server has not been
    reachable for `reach_for_s` (refused, no route: it is not coming back now); or when it is
    connected but has acknowledged nothing for `ack_timeout_s`."""

    def __init__(
        self, started: float, *, cap_s: float, reach_for_s: float, ack_timeout_s: float
    ) -> None:
        self.started = started
        self.cap = started + cap_s
        self._reach_for_s = reach_for_s
        self._ack_timeout_s = ack_timeout_s
        self._last_progress = started
        self.announced = False  # the one line saying the end takes a while was said

    def progressed(self, now: float) -> None:
        self._last_progress = now

    def should_stop(self, now: float, error: BaseException | None) -> bool:
        if now >= self.cap or isinstance(error, Misconfigured):
            return True  # (answering, but not taking records: waiting cannot help)
        if error is not None and not is_slow(error):
            return now - self.started >= self._reach_for_s
        return now - self._last_progress >= self._ack_timeout_s


class _Workers:
    """The daemon threads senders run on. One whose run is over waits a while for the next
    run's sender, so a script that fits many times starts no thread per fit: on a busy
    machine, starting one held the training thread for milliseconds."""

    IDLE_S = 30.0

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._idle: list[queue.SimpleQueue[Callable[[], None]]] = []

    def run(self, work: Callable[[], None]) -> None:
        with self._lock:
            inbox = self._idle.pop() if self._idle else None
        if inbox is None:
            inbox = queue.SimpleQueue()
            thread = threading.Thread(
                target=self._serve, args=(inbox,), name="stoker-sender", daemon=True
            )
            inbox.put(work)
            thread.start()
        else:
            inbox.put(work)

    def _serve(self, inbox: "queue.SimpleQueue[Callable[[], None]]") -> None:
        while True:
            try:
                work = inbox.get(timeout=self.IDLE_S)
            except queue.Empty:
                with self._lock:
                    if inbox in self._idle:
                        self._idle.remove(inbox)
                        return
                continue  # `run` took this worker just now: its work is in the inbox
            work()
            del work  # nothing of the run it sent (its session, the callback) outlives it here
            with self._lock:
                self._idle.append(inbox)

    def forget(self) -> None:
        """In a forked child: the parent's workers do not exist there."""
        self._lock = threading.Lock()
        self._idle = []


_workers = _Workers()
if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_workers.forget)


class Sender:
    """One run's delivery, on the sender thread: flushes while the run is live, the drain at
    its end, what is left to the spool, and what the user is told of each (see the module).

    One class, past 300 lines, because its phases (`Phase`) share one transport, outbox and
    reconnect state, and what the end says depends on what the live flushes met; apart, each
    part would reach into the others' state. The pieces with no state of the run's are apart:
    `Drain`, `Outbox`, `Reconnect`, the transports, `_Workers`.
    """

    def __init__(
        self,
        *,
        config: AgentConfig,
        hello: dict[str, Any],
        buffer: Recorder,
        connect: Connect = default_connect,
        post: Post = shared_http_post,
        clock: Clock = SYSTEM_CLOCK,
        new_run: bool = False,
    ) -> None:
        self._config = config
        self._hello = hello
        self._phase = Phase.NEW
        # The server cannot hold records of this run yet (its key was made here) and no
        # connection was opened: a run that ends now is sent whole over HTTP, with no
        # welcome's last seq to read.
        self._unknown_to_server = new_run
        self._post = post
        self._clock = clock
        self._transport: Transport = (
            HttpTransport(config, hello, post=post)
            if config.transport == "http"
            else WebSocketTransport(
                config, hello, self._handle_command, connect=connect, clock=clock
            )
        )
        spool = (
            Spool(
                run_spool_directory(config.spool_dir, hello["run_key"], hello.get("rank", 0)),
                max_bytes=config.spool_max_bytes,
                total_max_bytes=config.spool_total_max_bytes,
                # Not a URL: recorded for no server, so no later agent tries to send it there.
                server=None if config.server_problem else config.server,
            )
            if config.spool_dir is not None
            else None
        )
        self._outbox = Outbox(
            buffer,
            hello,
            max_batch_rows=config.max_batch_rows,
            max_pending_rows=config.max_pending_rows,
            spool=spool,
        )
        self._reconnect = Reconnect(clock)
        # Asked of the sender thread by the training side: end the run; stop draining now.
        self._stop = threading.Event()
        self._abandon = threading.Event()
        # While draining at the end, no network wait may outlast this.
        self._deadline = NO_DEADLINE
        self._drain: Drain | None = None  # while draining
        self._last_error: BaseException | None = None
        self._said_misconfigured = ""
        # Said once HTTP POST delivers (the upgrade's refusal may mean no Stoker is there).
        self._fallback_note: str | None = None
        self._end_status = "finished"
        self._finished = threading.Event()  # set as the phase becomes DONE
        self.rejected_rows = 0
        self.acked_batches = 0
        self.unsent_steps = 0  # steps left in the spool when the run ended
        self.connected = threading.Event()
        # Called (on the sender thread) with each server command, e.g. profile.
        self.on_command: Callable[[dict[str, Any]], None] | None = None
        # A browser watches the run: send every `watched_flush_interval_s`, not every
        # `flush_interval_s`. Read by the training thread too (a plain bool).
        self.watched = False
        # Called on the sender thread before the first connection (e.g. to fill in the hello's
        # environment), and before the final flush (e.g. to take the sampler's last reading).
        self.before_connect: Callable[[dict[str, Any]], None] | None = None
        self.before_final_flush: Callable[[], None] | None = None
        # Called on the sender thread before each collection of the recorder's rows: the
        # steps still held apart (a fit's stamped calls, to be matched to their stamps:
        # trainer_agent/capture/fit_stamps.py) are recorded first.
        self.before_collect: Callable[[], None] | None = None
        # Called on the sender thread at its first flush (work of the run's start that need
        # not hold up the training thread: the spool's runs of earlier processes).
        self.before_first_flush: Callable[[], Any] | None = None
        # Called on the sender thread once its work is done (the process's registry of
        # senders still sending forgets it).
        self.when_done: Callable[[], None] | None = None

    # --- the training side ----------------------------------------------------------------
    def start(self) -> None:
        self._phase = Phase.SENDING
        _workers.run(self._run)

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
        """Wait for the sender's work to finish; True when it did."""
        if self._phase is Phase.NEW:
            return True
        return self._finished.wait(self.drain_bound_s() if timeout_s is None else timeout_s)

    def abandon(self) -> None:
        """Stop draining now (the user interrupted the exit): what is left goes to the spool.

        Closing the transport from here wakes the sender thread out of its wait for an ack.
        """
        self._abandon.set()
        self._deadline = self._clock.monotonic()
        self._transport.close()

    @property
    def phase(self) -> Phase:
        return self._phase

    @property
    def done(self) -> bool:
        """The run was ended and nothing of it is being sent any more."""
        return self._stop.is_set() and (self._phase is Phase.NEW or self._finished.is_set())

    @property
    def run_id(self) -> int | None:
        return self._transport.run_id

    @property
    def transport_name(self) -> str:
        return self._transport.name

    @property
    def flush_interval_s(self) -> float:
        config = self._config
        return config.watched_flush_interval_s if self.watched else config.flush_interval_s

    @property
    def dropped_rows(self) -> int:
        return self._outbox.dropped_rows

    @property
    def pending_rows(self) -> int:
        return self._outbox.pending_rows

    @property
    def spooled_rows(self) -> int:
        return self._outbox.spooled_rows

    def counters(self) -> dict[str, int]:
        return self._outbox.counters()

    # --- the loop -------------------------------------------------------------------------
    def _run(self) -> None:
        try:
            # Nothing happens before the first flush: a fit's start competes with no
            # connection, and a run that ends sooner is sent whole in one go.
            self._clock.wait(self._stop, self.flush_interval_s)
            if self.before_first_flush is not None:
                try:
                    self.before_first_flush()
                except Exception:
                    log.debug("could not start the run's background work", exc_info=True)
            if self.before_connect is not None:
                try:
                    self.before_connect(self._hello)
                except Exception:
                    log.debug("could not complete the hello", exc_info=True)
            while not self._stop.is_set():
                self.cycle()
                self._clock.wait(self._stop, self.flush_interval_s)
            self._phase = Phase.DRAINING
            if self.before_final_flush is not None:
                self.before_final_flush()
            self._final_flush()
        except Exception:
            log.exception("Stoker sender failed; training continues without monitoring")
        finally:
            try:
                self._disconnect()
                self._outbox.release()
            finally:
                self._phase = Phase.DONE
                self._finished.set()
                if self.when_done is not None:
                    self.when_done()

    def cycle(self, *, force_connect: bool = False) -> bool:
        """One flush: collect, deliver; spool when the server is unreachable. True when
        everything collected reached the server."""
        self._collect()
        if self._config.server_problem:  # not a URL (said when configured): only spool
            self._outbox.spool_pending()
            return False
        if self._deliver(force=force_connect):
            return True
        if self._reconnect.down:
            self._outbox.spool_pending()
        return False

    def _collect(self) -> None:
        before = self.before_collect
        if before is not None:
            try:
                before()
            except Exception:
                log.exception("Stoker could not resolve the steps' input wait")
        self._outbox.collect()

    def _final_flush(self) -> None:
        """Deliver everything and end the run; give up as `Drain` says (not for long when the
        server cannot be reached and the spool keeps the records)."""
        if self._config.server_problem:  # nowhere to send: spool the last records, say where
            self.cycle()
            self._leave_the_rest()
            return
        if self._unknown_to_server and self._transport.name == "websocket":
            # A short run (a fit per epoch, an RL loop's fit): one POST on the process's open
            # HTTP connection costs far less than a WebSocket of its own.
            self._transport = HttpTransport(self._config, self._hello, post=self._post)
        reach_for_s = self._config.close_timeout_s
        if self._outbox.spool is not None:
            reach_for_s = min(reach_for_s, 2.0)
        drain = Drain(
            self._clock.monotonic(),
            cap_s=self._config.drain_timeout_s,
            reach_for_s=reach_for_s,
            ack_timeout_s=self._config.ack_timeout_s,
        )
        self._drain = drain
        self._deadline = drain.cap
        while not self._abandon.is_set():
            acked = self.acked_batches
            self._last_error = None
            ended = self._deliver_with_end()
            if ended is None:
                ended = self.cycle(force_connect=True) and self._end_run()
            if ended:
                return
            now = self._clock.monotonic()
            if self.acked_batches > acked:
                drain.progressed(now)
            if self._abandon.is_set() or drain.should_stop(now, self._last_error):
                break
            self._announce_slow_drain()
            if not self._transport.is_open:
                self._clock.sleep(min(0.2, max(0.0, drain.cap - now)))
        self._leave_the_rest()

    def _announce_slow_drain(self) -> None:
        """One line when the run's end takes over 2 s: the user sees why the process waits."""
        drain = self._drain
        if drain is None or drain.announced:
            return
        now = self._clock.monotonic()
        if now - drain.started < DRAIN_ANNOUNCE_AFTER_S:
            return
        drain.announced = True
        log.warning(
            "Stoker: sending this run's last records to %s (%d batches acknowledged so far, "
            "%d records still to send); waiting up to %.0f s more while it keeps acknowledging",
            self._config.server, self.acked_batches, self.pending_rows, self._deadline - now,
        )  # fmt: skip

    def _deliver_with_end(self) -> bool | None:
        """Over HTTP, what is left and the run's end in one request (Outbox.deliver_with_end):
        True when both are stored, False when that failed, None when it does not apply."""
        transport = self._transport
        if not isinstance(transport, HttpTransport) or self._config.server_problem:
            return None
        self._collect()
        end: dict[str, Any] = {"type": "end", "status": self._end_status}
        try:
            ended = self._outbox.deliver_with_end(transport, end, self._count_outcome)
        except Exception as error:
            log.debug("send failed: %s", error)
            self._schedule_reconnect(error)
            if self._reconnect.down:
                self._outbox.spool_pending()
            return False
        if ended is None:
            return None
        self._on_reachable()
        if not ended:
            return self._end_run()  # the batches were refused: the end on its own
        self._outbox.discard_delivered_spool()
        return True

    def _end_run(self) -> bool:
        """Send the end (everything is delivered); True once the server acknowledged it."""
        try:
            self._send_end()
        except Exception as error:
            log.debug("end failed: %s", error)
            self._last_error = error
            self._disconnect()
            return False
        self._outbox.discard_delivered_spool()
        return True

    def _leave_the_rest(self) -> None:
        """Spool what is left, record the run's end there, tell the server how many steps are
        still to come when it is answering, and say what happened."""
        self._outbox.spool_pending()
        error = self._last_error
        spool = self._outbox.spool
        if spool is None:
            if self.pending_rows:
                log.warning(
                    "Stoker: %d records could not be delivered to %s before exit (%s)",
                    self.pending_rows, self._config.server, self._describe(error),
                )  # fmt: skip
            return
        self._outbox.write_end(self._end_status)
        self.unsent_steps = self._outbox.spooled_steps
        told = self._tell_unsent(error)
        if told and not self._outbox.spool_holds_batches():
            self._outbox.discard_delivered_spool()  # only the end was late: nothing is left
            return
        server = self._config.server
        later = (
            "and are sent by the next Stoker agent that starts on this machine with this spool "
            "directory, or now with the command below"
        )
        if self._config.server_problem or isinstance(error, Misconfigured):
            what = self._config.server_problem or str(error)
            fix = (
                "STOKER_AGENT_TOKEN set to the server's agent token (or add --token TOKEN)"
                if isinstance(error, TokenRefused)
                else "STOKER_SERVER set to your Stoker server's URL (or add --server URL)"
            )
            headline = (
                f"Stoker: this run's records were not sent: {what}. They are kept in the "
                f"spool; send them with the command below, with {fix}"
            )
        elif self._abandon.is_set():
            headline = (
                f"Stoker: the exit was interrupted before this run's records reached {server}; "
                f"they are kept in the spool {later}"
            )
        elif error is not None and is_slow(error):
            shown = " (the server shows the run as finished with them still to upload)"
            headline = (
                f"Stoker: the server at {server} is up but busy ({self._describe(error)}): "
                f"{self.acked_batches} batches were acknowledged before the "
                f"{self._config.drain_timeout_s:.0f} s limit. The {self.unsent_steps} steps "
                f"still to send are kept in the spool{shown if told else ''} {later}"
            )
        else:
            headline = (
                f"Stoker: the server at {server} is unreachable ({self._describe(error)}); "
                f"this run's records are kept in the spool {later}"
            )
        dropped = (
            f". {self.dropped_rows} records were dropped (spool full or disk full)"
            if self.dropped_rows
            else ""
        )
        # The command alone on its line, the path quoted for a shell where it must be and with
        # nothing after it: pasted as printed, it is what `stoker upload` takes.
        log.warning(
            "%s%s:\n    stoker upload %s", headline, dropped, shlex.quote(str(spool.directory))
        )

    def _tell_unsent(self, error: BaseException | None) -> bool:
        """End the run on a server that is up but behind, with the count of steps it still
        lacks, so that it shows the run as ended (not running, then interrupted)."""
        if self._config.server_problem or self._abandon.is_set():
            return False
        if error is not None and not is_slow(error):
            return False
        self._deadline = self._clock.monotonic() + self._config.ack_timeout_s
        try:
            if not self._transport.is_open and not self._open(force=True):
                return False
            self._send_end(unsent_steps=self.unsent_steps)
        except Exception as failure:
            log.debug("could not end the run with its unsent count: %s", failure)
            return False
        return True

    def _describe(self, error: BaseException | None) -> str:
        if self._config.server_problem:
            return self._config.server_problem
        if error is None:
            return "no answer"
        if isinstance(error, DrainCapReached):
            return f"still acknowledging when the {self._config.drain_timeout_s:.0f} s limit came"
        if is_slow(error):
            return f"no answer within {self._config.ack_timeout_s:.0f} s"
        return str(error) or type(error).__name__

    # --- delivery -------------------------------------------------------------------------
    def _deliver(self, *, force: bool) -> bool:
        """Open the transport if needed, then send the spool and memory in seq order; False
        when the server could not take them now."""
        if not self._transport.is_open and not self._open(force=force):
            return False
        try:
            self._transport.poll_commands()
            self._outbox.deliver(self._transport, self._deadline, self._count_outcome)
        except DrainCapReached as error:  # still connected and answering: keep it
            self._last_error = error
            return False
        except Exception as error:
            log.debug("send failed: %s", error)
            self._disconnect()
            self._schedule_reconnect(error)
            return False
        self._on_reachable()
        return True

    def _open(self, *, force: bool) -> bool:
        if not self._reconnect.may_try(force=force):
            return False
        try:
            welcome = self._transport.open(self._deadline)
        except HandshakeRefused as error:
            self._fallback_note = (
                f"Stoker: {self._config.server} refused the WebSocket upgrade ({error}); "
                "sending over HTTP POST"
            )
            self._transport = HttpTransport(
                self._config, self._hello, post=self._post, run_id=self._transport.run_id
            )
            return self._open(force=True)  # right away, over HTTP
        except Exception as error:
            self._schedule_reconnect(error)
            return False
        self._unknown_to_server = False
        if welcome is not None:
            self._on_welcome(welcome)
        return True

    def _on_welcome(self, welcome: Welcome) -> None:
        self._outbox.welcomed(welcome.last_seq)
        self.connected.set()
        self._on_reachable()

    def _on_reachable(self) -> None:
        if self._reconnect.succeeded():
            log.warning("Stoker: reconnected to %s; sending buffered data", self._config.server)

    def _schedule_reconnect(self, error: Exception) -> None:
        self._last_error = error
        self.connected.clear()
        if isinstance(error, Misconfigured):
            self._reconnect.failed()  # tried again with backoff: the setting may be fixed there
            self._say_misconfigured(error)
            return
        if not self._reconnect.failed():
            return  # said already
        if self._phase is Phase.DRAINING:
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

    def _say_misconfigured(self, error: Misconfigured) -> None:
        """The server URL answers but takes nothing: said at once (never as "unreachable"),
        and again only if what it answers changes. The run's end says it again with the path
        of what was kept."""
        self._fallback_note = None
        message = str(error)
        if message == self._said_misconfigured or self._phase is Phase.DRAINING:
            return
        self._said_misconfigured = message
        if not isinstance(error, TokenRefused):
            message += f": {self._server_fix()}"
        log.warning(
            "Stoker: %s. Training continues; records are kept%s until this is fixed",
            message, " in the spool" if self._outbox.spool is not None else " in memory",
        )  # fmt: skip

    def _server_fix(self) -> str:
        source = self._config.server_source
        if not source:
            return (
                "nothing set the server, so the default was used; another program listens "
                "there. Set STOKER_SERVER to the URL `stoker serve` prints"
            )
        return f"set {source} to the URL `stoker serve` prints"

    def _count_outcome(self, batch: Batch, refusal: str | None) -> None:
        if refusal is not None:
            self.rejected_rows += batch_rows(batch)
            log.warning("Stoker: the server rejected batch %s: %s", batch["seq"], refusal)
        else:
            if self._fallback_note is not None:
                log.warning("%s", self._fallback_note)
                self._fallback_note = None
            self.acked_batches += 1
            self._announce_slow_drain()

    def _send_end(self, unsent_steps: int = 0) -> None:
        end: dict[str, Any] = {"type": "end", "status": self._end_status}
        if unsent_steps:  # only then: servers before this field refuse unknown fields
            end["unsent_steps"] = unsent_steps
        self._transport.end(end, self._deadline)

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
        self._transport.close()
        self.connected.clear()
