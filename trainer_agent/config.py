"""Agent settings: explicit arguments win, then `STOKER_*` environment variables (read by
trainer_agent/settings.py), then defaults."""

import dataclasses
import logging
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypedDict, TypeVar
from urllib.parse import urlsplit

from trainer_agent.log_once import warn_once
from trainer_agent.settings import DEFAULT_SERVER, AgentSettings, agent_setting

log = logging.getLogger("trainer_agent")


SERVER_SCHEMES = ("http", "https")
_WEBSOCKET_SCHEMES = {"ws": "http", "wss": "https"}
DEFAULT_PORT = 8470


@dataclass(frozen=True)
class ServerSetting:
    """The server URL the agent uses, checked once where it is configured.

    `url` is the value to use (no trailing slash; `http://` added to a bare `host:port`).
    `notice` says how a value without a scheme was read; `problem` says why a value cannot be
    used at all (then `url` is the value as given, and nothing is sent to it). Both are
    complete sentences naming the setting, its value and the fix."""

    url: str
    source: str  # "STOKER_SERVER", "server=", "--server", or "" for the default
    given: str = ""  # the value as the user wrote it
    notice: str | None = None
    problem: str | None = None

    @property
    def setting(self) -> str:
        """How the user wrote it, e.g. `STOKER_SERVER='127.0.0.1:8470'`."""
        if not self.source:
            return f"the default server {self.url}"
        if self.source.startswith("--"):
            return f"{self.source} {self.given!r}"
        return f"{self.source.rstrip('=')}={self.given!r}"


class RunArguments(TypedDict, total=False):
    """The keyword arguments `StokerCallback`, `Monitor` and `autolog` accept alike: the fields
    of `RunOptions` (the type checker reads this; `RunOptions.of` checks them at run time)."""

    run_name: str | None
    project: str | None
    tags: Sequence[str] | None
    config: Mapping[str, Any] | None
    server: str | None
    token: str | None
    run_key: str | None
    every_n_batches: int
    sample_interval_s: float | None
    all_gpus: bool | None


@dataclass(frozen=True, kw_only=True)
class RunOptions:
    """What a monitored run is called and where it goes: one type for the keyword arguments of
    `StokerCallback`, `Monitor` and `autolog` (and what `stoker run` hands to autolog).

    Args:
        run_name: Name shown in the UI. Defaults to a short random id.
        project: Groups runs for filtering and comparison.
        tags: Labels for filtering.
        config: Your hyperparameters, shown and compared across runs.
        server: Server URL; defaults to `STOKER_SERVER`, then `http://127.0.0.1:8470`.
        token: Agent token when the server requires one (default: `STOKER_AGENT_TOKEN`).
        run_key: Joins every worker of a distributed job into one run (default:
            `STOKER_RUN_KEY`, else derived from `TF_CONFIG`; see `trainer_agent.capture.job`).
        every_n_batches: Keep the scalar logs (loss, metrics) of every n-th step.
        sample_interval_s: GPU and host sampling period (default `STOKER_SAMPLE_INTERVAL_S`,
            then 1 s; at least 0.1 s).
        all_gpus: Report every GPU, not only those this process can use
            (`CUDA_VISIBLE_DEVICES`); default `STOKER_ALL_GPUS`.
    """

    run_name: str = ""
    project: str = "default"
    tags: tuple[str, ...] = ()
    config: Mapping[str, Any] = field(default_factory=dict)
    server: str | None = None
    token: str | None = None
    run_key: str | None = None
    every_n_batches: int = 50
    sample_interval_s: float | None = None
    all_gpus: bool | None = None

    @classmethod
    def of(cls, owner: str, arguments: Mapping[str, Any]) -> "RunOptions":
        """The options from `owner`'s keyword arguments; None means the default. An unknown
        name raises a `TypeError` that lists the names `owner` accepts."""
        unknown = sorted(set(arguments) - set(RUN_OPTION_NAMES))
        if unknown:
            raise TypeError(
                f"{owner}() got an unexpected keyword argument {unknown[0]!r}; "
                f"it accepts {', '.join(RUN_OPTION_NAMES)}"
            )
        given = {name: value for name, value in arguments.items() if value is not None}
        if "tags" in given:
            tags = given["tags"]
            given["tags"] = (tags,) if isinstance(tags, str) else tuple(str(tag) for tag in tags)
        if "config" in given:
            given["config"] = dict(given["config"])
        if "every_n_batches" in given:
            given["every_n_batches"] = max(1, int(given["every_n_batches"]))
        return cls(**given)

    def arguments(self) -> dict[str, Any]:
        """The options as keyword arguments (for `StokerCallback(**options.arguments())`)."""
        return {name: getattr(self, name) for name in RUN_OPTION_NAMES}

    def changed(self) -> dict[str, Any]:
        """The options that differ from the defaults, as JSON-ready values."""
        default = RunOptions()
        changed = {
            n: getattr(self, n) for n in RUN_OPTION_NAMES if getattr(self, n) != getattr(default, n)
        }
        if "tags" in changed:
            changed["tags"] = list(changed["tags"])
        if "config" in changed:
            changed["config"] = dict(changed["config"])
        return changed


RUN_OPTION_NAMES: tuple[str, ...] = tuple(f.name for f in dataclasses.fields(RunOptions))

_F = TypeVar("_F", bound=Callable[..., Any])


def takes_run_options(function: _F) -> _F:
    """Show `function`'s `**options` as the `RunOptions` fields, keyword-only, in its signature
    (for `help()` and editors); the function itself is returned unchanged."""
    import inspect

    signature = inspect.signature(function)
    kept = [p for p in signature.parameters.values() if p.kind is not p.VAR_KEYWORD]
    defaults = RunOptions()
    options = [
        inspect.Parameter(name, inspect.Parameter.KEYWORD_ONLY, default=getattr(defaults, name))
        for name in RUN_OPTION_NAMES
        if name not in signature.parameters
    ]
    function.__signature__ = signature.replace(parameters=[*kept, *options])  # type: ignore[attr-defined]
    return function


def _url_problem(value: str) -> str | None:
    """Why `value` (with a scheme) is not an http(s) URL of a server, or None."""
    if any(c.isspace() for c in value):
        return "it contains a space"
    parts = urlsplit(value)
    if parts.scheme not in SERVER_SCHEMES:
        return f"its scheme {parts.scheme + '://'!r} is not http:// or https://"
    if not parts.hostname:
        return "it names no host"
    try:
        port = parts.port
    except ValueError:
        port_text = parts.netloc.rpartition(":")[2]
        return f"its port {port_text!r} is not a number from 1 to 65535"
    if port == 0:
        return "its port 0 is not a number from 1 to 65535"
    if parts.query or parts.fragment or value.endswith(("?", "#")):
        return "it has a query or fragment (?…, #…)"
    return None


def _suggestion(value: str) -> str:
    """The URL the user probably meant (`http://`, their host, their port or 8470), else the
    form to write."""
    # After the scheme; or after a mistyped one (`http//host`, `http:/host`); or all of it.
    rest = value.split("://", 1)[1] if "://" in value else re.sub(r"^[A-Za-z]+:?/+", "", value)
    host_port = re.split(r"[/?#\s]", rest.strip(), maxsplit=1)[0]
    if host_port and ":" not in host_port:  # a bare host: Stoker's default port
        host_port += f":{DEFAULT_PORT}"
    candidate = "http://" + host_port
    if host_port and _url_problem(candidate) is None:
        return candidate
    return f"http://HOST:{DEFAULT_PORT} (the URL `stoker serve` prints)"


def check_server(value: str, source: str) -> ServerSetting:
    """Check a server URL as the user gave it. `source` names the setting in messages."""
    value = value.strip()
    if "://" not in value:
        # `host:port` with no scheme: the intent is plain, so it is read as http://host:port.
        # A bare `host` (no port) is not: Stoker's port is not the scheme's default.
        candidate = "http://" + value.rstrip("/")
        parts = urlsplit(candidate)
        has_port = bool(re.fullmatch(r"[^/?#]*:\d+", parts.netloc))
        if has_port and _url_problem(candidate) is None:
            setting = ServerSetting(url=candidate, source=source, given=value)
            return dataclasses.replace(
                setting,
                notice=f"{setting.setting} has no scheme; using {candidate} "
                f"(write {candidate} to silence this)",
            )
        why = "no http:// or https://" if has_port else "no http:// or https:// and no port"
        return _refused(value, source, why)
    scheme = value.split("://", 1)[0].lower()
    if scheme in _WEBSOCKET_SCHEMES:  # the agent's WebSocket URL: the server is the same URL
        candidate = _WEBSOCKET_SCHEMES[scheme] + value[len(scheme) :].rstrip("/")
        if _url_problem(candidate) is None:
            setting = ServerSetting(url=candidate, source=source, given=value)
            return dataclasses.replace(
                setting,
                notice=f"{setting.setting} is a WebSocket URL; using {candidate} "
                f"(write {candidate} to silence this)",
            )
    problem = _url_problem(value)
    if problem is None:
        return ServerSetting(url=value.rstrip("/"), source=source, given=value)
    return _refused(value, source, problem)


def _refused(value: str, source: str, why: str) -> ServerSetting:
    setting = ServerSetting(url=value.rstrip("/"), source=source, given=value)
    return dataclasses.replace(
        setting, problem=f"{setting.setting} is not a URL ({why}): write {_suggestion(value)}"
    )


def server_setting(server: str | None, *, argument: str = "server=") -> ServerSetting:
    """The server from `server` (named `argument` in messages), else `STOKER_SERVER`, else the
    default, checked."""
    if server and server.strip():
        return check_server(server, argument)
    from_env = agent_setting("server")
    if from_env:
        return check_server(from_env, "STOKER_SERVER")
    return ServerSetting(url=DEFAULT_SERVER, source="")


def resolve_server(server: str | None) -> str:
    return server_setting(server).url


def resolve_token(token: str | None) -> str | None:
    if token:
        return token
    return agent_setting("agent_token") or agent_setting("token")


def resolve_interval_s(interval_s: float | None) -> float:
    return float(interval_s) if interval_s is not None else agent_setting("sample_interval_s")


def _from_env(name: str) -> Any:
    """A default from the environment: the agent setting `name` (trainer_agent/settings.py)."""
    return field(default_factory=lambda: agent_setting(name))


def websocket_url(server: str, path: str) -> str:
    """`http(s)://host:port` → `ws(s)://host:port/path`."""
    if server.startswith("https://"):
        return "wss://" + server[len("https://") :] + path
    if server.startswith("http://"):
        return "ws://" + server[len("http://") :] + path
    return server + path


@dataclass
class AgentConfig:
    server: str = DEFAULT_SERVER
    # Where `server` came from ("STOKER_SERVER", "server=", "" for the default), for messages.
    server_source: str = ""
    # Why `server` is not a URL (the message said once): then nothing is sent, runs are spooled.
    server_problem: str | None = None
    token: str | None = None
    run_name: str = ""
    project: str = "default"
    tags: list[str] = field(default_factory=list)
    config: dict[str, Any] = field(default_factory=dict)
    sample_interval_s: float = AgentSettings.sample_interval_s
    all_gpus: bool = False
    # How often the sampler thread reads tf.data's autotuning model (pipeline_model.py).
    pipeline_interval_s: float = _from_env("pipeline_interval_s")
    # How often the sender sends what was recorded: every second while nobody watches the
    # run, every 50 ms while a browser does (the server says so with a `watch` command).
    flush_interval_s: float = _from_env("flush_interval_s")
    watched_flush_interval_s: float = _from_env("watched_flush_interval_s")
    max_batch_rows: int = 5000
    max_pending_rows: int = 1_000_000
    # No acknowledgement for this long: the server is stuck (and, at a run's end, the drain
    # stops waiting for it).
    ack_timeout_s: float = _from_env("ack_timeout_s")
    connect_timeout_s: float = 5.0
    # At the run's end: how long to keep trying a server that cannot be reached (at most 2 s
    # when the spool keeps the records)...
    close_timeout_s: float = _from_env("close_timeout_s")
    # ...and how long, at most, to keep sending to a server that acknowledges.
    drain_timeout_s: float = _from_env("drain_timeout_s")
    spool_dir: Path | None = field(default_factory=lambda: agent_setting("spool_dir"))
    spool_max_bytes: int = _from_env("spool_max_bytes")
    # Every run's spool in `spool_dir` together (runs left behind by earlier processes too).
    spool_total_max_bytes: int = _from_env("spool_total_max_bytes")
    # "websocket" (falls back to HTTP when the upgrade is refused) or "http".
    transport: str = _from_env("transport")

    @classmethod
    def from_options(cls, options: RunOptions) -> "AgentConfig":
        """The callback's and Monitor's options, with `STOKER_*` variables filling the gaps.

        A server URL without a scheme (`host:port`) is read as `http://host:port`, said once;
        one that is not a URL at all is said once, and the agent then sends nothing (its runs
        stay in the spool for `stoker upload`). Neither raises into training."""
        setting = server_setting(options.server)
        all_gpus = options.all_gpus
        agent = cls(
            server=setting.url,
            server_source=setting.source,
            server_problem=setting.problem,
            token=resolve_token(options.token),
            run_name=options.run_name,
            project=options.project,
            tags=list(options.tags),
            config=dict(options.config),
            sample_interval_s=resolve_interval_s(options.sample_interval_s),
            all_gpus=agent_setting("all_gpus") if all_gpus is None else all_gpus,
        )
        if setting.notice:
            warn_once(setting.notice, "Stoker: %s", setting.notice)
        if setting.problem:
            kept = (
                "its runs are kept in the spool for `stoker upload`"
                if agent.spool_dir is not None
                else "its runs are not kept (STOKER_SPOOL_DIR=off)"
            )
            warn_once(
                setting.problem,
                "Stoker: %s. Until then this process sends nothing to a server: training runs "
                "as usual, %s",
                setting.problem,
                kept,
            )
        return agent
