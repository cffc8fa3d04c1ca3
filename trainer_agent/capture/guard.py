"""The agent's first promise: an error in its own code never reaches the training loop.

Every hook the agent runs on the training thread has the shape

    def on_train_batch_begin(self, batch, logs=None):
        try:
            ...
        except Exception as error:
            self._guard.trip("on_train_batch_begin", error)

which costs nothing while nothing raises (CPython 3.11+ exceptions are zero-cost). On the
first unexpected error `trip` logs once with the traceback, replaces the owner's hooks with
no-ops on the instance (so later calls cost one empty function call and no flag is checked
on the healthy path), and lets the owner end its run with the server. Training goes on.

Tests inject their faults from outside (tests/harness/faults.py): the product carries no
switch for them.
"""

import logging
import threading
from collections.abc import Callable
from typing import Any

log = logging.getLogger("trainer_agent")

# How a run whose agent gave up is ended: the record stopped before training did.
DISABLED_STATUS = "interrupted"


def _noop(*args: Any, **kwargs: Any) -> None:
    return None


class Guard:
    """Disables one agent object (a callback or a monitor) on its first unexpected error.

    Args:
        owner: The object whose hooks are guarded.
        noops: Hook name → what the hook becomes once disabled (default: returns None).
        on_disable: Called once with the reason, after the hooks are switched off, to end the
            owner's run; an error in it is logged, never raised.
    """

    def __init__(
        self,
        owner: object,
        noops: dict[str, Callable[..., Any] | None],
        on_disable: Callable[[str], None],
    ) -> None:
        self._owner = owner
        self._noops = {name: replacement or _noop for name, replacement in noops.items()}
        self._on_disable = on_disable
        self.disabled = False
        self.reason: str | None = None

    def trip(self, hook: str, error: BaseException) -> None:
        """Disable the owner: log once, turn its hooks into no-ops, let it end its run."""
        if self.disabled:
            return
        self.disabled = True
        self.reason = f"{type(error).__name__} in {hook}: {error}"[:500]
        log.error(
            "Stoker: agent disabled: %s. Training continues unmonitored.",
            self.reason,
            exc_info=error,
        )
        for name, replacement in self._noops.items():
            setattr(self._owner, name, replacement)
        try:
            self._on_disable(self.reason)
        except Exception:
            log.debug("Stoker could not end the run of its disabled agent", exc_info=True)


def end_in_background(session: Any, status: str = DISABLED_STATUS) -> None:
    """Flush and end `session` (a `RunSession`) without making the training thread wait.

    The thread is not a daemon: the interpreter lets it finish (bounded by the session's close
    timeout) before the process exits, so the server still learns how the run ended.
    """

    def close() -> None:
        try:
            session.close(status)
        except Exception:
            log.debug("Stoker could not end the run of its disabled agent", exc_info=True)

    threading.Thread(target=close, name="stoker-disabled-close", daemon=False).start()
