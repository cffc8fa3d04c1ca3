"""Warnings the agent says once per process, however many fits, callbacks or NVML calls meet
the cause: the agent's one warn-once (settings, NVML, samplers, autolog, the callback).

`autolog()` makes a callback per `fit`; a script that fits 50 times must not read the same
warning 50 times. `forget()` lets the next occurrence of every warning be said again
(`autolog(disable=True)` does it, so a later `autolog()` says again what it cannot monitor).
"""

import logging
import threading
from typing import Any

log = logging.getLogger("trainer_agent")

_lock = threading.Lock()
_said: set[str] = set()


def warn_once(key: str, message: str, *args: Any) -> None:
    """Log `message % args` as a warning, unless a warning with `key` was already logged."""
    with _lock:
        if key in _said:
            return
        _said.add(key)
    log.warning(message, *args)


def forget() -> None:
    """Say every warning again at its next occurrence."""
    with _lock:
        _said.clear()
