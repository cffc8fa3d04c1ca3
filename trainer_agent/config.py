"""Agent settings: explicit arguments win, then `STOKER_*` environment variables, then defaults."""

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from trainer_agent.spool import DEFAULT_MAX_BYTES, default_spool_dir

DEFAULT_SERVER = "http://127.0.0.1:8470"
DEFAULT_SAMPLE_INTERVAL_S = 1.0


def resolve_server(server: str | None) -> str:
    return (server or os.environ.get("STOKER_SERVER") or DEFAULT_SERVER).rstrip("/")


def resolve_token(token: str | None) -> str | None:
    return token or os.environ.get("STOKER_AGENT_TOKEN") or os.environ.get("STOKER_TOKEN") or None


def resolve_interval_s(interval_s: float | None) -> float:
    if interval_s is not None:
        return float(interval_s)
    return float(os.environ.get("STOKER_SAMPLE_INTERVAL_S") or DEFAULT_SAMPLE_INTERVAL_S)


def spool_dir_from_env() -> Path | None:
    """`STOKER_SPOOL_DIR` (`off` disables spooling), else the user's cache directory."""
    value = os.environ.get("STOKER_SPOOL_DIR", "").strip()
    if value.lower() in ("off", "none", "0"):
        return None
    return Path(value) if value else default_spool_dir()


def _env_float(name: str, default: float) -> float:
    try:
        return float(os.environ.get(name) or default)
    except ValueError:
        return default


def env_flag(name: str) -> bool:
    return os.environ.get(name, "").strip().lower() in ("1", "true", "yes", "on")


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
    token: str | None = None
    run_name: str = ""
    project: str = "default"
    tags: list[str] = field(default_factory=list)
    config: dict[str, Any] = field(default_factory=dict)
    sample_interval_s: float = DEFAULT_SAMPLE_INTERVAL_S
    all_gpus: bool = False
    # How often the sampler thread reads tf.data's autotuning model (pipeline_model.py).
    pipeline_interval_s: float = field(
        default_factory=lambda: _env_float("STOKER_PIPELINE_INTERVAL_S", 5.0)
    )
    # How often the sender sends what was recorded: every second while nobody watches the
    # run, every 50 ms while a browser does (the server says so with a `watch` command).
    flush_interval_s: float = field(
        default_factory=lambda: _env_float("STOKER_FLUSH_INTERVAL_S", 1.0)
    )
    watched_flush_interval_s: float = field(
        default_factory=lambda: _env_float("STOKER_WATCHED_FLUSH_INTERVAL_S", 0.05)
    )
    max_batch_rows: int = 5000
    max_pending_rows: int = 1_000_000
    # No acknowledgement for this long: the server is stuck (and, at a run's end, the drain
    # stops waiting for it).
    ack_timeout_s: float = field(default_factory=lambda: _env_float("STOKER_ACK_TIMEOUT_S", 10.0))
    connect_timeout_s: float = 5.0
    # At the run's end: how long to keep trying a server that cannot be reached (at most 2 s
    # when the spool keeps the records)...
    close_timeout_s: float = field(
        default_factory=lambda: _env_float("STOKER_CLOSE_TIMEOUT_S", 10.0)
    )
    # ...and how long, at most, to keep sending to a server that acknowledges.
    drain_timeout_s: float = field(
        default_factory=lambda: _env_float("STOKER_DRAIN_TIMEOUT_S", 60.0)
    )
    spool_dir: Path | None = field(default_factory=spool_dir_from_env)
    spool_max_bytes: int = field(
        default_factory=lambda: int(_env_float("STOKER_SPOOL_MAX_BYTES", DEFAULT_MAX_BYTES))
    )
    # "websocket" (falls back to HTTP when the upgrade is refused) or "http".
    transport: str = field(
        default_factory=lambda: os.environ.get("STOKER_TRANSPORT", "websocket").lower()
    )

    @classmethod
    def from_arguments(
        cls,
        *,
        run_name: str,
        project: str,
        server: str | None,
        config: dict[str, Any] | None,
        tags: list[str] | None,
        token: str | None,
        sample_interval_s: float | None,
        all_gpus: bool | None,
    ) -> "AgentConfig":
        """The callback's and Monitor's arguments, with `STOKER_*` variables filling the gaps."""
        return cls(
            server=resolve_server(server),
            token=resolve_token(token),
            run_name=run_name,
            project=project,
            tags=list(tags or []),
            config=dict(config or {}),
            sample_interval_s=resolve_interval_s(sample_interval_s),
            all_gpus=env_flag("STOKER_ALL_GPUS") if all_gpus is None else all_gpus,
        )
