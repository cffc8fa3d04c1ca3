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

`STOKER_TEST_FAULT=<hook name>` (tests only, off by default; read when the owner is built)
replaces that hook on the instance by one that fails with `InjectedFault` the way the hook's
own guard would handle it. Without the variable nothing is installed: the hooks carry no check.
"""

import logging
import os
import threading
from collections.abc import Callable
from typing import Any

log = logging.getLogger("trainer_agent")

FAULT_ENV = "STOKER_TEST_FAULT"
# How a run whose agent gave up is ended: the record stopped before training did.
DISABLED_STATUS = "interrupted"


class InjectedFault(RuntimeError):
    """The error a hook named by `STOKER_TEST_FAULT` raises."""


def test_fault() -> str | None:
    """The hook `STOKER_TEST_FAULT` names (tests only), or None; read where a fault would be
    installed, never on a hook's path."""
    return os.environ.get(FAULT_ENV) or None


def _noop(*args: Any, **kwargs: Any) -> None:
    return None


class Guard:
    """Disables one agent object (a callback or a monitor) on its first unexpected error.

    Args:
        owner: The object whose hooks are guarded.
        noops: Hook name → what the hook becomes once disabled (default: returns None).
        on_disable: Called once with the reason, after the hooks are switched off, to end the
            owner's run; an error in it is logged, never raised.
        contained: Hook name → what handles a test fault in that hook, for hooks that handle
            their own errors without disabling the owner (called with the error and the
            hook's arguments).

    Tests only: when `STOKER_TEST_FAULT` names one of the hooks, that hook is replaced on the
    owner by one that fails: its error goes to `contained[hook]` (with the hook's arguments)
    when the hook handles its own errors without disabling the owner, else to `trip`, and the
    call then returns what the disabled hook returns.
    """

    def __init__(
        self,
        owner: object,
        noops: dict[str, Callable[..., Any] | None],
        on_disable: Callable[[str], None],
        *,
        contained: dict[str, Callable[..., Any]] | None = None,
    ) -> None:
        self._owner = owner
        self._noops = {name: replacement or _noop for name, replacement in noops.items()}
        self._on_disable = on_disable
        self.disabled = False
        self.reason: str | None = None
        fault = test_fault()
        if fault in self._noops:
            setattr(owner, fault, self._failing(fault, (contained or {}).get(fault)))

    def _failing(self, hook: str, contained: Callable[..., Any] | None) -> Callable[..., Any]:
        def failing(*args: Any, **kwargs: Any) -> Any:
            error = InjectedFault(f"{FAULT_ENV}={hook}")
            if contained is not None:
                return contained(error, *args, **kwargs)
            self.trip(hook, error)
            return getattr(self._owner, hook)(*args, **kwargs)  # now the disabled hook

        return failing

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
