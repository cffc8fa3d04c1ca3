"""Server configuration from `STOKER_*` environment variables; the common ones are also
`stoker serve` flags. docs/settings.md lists them all (generated from this model and the
agent's: core/settings_reference.py)."""

import json
from functools import lru_cache
from pathlib import Path
from typing import Annotated, Any

from pydantic import Field, ValidationInfo, field_validator, model_validator
from pydantic_settings import BaseSettings, NoDecode, SettingsConfigDict

from trainer_agent.setting_units import parse_duration_s, parse_size_bytes


def _default_data_dir() -> Path:
    return Path.home() / ".stoker"


# A list setting from the environment: JSON (`'["a", "b"]'`) or comma-separated (`a,b`).
NameList = Annotated[list[str], NoDecode]


def _name_list(value: Any) -> Any:
    if not isinstance(value, str):
        return value
    text = value.strip()
    if text.startswith("["):
        return json.loads(text)
    return [part.strip() for part in text.split(",") if part.strip()]


def _flag(flag: str) -> dict[str, Any]:
    """The `stoker serve` / `stoker demo` flag that sets a field too (the settings reference)."""
    return {"flag": flag}


class Settings(BaseSettings):
    """The server's settings: each field is `STOKER_<FIELD>` in the environment. A duration
    (a field ending `_s`) and a size (`_bytes`) are read like the agent's, through
    trainer_agent/setting_units.py: "90s", "2m", "12h", "90d", "50GB", "500MiB"."""

    model_config = SettingsConfigDict(env_prefix="STOKER_", extra="ignore")

    host: str = Field(
        default="127.0.0.1",
        description="the address to listen on (loopback only by default)",
        json_schema_extra=_flag("--host"),
    )
    port: int = Field(default=8470, description="the port", json_schema_extra=_flag("--port"))
    data_dir: Path = Field(
        default_factory=_default_data_dir,
        description="where the SQLite database and profiler traces are kept",
        json_schema_extra={**_flag("--data-dir"), "default_text": "~/.stoker"},
    )
    database_url: str | None = Field(
        default=None,
        description="an SQLAlchemy URL (postgresql+psycopg://... for PostgreSQL); unset: an "
        "SQLite file in the data directory",
        json_schema_extra=_flag("--database-url"),
    )
    # Who may do what (core/auth.py, docs/security.md). Each token is the token itself or
    # its hash, `sha256:<64 hex digits>`; an empty value is unset.
    agent_token: str | None = Field(
        default=None,
        description="the token agents deliver with (the agent WebSocket, POST /ingest); it "
        "reads nothing. Unset: open on loopback, made on first start beyond it",
    )
    view_token: str | None = Field(
        default=None,
        description="the token reading needs (every GET, the live socket, /metrics). Unset: "
        "open on loopback, made on first start beyond it",
    )
    admin_token: str | None = Field(
        default=None,
        description="the token that also edits and deletes runs, manages alert rules and "
        "webhooks and starts profiles; unset while a view token is set: those actions are off",
    )
    no_auth: bool = Field(
        default=False,
        description="serve without tokens even when bound beyond loopback (said at start); "
        "without it such a server makes tokens on first start (<data_dir>/tokens.json)",
        json_schema_extra=_flag("--no-auth"),
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
    max_frame_bytes: int = Field(
        default=8 * 1024 * 1024, description="the largest WebSocket frame an agent may send"
    )
    max_request_bytes: int = Field(
        default=8 * 1024 * 1024,
        description="the largest HTTP request body (the ingest fallback and offline upload "
        "carry many batches)",
    )
    heartbeat_timeout_s: float = Field(
        default=60.0,
        description="a running run with no agent connected and nothing heard for this long is "
        "interrupted",
    )
    cors_origins: NameList = Field(
        default=[],
        description="browser origins allowed to call the API from another site; none by "
        "default (CORS off)",
    )
    max_batch_rows: int = Field(default=100_000, description="the most rows one batch may carry")
    max_config_bytes: int = Field(
        default=64 * 1024, ge=1024, description="a run's config as JSON, at most (413 beyond)"
    )
    max_environment_bytes: int = Field(
        default=64 * 1024, ge=1024, description="a run's environment as JSON, at most (413)"
    )
    live_queue_size: int = Field(
        default=1000,
        description="live messages a browser may fall behind by before its oldest are dropped",
    )
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
    ws_compression: bool = Field(
        default=False,
        description="permessage-deflate on WebSockets: off, because compressing every live "
        "message for every browser costs more CPU than the bytes cost on loopback or a LAN",
    )
    switch_interval_s: float = Field(
        default=0.0005,
        gt=0,
        le=0.1,
        description="Python's GIL switch interval in the server process (see cli.serve)",
    )
    live_run_interval_s: float = Field(
        default=1.0,
        ge=0.0,
        le=60.0,
        description="a streaming run's summary reaches browsers at most this often",
    )
    watch_refresh_s: float = Field(
        default=3.0,
        gt=0,
        le=3600,
        description="several servers on one PostgreSQL: how often each re-announces the runs "
        "its browsers watch",
    )
    watch_expiry_s: float = Field(
        default=10.0,
        gt=0,
        le=86400,
        description="... and how long another's watch lives unrenewed (a server that died "
        "leaves its agents at the watched pace that long at most)",
    )
    log_level: str = Field(default="info", description="debug, info, warning or error")
    gpu_hour_price: float | None = Field(
        default=None,
        ge=0,
        description="what one GPU-hour costs: starvation's lost GPU-hours are also shown as "
        'money (docs/api.md, "Starvation cost"); unset shows hours only',
    )
    currency: str = Field(
        default="$", max_length=8, description="the symbol written before those amounts"
    )
    energy_price_kwh: float | None = Field(
        default=None,
        ge=0,
        description="what one kWh costs: GPU energy, and the energy burned while starved, are "
        "also shown as money (docs/gpu.md); unset shows joules and kWh only",
    )

    # Diagnosis and alerts: tests shorten these.
    diagnosis_window_s: float = Field(
        default=30.0, gt=0, description="the verdict's sliding window"
    )
    diagnosis_min_steps: int = Field(
        default=20, ge=1, description="steps a verdict needs in its window"
    )
    stall_min_s: float = Field(
        default=60.0,
        gt=0,
        description="a run is stalled after max(stall_min_s, stall_step_factor x its median "
        "step) without a step while its process lives",
    )
    stall_step_factor: float = Field(default=20.0, gt=0, description="see stall_min_s")
    detector_tick_s: float = Field(
        default=0.5, gt=0, description="how often verdicts and alert rules are evaluated"
    )
    alert_value_window_s: float = Field(
        default=5.0,
        gt=0,
        description="the alert rules judge device values averaged over this long",
    )
    webhook_timeout_s: float = Field(default=5.0, gt=0, description="one webhook request's limit")
    webhook_attempts: int = Field(default=3, ge=1, description="tries per webhook delivery")
    webhook_backoff_s: float = Field(
        default=1.0, ge=0, description="the wait before a webhook's first retry (doubled after)"
    )
    webhook_queue_size: int = Field(
        default=1000, ge=1, description="deliveries waiting at most (beyond: dropped, recorded)"
    )
    webhook_deadline_s: float = Field(
        default=30.0, gt=0, description="one delivery, all its attempts, takes at most this"
    )
    webhook_max_response_bytes: int = Field(
        default=64 * 1024, ge=0, description="bytes of a receiver's answer read at most"
    )

    # Profiler captures from the browser.
    profile_max_steps: int = Field(default=200, ge=1, description="the most steps one capture")
    profile_max_s: float = Field(
        default=120.0, gt=0, description="the agent stops a capture after this long"
    )
    profile_max_trace_bytes: int = Field(
        default=200 * 2**20, ge=1, description="the largest trace one worker may upload"
    )
    profile_quota_bytes: int = Field(
        default=2 * 2**30,
        ge=0,
        description="stored traces at most; the oldest are evicted, and a profile whose own "
        "traces are over it is not analysed",
    )
    # Traces are analysed in a child process, one at a time, within these limits.
    profile_analysis_timeout_s: float = Field(
        default=300.0, gt=0, description="a trace's analysis (a child process) is killed after"
    )
    profile_analysis_max_bytes: int = Field(
        default=8 * 2**30, ge=64 * 2**20, description="the analysing child's address space"
    )

    # Retention (stoker_server.ingest.retention), like Prometheus's retention.time/.size.
    retention_time_s: float = Field(
        default=365 * 86400.0,
        ge=0,
        description="an ended run older than this keeps its summary and rollups but loses its "
        "raw steps and most samples; 0: no limit",
    )
    retention_size_bytes: int = Field(
        default=0,
        ge=0,
        description="... as do the oldest runs beyond this many bytes of raw rows (newest kept "
        "first); 0: no limit",
    )
    retention_interval_s: float = Field(default=600.0, gt=0, description="how often retention runs")
    disk_low_free_share: float = Field(
        default=0.05,
        ge=0,
        le=1,
        description="the data directory's disk is nearly full (the UI's banner) below this "
        "share free; 0: off. The default alert rule uses it",
    )
    disk_low_free_bytes: int = Field(
        default=10**9, ge=0, description="... or below this many bytes free; 0: off"
    )

    @field_validator("*", mode="before")
    @classmethod
    def _with_unit(cls, value: Any, info: ValidationInfo) -> Any:
        """A duration or size written with a unit, in seconds or bytes."""
        if not isinstance(value, str) or info.field_name is None:
            return value
        if info.field_name.endswith("_s"):
            return parse_duration_s(value)
        if info.field_name.endswith("_bytes"):
            return parse_size_bytes(value)
        return value

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
