"""Server configuration from `STOKER_*` environment variables (mirrored by CLI flags)."""

import json
import re
from functools import lru_cache
from pathlib import Path
from typing import Annotated, Any

from pydantic import Field, field_validator, model_validator
from pydantic_settings import BaseSettings, NoDecode, SettingsConfigDict


def _default_data_dir() -> Path:
    return Path.home() / ".stoker"


_DURATION_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 7 * 86400, "y": 365 * 86400}
_SIZE_UNITS = {
    "b": 1, "kb": 10**3, "mb": 10**6, "gb": 10**9, "tb": 10**12,
    "kib": 2**10, "mib": 2**20, "gib": 2**30, "tib": 2**40,
}  # fmt: skip


# A list setting from the environment: JSON (`'["a", "b"]'`) or comma-separated (`a,b`).
NameList = Annotated[list[str], NoDecode]


def _name_list(value: Any) -> Any:
    if not isinstance(value, str):
        return value
    text = value.strip()
    if text.startswith("["):
        return json.loads(text)
    return [part.strip() for part in text.split(",") if part.strip()]


def _with_unit(value: Any, units: dict[str, int]) -> Any:
    """A duration ("90d") or size ("50GB") in the base unit; anything else as given."""
    if not isinstance(value, str):
        return value
    match = re.fullmatch(r"\s*([0-9.]+)\s*([a-zA-Z]*)\s*", value)
    if match is None or (match[2] and match[2].lower() not in units):
        return value  # pydantic's own message names the field
    number = float(match[1]) * units.get(match[2].lower(), 1)
    return int(number) if number == int(number) else number


class Settings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="STOKER_", extra="ignore")

    host: str = "127.0.0.1"
    port: int = 8470
    data_dir: Path = Field(default_factory=_default_data_dir)
    database_url: str | None = None
    # Who may do what (core/auth.py, docs/security.md). Each token is the token itself or
    # its hash, `sha256:<64 hex digits>`; an empty value is unset.
    agent_token: str | None = Field(
        default=None, description="delivers runs only (the agent WebSocket, POST /ingest)"
    )
    view_token: str | None = Field(
        default=None, description="reads runs, charts, /metrics and the live socket"
    )
    admin_token: str | None = Field(
        default=None,
        description="reads, and edits or deletes runs, manages alert rules and webhooks, "
        "starts profiles; unset while a view token is set: those actions are off",
    )
    no_auth: bool = Field(
        default=False,
        description="serve without tokens even when bound beyond loopback (said at start); "
        "without it such a server makes tokens on first start (<data_dir>/tokens.json)",
    )
    allowed_hosts: NameList = Field(
        default=[],
        description="Host header names answered besides localhost, 127.0.0.1 and ::1 when "
        "bound to loopback (DNS rebinding); when set, also enforced beyond loopback",
    )
    allowed_origins: NameList = Field(
        default=[],
        description="browser origins (scheme://host:port) allowed to open the WebSockets and "
        "send writes besides the server's own",
    )
    webhook_allowed_hosts: NameList = Field(
        default=[],
        description="webhook hosts allowed although they are or resolve to loopback, "
        "link-local, private or metadata addresses",
    )
    max_frame_bytes: int = 8 * 1024 * 1024
    # HTTP request bodies (the ingest fallback and offline upload carry many batches).
    max_request_bytes: int = 8 * 1024 * 1024
    # A running run with no agent connected and nothing heard for this long is interrupted.
    heartbeat_timeout_s: float = 60.0
    # Browser origins allowed to call the API from another site; none by default (CORS off).
    cors_origins: NameList = []
    max_batch_rows: int = 100_000
    # A run's config and environment as sent in its hello, as JSON.
    max_config_bytes: int = Field(
        default=64 * 1024, ge=1024, description="a run's config as JSON, at most (413 beyond)"
    )
    max_environment_bytes: int = Field(
        default=64 * 1024, ge=1024, description="a run's environment as JSON, at most (413)"
    )
    live_queue_size: int = 1000
    live_client_max_bytes: int = Field(
        default=8 * 2**20,
        ge=64 * 1024,
        description="bytes queued for one browser at most; beyond, its oldest messages drop",
    )
    live_max_clients: int = Field(
        default=256, ge=1, description="live sockets (browsers, stoker top) open at once"
    )
    live_max_subscriptions: int = Field(
        default=64, ge=1, description="runs one live socket may subscribe to at once"
    )
    max_agent_connections: int = Field(
        default=4096, ge=1, description="agent WebSockets open at once"
    )
    # permessage-deflate on WebSockets: off, because compressing every live message for every
    # browser costs the server more CPU than the bytes cost on loopback or a LAN.
    ws_compression: bool = False
    # Python's GIL switch interval for the server process (see cli.serve).
    switch_interval_s: float = Field(default=0.0005, gt=0, le=0.1)
    # A running run's summary is pushed to browsers at most this often.
    live_run_interval_s: float = Field(default=1.0, ge=0.0, le=60.0)
    # Several servers on one PostgreSQL: each re-announces the runs its browsers watch this
    # often, and drops another's watch not renewed for `watch_expiry_s` (a server that died
    # leaves its agents watched that long at most).
    watch_refresh_s: float = Field(default=3.0, gt=0, le=3600)
    watch_expiry_s: float = Field(default=10.0, gt=0, le=86400)
    log_level: str = "info"
    # What one GPU-hour costs, to show starvation's lost GPU-hours as money in the UI;
    # unset shows hours only. `currency` is the symbol written before the amount.
    gpu_hour_price: float | None = Field(default=None, ge=0)
    currency: str = Field(default="$", max_length=8)
    # What one kWh costs: the run page shows GPU energy, and the energy burned while
    # starved, as money; unset shows joules and kWh only.
    energy_price_kwh: float | None = Field(default=None, ge=0)

    # Diagnosis and alerts: tests shorten these.
    diagnosis_window_s: float = Field(default=30.0, gt=0)
    diagnosis_min_steps: int = Field(default=20, ge=1)
    stall_min_s: float = Field(default=60.0, gt=0)
    stall_step_factor: float = Field(default=20.0, gt=0)
    detector_tick_s: float = Field(default=0.5, gt=0)
    alert_value_window_s: float = Field(default=5.0, gt=0)
    webhook_timeout_s: float = Field(default=5.0, gt=0)
    webhook_attempts: int = Field(default=3, ge=1)
    webhook_backoff_s: float = Field(default=1.0, ge=0)
    webhook_queue_size: int = Field(default=1000, ge=1)
    webhook_deadline_s: float = Field(
        default=30.0, gt=0, description="one delivery, all its attempts, takes at most this"
    )
    webhook_max_response_bytes: int = Field(
        default=64 * 1024, ge=0, description="bytes of a receiver's answer read at most"
    )

    # Profiler captures from the browser.
    profile_max_steps: int = Field(default=200, ge=1)
    profile_max_s: float = Field(default=120.0, gt=0)  # the agent stops a capture after this
    profile_max_trace_bytes: int = Field(default=200 * 2**20, ge=1)
    profile_quota_bytes: int = Field(default=2 * 2**30, ge=0)  # stored traces, oldest evicted
    # Traces are analysed in a child process, one at a time, within these limits.
    profile_analysis_timeout_s: float = Field(
        default=300.0, gt=0, description="a trace's analysis (a child process) is killed after"
    )
    profile_analysis_max_bytes: int = Field(
        default=8 * 2**30, ge=64 * 2**20, description="the analysing child's address space"
    )

    # Retention (stoker_server.ingest.retention), like Prometheus's retention.time/.size:
    # an ended run older than retention_time_s, or beyond retention_size_bytes of raw rows
    # (newest runs kept first), keeps its summary and rollups but loses its raw steps and most
    # samples. 0 turns a limit off; "90d", "12h", "50GB", "500MiB" are understood.
    retention_time_s: float = Field(default=365 * 86400.0, ge=0)
    retention_size_bytes: int = Field(default=0, ge=0)
    retention_interval_s: float = Field(default=600.0, gt=0)
    # The data directory's disk is "nearly full" (the UI's banner) below either figure: a share
    # of the disk or a size ("1GB"); 0 turns one off. The default alert rule uses the share.
    disk_low_free_share: float = Field(default=0.05, ge=0, le=1)
    disk_low_free_bytes: int = Field(default=10**9, ge=0)

    @field_validator("retention_time_s", mode="before")
    @classmethod
    def _duration(cls, value: Any) -> Any:
        return _with_unit(value, _DURATION_UNITS)

    @field_validator(
        "retention_size_bytes", "disk_low_free_bytes", "max_config_bytes",
        "max_environment_bytes", "live_client_max_bytes", "webhook_max_response_bytes",
        "profile_analysis_max_bytes", mode="before",
    )  # fmt: skip
    @classmethod
    def _size(cls, value: Any) -> Any:
        return _with_unit(value, _SIZE_UNITS)

    @field_validator(
        "allowed_hosts", "allowed_origins", "webhook_allowed_hosts", "cors_origins", mode="before"
    )
    @classmethod
    def _names(cls, value: Any) -> Any:
        return _name_list(value)

    @field_validator("agent_token", "view_token", "admin_token", mode="before")
    @classmethod
    def _empty_is_unset(cls, value: Any) -> Any:
        # `STOKER_VIEW_TOKEN=` (compose passes empty values through) sets no token.
        return None if isinstance(value, str) and not value.strip() else value

    @model_validator(mode="after")
    def _watch_outlives_its_renewal(self) -> "Settings":
        if self.watch_expiry_s <= self.watch_refresh_s:
            raise ValueError(
                f"watch_expiry_s ({self.watch_expiry_s}) must exceed watch_refresh_s "
                f"({self.watch_refresh_s}): a watch would expire before it is renewed"
            )
        return self

    def resolved_database_url(self) -> str:
        """The database URL, defaulting to an SQLite file under the data directory."""
        if self.database_url:
            return self.database_url
        return f"sqlite:///{self.data_dir / 'stoker.db'}"


@lru_cache
def get_settings() -> Settings:
    return Settings()
