"""The agent WebSocket (`/api/v1/agent`): hello and welcome, then each batch answered by its
ack (stop-and-wait), with the server's commands arriving in between."""

import contextlib
import functools
import logging
import os
from collections.abc import Callable
from typing import Any

from trainer_agent.config import AgentConfig, websocket_url
from trainer_agent.delivery import wire
from trainer_agent.delivery.clock import SYSTEM_CLOCK, Clock
from trainer_agent.delivery.transport import (
    Batch,
    DrainCapReached,
    HandshakeRefused,
    Item,
    Welcome,
    bearer,
)

Connect = Callable[..., Any]
DEFAULT_PING_TIMEOUT_S = 20.0
OnCommand = Callable[[dict[str, Any]], None]


class _DemotedLog(logging.LoggerAdapter):
    """websockets' own log lines, each at DEBUG. Its keepalive logs a ping that failed at
    ERROR with a traceback, which a training script without logging set up prints; the
    transport meets the same failure as a closed connection, and the sender tells the user
    once, in its words."""

    def log(self, level: int, msg: object, *args: Any, **kwargs: Any) -> None:
        super().log(logging.DEBUG, msg, *args, **kwargs)


WEBSOCKETS_LOG = _DemotedLog(logging.getLogger("trainer_agent.websockets"), {})


def default_connect(url: str, **kwargs: Any) -> Any:
    from websockets.sync.client import connect

    # Entering the connection is the supported way to use it directly (websockets >= 17.1
    # warns otherwise); the transport closes it explicitly.
    return connect(
        url, create_connection=_private_ping_connection(), logger=WEBSOCKETS_LOG, **kwargs
    ).__enter__()


@functools.cache
def _private_ping_connection() -> type:
    """websockets' client connection, its ping payloads drawn from `os.urandom`.

    websockets draws a ping's payload from `random`'s global stream, the one a script's
    unseeded weight initializers draw from too (Keras 3's and tf_keras's default seeds): the
    keepalive ping every 20 s changed the weights of the next model a seeded script built.
    """
    from websockets.sync.client import ClientConnection

    class PrivatePingConnection(ClientConnection):
        def ping(self, data: Any = None, *, ack_on_close: bool = False) -> Any:
            if data is None:
                data = os.urandom(4)
            return super().ping(data, ack_on_close=ack_on_close)

    return PrivatePingConnection


def _handshake_refused(error: Exception) -> bool:
    """The URL answered HTTP, but not with the upgrade: a proxy without WebSocket support, or
    something that is not a Stoker server (HTTP POST then tells which). An HTTP/1.0 server,
    as `python -m http.server`, answers in a version websockets does not parse."""
    if type(error).__name__ in ("InvalidStatus", "InvalidStatusCode", "InvalidUpgrade"):
        return True
    cause = error.__cause__
    return (
        type(error).__name__ == "InvalidMessage"
        and isinstance(cause, ValueError)
        and "HTTP/" in str(cause)
    )


class WebSocketTransport:
    name = "websocket"

    def __init__(
        self,
        config: AgentConfig,
        hello: dict[str, Any],
        on_command: OnCommand,
        *,
        connect: Connect = default_connect,
        clock: Clock = SYSTEM_CLOCK,
    ) -> None:
        self._config = config
        self._hello = hello
        self._on_command = on_command
        self._connect = connect
        self._clock = clock
        self._url = websocket_url(config.server, "/api/v1/agent")
        self._ws: Any = None
        self.run_id: int | None = None

    @property
    def is_open(self) -> bool:
        return self._ws is not None

    def open(self, deadline: float) -> Welcome:
        left_s = max(0.1, deadline - self._clock.monotonic())
        try:
            ws = self._connect(
                self._url,
                open_timeout=min(self._config.connect_timeout_s, left_s),
                additional_headers=bearer(self._config.token),
                max_size=None,
                # A server that answers no ping for as long as it may take to acknowledge a
                # batch (and at least websockets' default 20 s) is stalled; sooner, the
                # keepalive would give up on a merely slow one. (Keyword since websockets 15.)
                ping_timeout=max(self._config.ack_timeout_s, DEFAULT_PING_TIMEOUT_S),
            )
        except Exception as error:
            if _handshake_refused(error):
                raise HandshakeRefused(str(error)) from error
            raise
        try:
            ws.send(wire.dumps_text(self._hello))
            welcome = wire.loads(ws.recv(timeout=min(self._config.ack_timeout_s, left_s)))
            if welcome.get("type") != "welcome":
                raise ConnectionError(f"server refused the run: {welcome}")
        except BaseException:
            with contextlib.suppress(Exception):
                ws.close()
            raise
        self._ws = ws
        self.run_id = welcome["run_id"]
        return Welcome(run_id=welcome["run_id"], last_seq=int(welcome.get("last_seq", 0)))

    def groups(self, items: list[Item], size_of: Callable[[Item], int]) -> list[list[Item]]:
        return [[item] for item in items]  # one in flight at a time

    def send(self, batches: list[Batch], deadline: float) -> list[str | None]:
        outcomes: list[str | None] = []
        for batch in batches:
            self._socket().send(wire.dumps_text(batch))
            reply = self._await_reply(functools.partial(_is_reply_to, batch["seq"]), deadline)
            outcomes.append(str(reply) if reply.get("type") == "error" else None)
        return outcomes

    def end(self, end: dict[str, Any], deadline: float) -> None:
        self._socket().send(wire.dumps_text(end))
        self._await_reply(lambda m: bool(m.get("end")), deadline)

    def poll_commands(self) -> None:
        """Nothing is in flight here, so whatever waits on the socket is a command."""
        ws = self._socket()
        while True:
            try:
                message = wire.loads(ws.recv(timeout=0))
            except TimeoutError:
                return
            if message.get("type") == "command":
                self._on_command(message)

    def _socket(self) -> Any:
        """The open socket; `close` may have run meanwhile on another thread (abandon)."""
        ws = self._ws
        if ws is None:
            raise ConnectionAbortedError("the connection was closed")
        return ws

    def close(self) -> None:
        ws, self._ws = self._ws, None
        if ws is not None:
            with contextlib.suppress(Exception):
                ws.close()

    def _await_reply(
        self, matches: Callable[[dict[str, Any]], bool], deadline: float
    ) -> dict[str, Any]:
        ws = self._socket()
        ack_deadline = self._clock.monotonic() + self._config.ack_timeout_s
        wait_until = min(ack_deadline, deadline)
        while True:
            remaining = wait_until - self._clock.monotonic()
            if remaining <= 0:
                if wait_until < ack_deadline:
                    raise DrainCapReached("the drain's time is up")
                raise TimeoutError("no acknowledgement from the server")
            try:
                message = wire.loads(ws.recv(timeout=remaining))
            except TimeoutError:
                if wait_until < ack_deadline:
                    raise DrainCapReached("the drain's time is up") from None
                raise
            if message.get("type") == "command":
                self._on_command(message)
                continue
            if matches(message):
                return message
            if message.get("type") == "error" and "seq" not in message:
                raise ConnectionError(f"server error: {message.get('message')}")


def _is_reply_to(seq: int, message: dict[str, Any]) -> bool:
    return message.get("seq") == seq
