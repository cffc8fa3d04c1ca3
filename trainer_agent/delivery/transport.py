"""What the sender needs from a way to reach the server, and how failures are told apart.

A transport opens (the WebSocket handshake, hello and welcome; nothing for HTTP), sends
batches and the run's end, and reports each batch as accepted (None) or refused (the
server's reason: retrying cannot help). Any other failure raises; the sender then closes it
and tries again later. `deadline` (monotonic, from the transport's clock) bounds every wait
while the run drains at its end; otherwise it is infinite and the ack timeout bounds them.
"""

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol, TypeVar

Batch = dict[str, Any]
Item = TypeVar("Item")


@dataclass(frozen=True)
class Welcome:
    run_id: int
    last_seq: int  # the highest seq the server already stored for this run


class Transport(Protocol):
    name: str
    # The run's id as the server last gave it (None until it did).
    run_id: int | None

    @property
    def is_open(self) -> bool: ...

    def open(self, deadline: float) -> Welcome | None:
        """Connect; the server's welcome, or None when this transport learns nothing yet."""
        ...

    def groups(self, items: list[Item], size_of: Callable[[Item], int]) -> list[list[Item]]:
        """`items` cut into what one `send` carries, in order."""
        ...

    def send(self, batches: list[Batch], deadline: float) -> list[str | None]:
        """Deliver `batches`; for each, None when stored, else why the server refused it."""
        ...

    def end(self, end: dict[str, Any], deadline: float) -> None:
        """Send the run's end and wait for the server to acknowledge it."""
        ...

    def poll_commands(self) -> None:
        """Take the commands the server sent meanwhile (never waits)."""
        ...

    def close(self) -> None:
        """Disconnect; safe from any thread (it wakes a wait for an ack)."""
        ...


KEEPALIVE_TIMEOUT = "keepalive ping timeout"  # websockets' close reason


class HandshakeRefused(ConnectionError):
    """The server (or a proxy) answered HTTP but refused the WebSocket upgrade."""


class Misconfigured(ConnectionError):
    """The URL answers, but retrying cannot help until the configuration changes. Its text is
    the whole explanation, naming the URL and the fix. (What tells it: classify.py.)"""


class NotStokerServer(Misconfigured):
    """Something answers HTTP at the server URL, but it is not a Stoker server."""


class TokenRefused(Misconfigured):
    """A Stoker server refuses the agent's token."""


class DrainCapReached(TimeoutError):
    """The drain at the run's end ran out of time while the server was still answering."""


def is_slow(error: BaseException) -> bool:
    """A timeout: the server (or the network) did not answer in time. Anything else (refused,
    no route, name lookup failed) means it cannot be reached.

    The WebSocket's keepalive closing the connection because its ping went unanswered is a
    timeout too: the server is up but stalled (paused, swapping), not gone.
    """
    return (
        isinstance(error, TimeoutError)
        or "Timeout" in type(error).__name__
        or KEEPALIVE_TIMEOUT in str(error)
    )


def bearer(token: str | None) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"} if token else {}
