"""The agent's `STOKER_*` environment variables: one typed reader, the server's units and errors.

Every variable the agent reads is a field of `AgentSettings`, with its type, default, unit and
meaning; `read_agent_settings()` reads them all through trainer_agent/setting_units.py, the
parsers the server's settings use too. A value that cannot be read is said once, naming the
variable, its value and what it accepts, and the default is used: the agent never raises into
training. docs/settings.md is generated from these fields and the server's
(stoker_server/core/settings_reference.py).

Explicit arguments (`StokerCallback(server=...)`, `stoker run --server`) win over these.
"""

import functools
import os
from collections.abc import Callable, Mapping
from dataclasses import MISSING, dataclass, field, fields
from pathlib import Path
from typing import Any

from trainer_agent.log_once import warn_once
from trainer_agent.setting_units import (
    duration_text,
    parse_duration_s,
    parse_size_bytes,
    parse_switch,
)

DEFAULT_SERVER = "http://127.0.0.1:8470"
DEFAULT_SPOOL_MAX_BYTES = 512 * 2**20
DEFAULT_SPOOL_TOTAL_MAX_BYTES = 2 * 2**30
TRANSPORTS = ("websocket", "http")


def default_spool_dir() -> Path:
    """The user's cache directory's `stoker/spool` ($XDG_CACHE_HOME, else ~/.cache)."""
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "stoker" / "spool"


@dataclass(frozen=True)
class Variable:
    """How one `STOKER_*` variable is read and documented."""

    env: str
    parse: Callable[[str], Any]
    kind: str  # the unit or kind of value, as the reference shows it
    meaning: str
    default_text: str = ""  # the default as the reference shows it, when not the value's text
    argument: str = ""  # the same setting as a callback / Monitor argument
    flag: str = ""  # ... and as a `stoker` flag
    positive: bool = False  # a duration that must be more than 0


def _variable(**variable: Any) -> dict[str, Variable]:
    """A field's metadata: its `Variable`."""
    return {"variable": Variable(**variable)}


def _setting(default: Any = None, **variable: Any) -> Any:
    """A field of `AgentSettings` with this default, its `Variable` in the field's metadata."""
    return field(default=default, metadata=_variable(**variable))


def _text(value: str) -> str:
    return value.strip()


def _rank(value: str) -> int:
    if not value.strip().isdigit():
        raise ValueError(f"{value!r} is not a rank: write a whole number from 0")
    return int(value)


def _spool_dir(value: str) -> Path | None:
    return None if value.strip().lower() in ("off", "none", "0") else Path(value.strip())


def _transport(value: str) -> str:
    chosen = value.strip().lower()
    if chosen not in TRANSPORTS:
        raise ValueError(f"{value!r} is not a transport: write {' or '.join(TRANSPORTS)}")
    return chosen


DURATION = "duration (s)"
SIZE = "size (bytes)"
SWITCH = "switch"


@dataclass(frozen=True)
class AgentSettings:
    """The agent's settings from the environment (`read_agent_settings`)."""

    server: str | None = _setting(
        env="STOKER_SERVER", parse=_text, kind="URL", default_text=DEFAULT_SERVER,
        meaning="the Stoker server runs are sent to (`host:port` is read as http://host:port, "
        "said once); `stoker top` reads it too",
        argument="server=", flag="--server",
    )  # fmt: skip
    agent_token: str | None = _setting(
        env="STOKER_AGENT_TOKEN", parse=_text, kind="token", default_text="none",
        meaning="the token the agent delivers with, when the server requires one (agent and "
        "server: the server's is the one it accepts)",
        argument="token=", flag="--token (upload)",
    )  # fmt: skip
    token: str | None = _setting(
        env="STOKER_TOKEN", parse=_text, kind="token", default_text="none",
        meaning="the older name of STOKER_AGENT_TOKEN, read when that is unset",
    )  # fmt: skip
    view_token: str | None = _setting(
        env="STOKER_VIEW_TOKEN", parse=_text, kind="token", default_text="none",
        meaning="`stoker top`'s viewer token (agent and server: the server's is the one it "
        "accepts)",
        flag="--token (top)",
    )  # fmt: skip
    admin_token: str | None = _setting(
        env="STOKER_ADMIN_TOKEN", parse=_text, kind="token", default_text="none",
        meaning="`stoker top`'s token when STOKER_VIEW_TOKEN is unset (the admin token reads "
        "too; agent and server: the server's is the one it accepts)",
        flag="--token (top)",
    )  # fmt: skip
    run_key: str | None = _setting(
        env="STOKER_RUN_KEY", parse=_text, kind="text", default_text="none",
        meaning="joins every worker of a distributed job into one run, and resumes a run "
        "after a restart (e.g. your scheduler's job id); else derived from TF_CONFIG",
        argument="run_key=",
    )  # fmt: skip
    rank: int | None = _setting(
        env="STOKER_RANK", parse=_rank, kind="integer", default_text="RANK, else TF_CONFIG's",
        meaning="this worker's rank in a distributed job",
    )  # fmt: skip
    sample_interval_s: float = _setting(
        1.0, env="STOKER_SAMPLE_INTERVAL_S", parse=parse_duration_s, kind=DURATION,
        positive=True, meaning="how often GPU and host metrics are read (at least 0.1 s)",
        argument="sample_interval_s=",
    )  # fmt: skip
    all_gpus: bool = _setting(
        False, env="STOKER_ALL_GPUS", parse=parse_switch, kind=SWITCH,
        meaning="report every GPU, not only those this process can use (CUDA_VISIBLE_DEVICES)",
        argument="all_gpus=",
    )  # fmt: skip
    gpm: bool = _setting(
        True, env="STOKER_GPM", parse=parse_switch, kind=SWITCH,
        meaning="NVML GPM metrics (SM active, occupancy, tensor, DRAM bandwidth) on Hopper and "
        "newer (docs/gpu.md)",
    )  # fmt: skip
    pipeline_interval_s: float = _setting(
        5.0, env="STOKER_PIPELINE_INTERVAL_S", parse=parse_duration_s, kind=DURATION,
        positive=True, meaning="how often tf.data's autotuning model is read (the pipeline view)",
    )  # fmt: skip
    flush_interval_s: float = _setting(
        1.0, env="STOKER_FLUSH_INTERVAL_S", parse=parse_duration_s, kind=DURATION,
        positive=True, meaning="how often what was recorded is sent while no browser watches "
        "the run",
    )  # fmt: skip
    watched_flush_interval_s: float = _setting(
        0.05, env="STOKER_WATCHED_FLUSH_INTERVAL_S", parse=parse_duration_s, kind=DURATION,
        positive=True, meaning="... and while a browser watches it",
    )  # fmt: skip
    ack_timeout_s: float = _setting(
        10.0, env="STOKER_ACK_TIMEOUT_S", parse=parse_duration_s, kind=DURATION, positive=True,
        meaning="no acknowledgement for this long: the server is stuck (its batches are "
        "spooled)",
    )  # fmt: skip
    close_timeout_s: float = _setting(
        10.0, env="STOKER_CLOSE_TIMEOUT_S", parse=parse_duration_s, kind=DURATION,
        meaning="at a run's end, how long to keep trying a server that cannot be reached (at "
        "most 2 s when the spool keeps the records)",
    )  # fmt: skip
    drain_timeout_s: float = _setting(
        60.0, env="STOKER_DRAIN_TIMEOUT_S", parse=parse_duration_s, kind=DURATION,
        meaning="at a run's end, how long at most to keep sending to a server that acknowledges",
    )  # fmt: skip
    spool_dir: Path | None = field(
        default_factory=default_spool_dir,
        metadata=_variable(
            env="STOKER_SPOOL_DIR", parse=_spool_dir, kind="path, or off",
            default_text="~/.cache/stoker/spool ($XDG_CACHE_HOME/stoker/spool)",
            meaning="where records are kept while the server is unreachable (`stoker upload` "
            "sends them later); off keeps nothing",
        ),
    )  # fmt: skip
    spool_max_bytes: int = _setting(
        DEFAULT_SPOOL_MAX_BYTES, env="STOKER_SPOOL_MAX_BYTES", parse=parse_size_bytes, kind=SIZE,
        default_text="512MiB", meaning="the spool's cap; the oldest records go first",
    )  # fmt: skip
    spool_total_max_bytes: int = _setting(
        DEFAULT_SPOOL_TOTAL_MAX_BYTES, env="STOKER_SPOOL_TOTAL_MAX_BYTES",
        parse=parse_size_bytes, kind=SIZE, default_text="2GiB",
        meaning="every run's spool in the spool directory together (runs earlier processes "
        "left count); a batch beyond is dropped and counted, said once",
    )  # fmt: skip
    transport: str = _setting(
        "websocket", env="STOKER_TRANSPORT", parse=_transport, kind="websocket or http",
        meaning="how batches travel: the agent WebSocket (HTTP when the upgrade is refused), "
        "or HTTP POST only",
    )  # fmt: skip
    autolog: str | None = _setting(
        env="STOKER_AUTOLOG", parse=_text, kind="JSON", default_text="none",
        meaning="set by `stoker run` for the script it starts: the run options it was given; "
        "not for setting by hand",
    )  # fmt: skip
    tune: str | None = _setting(
        env="STOKER_TUNE", parse=_text, kind="JSON", default_text="none",
        meaning="set by `stoker tune` for each trial of the script it starts: the change to "
        "apply and the steps to measure; not for setting by hand",
    )  # fmt: skip


def variables() -> list[tuple[str, Variable, Any]]:
    """(field name, its variable, its default) for every agent setting, in order."""
    found = []
    for f in fields(AgentSettings):
        default = f.default_factory() if f.default_factory is not MISSING else f.default
        found.append((f.name, f.metadata["variable"], default))
    return found


def read_agent_settings(environ: Mapping[str, str] | None = None) -> AgentSettings:
    """Every agent setting from `environ` (default: this process's environment). A variable
    that is unset or empty takes its default; one that cannot be read is said once (with what
    it accepts) and takes its default too."""
    return AgentSettings(**{name: agent_setting(name, environ) for name in _VARIABLES})


def agent_setting(name: str, environ: Mapping[str, str] | None = None) -> Any:
    """The agent setting `name` (a field of AgentSettings) from `environ` (default: this
    process's environment), read as `read_agent_settings` reads it: one variable, for the
    callers that need one (an AgentConfig reads its defaults one by one, autolog makes one
    per fit)."""
    environ = os.environ if environ is None else environ
    variable, _ = _VARIABLES[name]
    raw = environ.get(variable.env)
    if raw is None or not raw.strip():
        return _default(name)
    value, problem = _parsed(name, raw)
    if problem is not None:
        warn_once(*problem)
    return value


def _default(name: str) -> Any:
    """Setting `name`'s default, made now (the spool directory follows $XDG_CACHE_HOME)."""
    spec = AgentSettings.__dataclass_fields__[name]
    return spec.default_factory() if spec.default_factory is not MISSING else spec.default


@functools.lru_cache(maxsize=256)
def _parsed(name: str, raw: str) -> tuple[Any, tuple[str, str, str] | None]:
    """Setting `name`'s value from its variable's raw value (the default when it cannot be
    read), and what to say then: (warn-once key, format, message)."""
    variable, default = _VARIABLES[name]
    try:
        value = variable.parse(raw)
        if variable.positive and value <= 0:
            raise ValueError(f"{raw!r} is not more than 0")
    except ValueError as error:
        message = (
            f"Stoker: {variable.env}={raw!r} cannot be used ({error}); using the default, "
            f"{shown_default(variable, default)}"
        )
        return _default(name), (f"setting:{variable.env}={raw}", "%s", message)
    return value, None


def shown_default(variable: Variable, default: Any) -> str:
    """A setting's default as a user would write it."""
    if variable.default_text:
        return variable.default_text
    if isinstance(default, bool):
        return "on" if default else "off"
    if variable.parse is parse_duration_s:
        return duration_text(default)
    return str(default)


# Each setting's variable and default (as the reference shows it), by field name.
_VARIABLES = {name: (variable, default) for name, variable, default in variables()}
