"""Faults injected into the agent from the outside, for the tests of what it does when its own
code fails: the agent's code carries no switch for them.

- `fail_hook(owner, hook)`: a callback's or monitor's guarded hook fails the way its own guard
  sees an error in it (the hook's `except` hands it to `Guard.trip`), and then answers as the
  disabled hook does;
- `fail_wrap`, `fail_profile_start`, `fail_autolog`: the step inside the agent that raises,
  replaced by one that raises `InjectedFault`, so the agent's own handling runs;
- `install(name, owner)`: one of them by name, for the training scripts the tests start as
  processes (`--fault NAME`).
"""

from typing import Any

import pytest

PROFILE_START = "profile_start"
WRAP = "wrap"
AUTOLOG = "autolog"


class InjectedFault(RuntimeError):
    """The error an injected fault raises."""


def fail_hook(owner: Any, hook: str) -> None:
    """Make `owner`'s guarded `hook` fail (a StokerCallback's or a Monitor's)."""
    guard = owner._guard  # the guard the owner built: the one its hooks hand errors to

    def failing(*args: Any, **kwargs: Any) -> Any:
        guard.trip(hook, InjectedFault(f"injected into {hook}"))
        return getattr(owner, hook)(*args, **kwargs)  # now the disabled hook

    setattr(owner, hook, failing)


def _raises(where: str) -> Any:
    def failing(*args: Any, **kwargs: Any) -> Any:
        raise InjectedFault(f"injected into {where}")

    return failing


def fail_wrap(monkeypatch: pytest.MonkeyPatch | None = None) -> None:
    """Stamping a wrapped dataset's fetches fails (`StampRing.stamped`, when the train
    function is first called with an iterator): the fit runs monitored without input wait."""
    from trainer_agent.capture.stamped_iterator import StampRing

    _replace(monkeypatch, StampRing, "stamped", _raises("StampRing.stamped"))


def fail_profile_start(monkeypatch: pytest.MonkeyPatch | None = None) -> None:
    """Starting TensorFlow's profiler fails: the capture is reported failed, training goes on."""
    from trainer_agent.profiling import profile

    _replace(monkeypatch, profile, "_start_profiler", _raises("the profiler's start"))


def fail_autolog(monkeypatch: pytest.MonkeyPatch) -> None:
    """autolog's patch fails before the fit (`_monitored_call`): the fit runs unmonitored."""
    from trainer_agent.capture import autolog

    monkeypatch.setattr(autolog, "_monitored_call", _raises("autolog's patch"))


def _replace(monkeypatch: pytest.MonkeyPatch | None, owner: Any, name: str, value: Any) -> None:
    if monkeypatch is not None:
        monkeypatch.setattr(owner, name, value)
    else:  # a process of its own: for its whole life
        setattr(owner, name, value)


def install(name: str, owner: Any = None) -> None:
    """The fault `name` in this process, for good: a hook of `owner` (the script's callback or
    monitor), or `wrap` or `profile_start`."""
    if name == WRAP:
        fail_wrap()
    elif name == PROFILE_START:
        fail_profile_start()
    else:
        fail_hook(owner, name)
