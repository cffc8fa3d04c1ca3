"""Keys from the terminal, one at a time, without waiting for Enter: the terminal is put in
cbreak mode (no echo, Ctrl-C still interrupts) for as long as `KeyReader` is open, and the
keys arrive on the event loop (`loop.add_reader`), so nothing blocks."""

import asyncio
import os
import sys
import termios
import tty
from types import TracebackType
from typing import Any

ESCAPE_WAIT_S = 0.05
# Escape sequences of the keys `top` uses; any other key is its own character.
SEQUENCES = {
    "\x1b[A": "up", "\x1bOA": "up", "\x1b[B": "down", "\x1bOB": "down",
    "\x1b[C": "right", "\x1bOC": "right", "\x1b[D": "left", "\x1bOD": "left",
    "\x1b[5~": "pageup", "\x1b[6~": "pagedown", "\r": "enter", "\n": "enter",
    "\x7f": "backspace", "\x08": "backspace", "\x1b": "escape",
}  # fmt: skip


def parse_keys(text: str) -> list[str]:
    """What the terminal sent, as key names ("up", "enter", "q")."""
    keys: list[str] = []
    i = 0
    while i < len(text):
        for length in (3, 4, 1):
            chunk = text[i : i + length]
            if chunk in SEQUENCES and (length > 1 or chunk != "\x1b" or i + 1 == len(text)):
                keys.append(SEQUENCES[chunk])
                i += length
                break
        else:
            if text[i : i + 2] in ("\x1b[", "\x1bO"):  # an unknown sequence: skip it whole
                j = i + 2
                while j < len(text) and not text[j].isalpha() and text[j] != "~":
                    j += 1
                i = j + 1
                continue
            keys.append("escape" if text[i] == "\x1b" else text[i])  # Esc, then the next key
            i += 1
    return keys


class KeyReader:
    def __init__(
        self,
        queue: asyncio.Queue[str],
        arrived: asyncio.Event,
        fd: int | None = None,
        escape_wait_s: float = ESCAPE_WAIT_S,
    ) -> None:
        self.escape_wait_s = escape_wait_s
        self.queue = queue
        self.arrived = arrived
        self.fd = sys.stdin.fileno() if fd is None else fd
        self._saved: list[Any] | None = None
        self._pending = ""

    def __enter__(self) -> "KeyReader":
        self._saved = termios.tcgetattr(self.fd)
        tty.setcbreak(self.fd)
        asyncio.get_running_loop().add_reader(self.fd, self._read)
        return self

    def _read(self) -> None:
        data = os.read(self.fd, 4096).decode(errors="replace")
        if not data:  # the terminal went away
            self.queue.put_nowait("q")
        text = self._pending + data
        self._pending = ""
        # A sequence cut between two reads waits for its end (a lone Esc for ESCAPE_WAIT_S).
        cut = text.rfind("\x1b")
        if cut >= 0 and any(s != text[cut:] and s.startswith(text[cut:]) for s in SEQUENCES):
            text, self._pending = text[:cut], text[cut:]
            loop = asyncio.get_running_loop()
            loop.call_later(self.escape_wait_s, self._flush, self._pending)
        self._put(text)

    def _flush(self, pending: str) -> None:
        if self._pending == pending:  # nothing came after it
            self._pending = ""
            self._put(pending)

    def _put(self, text: str) -> None:
        for key in parse_keys(text):
            self.queue.put_nowait(key)
        self.arrived.set()

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        asyncio.get_running_loop().remove_reader(self.fd)
        if self._saved is not None:
            termios.tcsetattr(self.fd, termios.TCSADRAIN, self._saved)
