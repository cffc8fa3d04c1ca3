"""Tables and API shapes. One family per entity: Base (shared), table, Public (output)."""

import math
from datetime import UTC, datetime
from enum import StrEnum
from typing import Annotated, Any, Literal

from pydantic import (
    AfterValidator,
    AnyHttpUrl,
    BaseModel,
    ConfigDict,
    StringConstraints,
    computed_field,
    model_validator,
)
from pydantic import Field as PydanticField
from sqlalchemy import JSON, BigInteger, Column, Float, Index, Integer, Table, UniqueConstraint
from sqlalchemy.dialects.postgresql import JSONB
from sqlmodel import Field, SQLModel

from stoker_server.core.levels import VERDICT_WORDS, Verdict, run_verdict
from stoker_server.core.metric_goals import named_direction
from stoker_server.core.text import Tag, no_nul

# Portable column types. Steps and row ids can pass 2**31 over a long life, so they are
# 64-bit on PostgreSQL; on SQLite an `INTEGER PRIMARY KEY` is already 64-bit and is the rowid
# (a BIGINT primary key would not auto-increment there). JSON is JSONB on PostgreSQL.
BigId = BigInteger().with_variant(Integer(), "sqlite")
Json = JSON().with_variant(JSONB(), "postgresql")
MAX_INT64 = 2**63 - 1


def utc_now() -> datetime:
    return datetime.now(UTC)


def _json(**kwargs: Any) -> Any:
    return Field(sa_column=Column(Json, nullable=False), **kwargs)


def _row_id() -> Any:
    return Field(default=None, sa_column=Column(BigId, primary_key=True, autoincrement=True))


def _big(**kwargs: Any) -> Any:
    return Field(sa_type=BigInteger, **kwargs)


class RunStatus(StrEnum):
    running = "running"
    finished = "finished"
    failed = "failed"
    interrupted = "interrupted"


class RunBase(SQLModel):
    name: str = Field(max_length=200)
    project: str = Field(default="default", max_length=200, index=True)
    tags: list[str] = _json(default_factory=list)
    notes: str = Field(default="", max_length=10_000)


class Run(RunBase, table=True):
    id: int | None = Field(default=None, primary_key=True)
    run_key: str = Field(max_length=128, unique=True, index=True)
    status: RunStatus = Field(default=RunStatus.running, index=True)
    started_at: datetime = Field(default_factory=utc_now, index=True)
    ended_at: datetime | None = None
    last_seen_at: datetime | None = None
    # Retention (stoker_server.ingest.retention): a pinned run keeps its raw rows; `compacted_at` is
    # when its raw steps and samples were reduced to rollups (null: every raw row is kept).
    pinned: bool = False
    compacted_at: datetime | None = None
    config: dict[str, Any] = _json(default_factory=dict)
    environment: dict[str, Any] = _json(default_factory=dict)
    # Running aggregates, updated with every committed batch (see stoker_server.ingest.summary).
    # Only the writer reads them; the public `summary` derived from them is stored beside them so
    # that listing runs never parses a histogram.
    stats: dict[str, Any] = _json(default_factory=dict)
    summary: dict[str, Any] = _json(default_factory=dict)


class EpochMetricSummary(SQLModel):
    """One epoch metric of a run: its latest value and its best (see summary.metric_goal)."""

    last: float | None = None
    last_epoch: int | None = None
    best: float | None = None
    best_epoch: int | None = None
    goal: Literal["min", "max"] = "min"
    # The goal is the metric's own direction (core.metric_goals), not a default: only such a
    # metric is ranked best in compare. Summaries stored before it was kept: by the name.
    directed: bool = True
    epochs: int = 0


class WorkerSummary(SQLModel):
    """One worker (rank) of a run: where it runs, how it ended, and its own steps."""

    rank: int
    host: str = ""
    pid: int = 0
    status: RunStatus = RunStatus.running
    steps: int = 0
    step_time_ms_median: float | None = None
    input_wait_share: float | None = None
    samples_per_s: float | None = None
    # Seconds this worker's steps (after step 0) were blocked on input.
    input_wait_s: float = 0.0
    # GPUs this worker trains on (see ingest.summary.gpu_count).
    gpus: int = 1


class RunSummary(SQLModel):
    # The job's steps: with several workers, the most any one worker ran (not their sum).
    steps: int = 0
    step_time_ms_median: float | None = None
    step_time_ms_p95: float | None = None
    input_wait_share: float | None = None
    # Seconds the steps of all workers were blocked on input, and those seconds times the GPUs
    # each worker trains on: the device time starvation cost ("Lost device time").
    input_wait_s: float = 0.0
    lost_gpu_s: float = 0.0
    gpu_util_mean: float | None = None
    samples_per_s: float | None = None
    peak_memory_bytes: float | None = None
    peak_tf_memory_bytes: float | None = None
    # NVML GPM means over the run: null where the GPUs have no GPM, never 0.
    sm_util_mean: float | None = None
    sm_occupancy_mean: float | None = None
    tensor_util_mean: float | None = None
    dram_bw_util_mean: float | None = None
    # Joules the run's GPUs drew (all GPUs, all workers); integrated from power where the
    # driver has no energy counter (`energy_integrated`).
    energy_j: float | None = None
    energy_integrated: bool = False
    duration_s: float | None = None
    dropped_rows: int = 0
    # Spooled batch files the run's agents could not read back (moved aside as *.bad).
    unreadable_spool_files: int = 0
    nonfinite_metrics: int = 0
    # Steps an ended run's agents still hold in their spools (sent later, automatically).
    steps_to_upload: int = 0
    epoch_metrics: dict[str, EpochMetricSummary] = Field(default_factory=dict)
    # Every worker that joined, by rank (one for a single process).
    workers: list[WorkerSummary] = Field(default_factory=list)

    @computed_field  # type: ignore[prop-decorator]
    @property
    def verdict(self) -> Verdict | None:
        """The whole run's input-bound level, from its measured input-wait share (null when
        the wait is not measured). Computed on read, never stored: the thresholds apply to
        every run, old or new (the windowed verdict is GET /runs/{id}/diagnosis)."""
        return run_verdict(self.input_wait_share)

    @computed_field  # type: ignore[prop-decorator]
    @property
    def verdict_label(self) -> str | None:
        """The verdict's words, as every surface writes them (levels.VERDICT_WORDS)."""
        verdict = self.verdict
        return None if verdict is None else VERDICT_WORDS[verdict]

    @model_validator(mode="after")
    def _directions_of_older_summaries(self) -> "RunSummary":
        for name, entry in self.epoch_metrics.items():
            if "directed" not in entry.model_fields_set:
                entry.directed = named_direction(name) is not None
        return self


class RunPublic(RunBase):
    id: int
    status: RunStatus
    started_at: datetime
    ended_at: datetime | None
    last_seen_at: datetime | None
    pinned: bool = False
    compacted_at: datetime | None = None
    config: dict[str, Any]
    environment: dict[str, Any]
    summary: RunSummary


class RunsPublic(SQLModel):
    data: list[RunPublic]
    count: int


class RunUpdate(SQLModel):
    """`PATCH /runs/{id}`: every field optional; only the ones sent change."""

    name: Annotated[str, AfterValidator(no_nul)] | None = Field(
        default=None, min_length=1, max_length=200
    )
    tags: list[Tag] | None = Field(default=None, max_length=100)
    notes: Annotated[str, AfterValidator(no_nul)] | None = Field(default=None, max_length=10_000)
    # Retention keeps a pinned run's raw rows.
    pinned: bool | None = None


class StepChunk(SQLModel, table=True):
    """Up to core.step_chunks.CHUNK_STEPS training steps of one worker (rank), each column
    an array (migration 0016: a row per step cost PostgreSQL an index entry per step)."""

    # (run_id, rank, first_step) is not unique (a restarted worker counts from 0 again), so
    # the database has no primary key; the ORM identifies a row by these three.
    __table_args__ = (Index("ix_stepchunk_run_rank_first", "run_id", "rank", "first_step"),)
    __mapper_args__ = {"primary_key": ["run_id", "rank", "first_step"]}

    run_id: int  # no foreign key (migration 0011: checked row by row, it halved ingest)
    rank: int = 0
    first_step: int = _big()  # the chunk's steps are sorted, spanning < CHUNK_SPAN numbers
    last_step: int = _big()
    first_t: float  # the earliest and latest step start, unix seconds
    last_t: float
    n: int
    # Little-endian arrays of n values: step int64, wall-clock start (unix s) float64,
    # duration (s) float64, input wait (s) float64 (NaN: not measured), batch size int64
    # (-1: unknown; NULL: none known).
    step: bytes
    t: bytes
    dur: bytes
    wait: bytes
    batch_size: bytes | None = None


class StepRollup(SQLModel, table=True):
    """Steps pre-aggregated into fixed buckets of `width` steps (bucket = step // width).

    Kept up to date at ingest, so a zoomed-out chart of a million-step run reads a few
    thousand rollup rows instead of every step.
    """

    # Keyed by its bucket (migration 0014): a surrogate id cost PostgreSQL a sequence and an
    # index on every upsert. No foreign key (migration 0017): checked row by row, it was
    # two thirds of a group's rollup time; a run's deletion removes them (api.edits).
    run_id: int = Field(primary_key=True)
    rank: int = Field(default=0, primary_key=True)
    width: int = Field(primary_key=True)
    bucket: int = _big(primary_key=True)
    n: int
    step_max: int = _big()
    t_max: float
    dur_sum: float
    dur_min: float
    dur_max: float
    wait_sum: float = 0.0
    wait_n: int = 0


class Metric(SQLModel, table=True):
    """A scalar the training loop logged (loss, accuracy, ...) at a step."""

    __table_args__ = (Index("ix_metric_run_name_step", "run_id", "name", "step"),)

    id: int | None = _row_id()
    run_id: int = Field(foreign_key="run.id", ondelete="CASCADE")
    rank: int = 0
    step: int = _big()
    name: str = Field(max_length=100)
    value: float | None = None  # null when the agent sent NaN or Inf (a diverged loss)


class EpochMetric(SQLModel, table=True):
    """A value Keras reported at the end of an epoch (loss, val_loss, learning_rate, ...).

    One row per (run, name, epoch): a resumed run that reports an epoch again replaces it.
    """

    __table_args__ = (
        UniqueConstraint("run_id", "name", "epoch", name="uq_epochmetric_run_name_epoch"),
    )

    id: int | None = _row_id()
    run_id: int = Field(foreign_key="run.id", ondelete="CASCADE")
    epoch: int = _big()
    step: int = _big()  # the run's step count when the epoch ended
    t: float  # unix seconds
    name: str = Field(max_length=100)
    value: float | None = None  # null when the agent sent NaN or Inf


class DeviceSample(SQLModel, table=True):
    """One timed reading of one GPU. Units: percent, bytes, °C, W, MHz, bytes/s."""

    __table_args__ = (Index("ix_device_run_gpu_t", "run_id", "gpu", "t"),)

    id: int | None = _row_id()
    run_id: int  # no foreign key (migration 0011: checked row by row, it halved ingest)
    rank: int = 0
    gpu: int
    t: float
    util: float | None = None
    mem_util: float | None = None
    mem_used: float | None = None
    mem_total: float | None = None
    proc_mem: float | None = None
    tf_mem_current: float | None = None
    tf_mem_peak: float | None = None
    temp_c: float | None = None
    power_w: float | None = None
    power_limit_w: float | None = None
    sm_clock_mhz: float | None = None
    throttle: int | None = _big(default=None)
    pcie_tx_bps: float | None = None
    pcie_rx_bps: float | None = None
    # NVML GPM, percent: null where unsupported, never 0.
    sm_util: float | None = None
    sm_occupancy: float | None = None
    tensor_util: float | None = None
    dram_bw_util: float | None = None
    fp32_util: float | None = None
    fp16_util: float | None = None
    # Joules since the run's first reading of this GPU; integrated from power where true.
    energy_j: float | None = None
    energy_integrated: bool | None = None


# The device fields a device rollup aggregates: every numeric field of DeviceSample.
DEVICE_ROLLUP_FIELDS = (
    "util", "mem_util", "mem_used", "mem_total", "proc_mem", "tf_mem_current", "tf_mem_peak",
    "temp_c", "power_w", "power_limit_w", "sm_clock_mhz", "throttle", "pcie_tx_bps",
    "pcie_rx_bps", "sm_util", "sm_occupancy", "tensor_util", "dram_bw_util", "fp32_util",
    "fp16_util", "energy_j",
)  # fmt: skip

# Device samples pre-aggregated into buckets of `width` seconds (bucket = floor(t / width)),
# per (run, rank, GPU): the count, first and last t, and per field the sum and count of its
# non-null values, its min and max. Kept up to date at ingest and by no one else, so a
# zoomed-out device chart of a days-long run reads a few thousand rows instead of every
# sample, and a compacted run keeps its true extremes. A plain table (84 field columns).
DeviceRollup = Table(
    "devicerollup",
    SQLModel.metadata,
    Column("run_id", Integer, primary_key=True),
    Column("rank", Integer, primary_key=True),
    Column("gpu", Integer, primary_key=True),
    Column("width", Integer, primary_key=True),
    Column("bucket", BigInteger, primary_key=True),
    Column("n", Integer, nullable=False),
    Column("t_min", Float, nullable=False),
    Column("t_max", Float, nullable=False),
    *(
        Column(
            f"{field}_{part}", Integer if part == "n" else Float, nullable=part in ("min", "max")
        )
        for field in DEVICE_ROLLUP_FIELDS
        for part in ("sum", "n", "min", "max")
    ),
)


class HostSample(SQLModel, table=True):
    """One timed reading of the training host and process."""

    __table_args__ = (Index("ix_host_run_t", "run_id", "t"),)

    id: int | None = _row_id()
    run_id: int  # no foreign key (migration 0011: checked row by row, it halved ingest)
    rank: int = 0
    t: float
    proc_cpu: float | None = None
    sys_cpu: float | None = None
    rss: float | None = None
    mem_used: float | None = None
    mem_total: float | None = None


class IngestCursor(SQLModel, table=True):
    """The highest batch seq committed per run and agent stream: replays are recognised here."""

    __table_args__ = (UniqueConstraint("run_id", "stream", name="uq_ingestcursor_run_stream"),)

    id: int | None = Field(default=None, primary_key=True)
    run_id: int = Field(foreign_key="run.id", ondelete="CASCADE", index=True)
    stream: str = Field(max_length=200)
    last_seq: int = _big(default=0)


class StepSeries(SQLModel):
    run_id: int
    total: int
    downsampled: bool
    step: list[int]
    t: list[float]
    dur: list[float]
    wait: list[float | None]
    dur_min: list[float] | None = None
    dur_max: list[float] | None = None
    # Retention reduced the run's raw steps to rollups: no point is finer than
    # `finest_steps` steps.
    compacted: bool = False
    finest_steps: int | None = None


class SeriesColumns(BaseModel):
    """One series as columns: the x column (`t`, `step` or `epoch`) and each field's values;
    downsampled, each field also has `<field>_min` and `<field>_max` (min and max per bucket).
    The columns depend on the fields asked for, so they are extra keys."""

    model_config = ConfigDict(extra="allow")


class DeviceSeriesItem(SeriesColumns):
    rank: int
    gpu: int
    total: int = PydanticField(description="rows in the series before downsampling")
    downsampled: bool


class DeviceSeries(BaseModel):
    run_id: int
    fields: list[str]
    series: list[DeviceSeriesItem]
    # Retention thinned the run's samples: zooming in shows no finer detail.
    compacted: bool = False


class HostSeriesItem(SeriesColumns):
    rank: int
    total: int = PydanticField(description="rows in the series before downsampling")
    downsampled: bool


class HostSeries(BaseModel):
    run_id: int
    fields: list[str]
    series: list[HostSeriesItem]
    # Retention thinned the run's samples: zooming in shows no finer detail.
    compacted: bool = False


class MetricSeriesItem(SeriesColumns):
    name: str
    axis: Literal["step", "epoch"]
    # Step series only: "running_mean_over_epoch" (Keras fit's batch logs) or "value".
    aggregation: str | None = PydanticField(default=None, exclude_if=lambda v: v is None)
    total: int = PydanticField(description="rows in the series before downsampling")
    downsampled: bool


class MetricSeries(BaseModel):
    run_id: int
    names: list[str]
    epoch_names: list[str]
    series: list[MetricSeriesItem]


class ComparedRun(BaseModel):
    id: int
    name: str
    project: str
    status: RunStatus
    tags: list[str]
    started_at: datetime
    ended_at: datetime | None
    summary: RunSummary


class Differences(BaseModel):
    """Flattened keys (`a.b.c`) whose values differ between the runs, one value per run."""

    config: dict[str, list[Any]]
    environment: dict[str, list[Any]]


class RunComparison(BaseModel):
    runs: list[ComparedRun]
    missing: list[int] = PydanticField(
        description="asked ids with no run (e.g. deleted), in the order asked; not in `runs`"
    )
    epoch_metrics: list[str]
    differences: Differences


class IngestResult(BaseModel):
    """POST /ingest: the run the batches went to and the seqs stored (or already stored)."""

    run_id: int
    acked: list[int]


class Health(BaseModel):
    status: str
    version: str


class AccessPublic(BaseModel):
    """What the presented token (or none) may do here: the UI shows only those actions."""

    roles: list[Literal["agent", "viewer", "admin"]] = PydanticField(
        description="the roles granted: viewer reads, admin also edits, deletes, manages "
        "alert rules and webhooks and starts profiles, agent delivers runs"
    )
    token_required: bool = PydanticField(description="reading needs a token on this server")
    admin_available: bool = PydanticField(
        description="false when the server has a viewer token and no admin token: nobody may "
        "edit or delete"
    )


# --- Diagnosis and alerts -----------------------------------------------------------------


class RunEvent(SQLModel, table=True):
    """Something that happened to a run: a verdict change, an alert transition."""

    __table_args__ = (Index("ix_runevent_run_at", "run_id", "at"),)

    id: int | None = Field(default=None, primary_key=True)
    run_id: int = Field(foreign_key="run.id", ondelete="CASCADE")
    at: datetime = Field(default_factory=utc_now)
    kind: str = Field(max_length=50)  # "verdict" | "alert"
    message: str = Field(default="", max_length=2000)
    data: dict[str, Any] = _json(default_factory=dict)


class RunEventPublic(SQLModel):
    id: int
    run_id: int
    at: datetime
    kind: str
    message: str
    data: dict[str, Any]


class RunEventsPublic(SQLModel):
    data: list[RunEventPublic]
    count: int


class AlertMetric(StrEnum):
    gpu_util = "gpu_util"  # percent, mean over the devices' recent samples
    input_wait_share = "input_wait_share"  # 0..1 over the diagnosis window
    step_time = "step_time"  # seconds, mean over the diagnosis window
    samples_per_s = "samples_per_s"
    memory_share = "memory_share"  # 0..1, the fullest device
    temperature = "temperature"  # °C, the hottest device
    no_data = "no_data"  # seconds since the run last sent anything
    stalled = "stalled"  # 1 while the run's verdict is `stalled`, else 0
    # Slowest worker's own step time over the median worker's (see diagnosis.own_step_times)
    straggler_ratio = "straggler_ratio"
    # NVML GPM, percent, mean over the devices' recent samples; no value (never 0)
    # on GPUs without GPM
    sm_util = "sm_util"
    tensor_util = "tensor_util"
    # How a run ended: 1 at the moment it ended that way (an event: the alert fires
    # once, then resolves after keep_firing_for_s). `run_failed` includes a process that died
    # without saying so (its run interrupted by the reaper, its agent gone).
    run_finished = "run_finished"
    run_failed = "run_failed"
    run_interrupted = "run_interrupted"
    # The rule's `metric_name` (a batch or epoch metric, e.g. "loss"): 1 while its latest value
    # is NaN or infinite, else 0; its latest value over its lowest so far (a factor, positive
    # values only)
    metric_nonfinite = "metric_nonfinite"
    metric_rise = "metric_rise"
    # The share by which throughput (steps per second, from the median step time) fell below
    # the run's own first `baseline_s` seconds, or below run `baseline_run_id`'s: 0.3 = 30 %
    throughput_drop = "throughput_drop"
    # The free share of the data directory's disk, 0..1: a server rule, not a
    # run's; its alerts have no run
    disk_free_share = "disk_free_share"


class Comparison(StrEnum):
    lt = "<"
    le = "<="
    gt = ">"
    ge = ">="


class AlertScope(StrEnum):
    all = "all"
    project = "project"
    run = "run"


class AlertState(StrEnum):
    pending = "pending"
    firing = "firing"
    resolved = "resolved"


class AlertRuleBase(SQLModel):
    name: str = Field(min_length=1, max_length=200)
    metric: AlertMetric
    comparison: Comparison
    threshold: float
    for_s: float = Field(default=0.0, ge=0, le=86_400)
    keep_firing_for_s: float = Field(default=0.0, ge=0, le=86_400)
    only_while_stepping: bool = False
    scope: AlertScope = AlertScope.all
    project: str | None = Field(default=None, max_length=200)
    run_id: int | None = None
    channels: list[dict[str, Any]] = _json(default_factory=lambda: [{"type": "browser"}])
    enabled: bool = True
    # The metric `metric_nonfinite` / `metric_rise` watch (default "loss"); the
    # throughput baseline (`baseline_run_id`, else the run's own first `baseline_s` seconds);
    # the action "capture `profile_steps` steps of profile" when the alert fires (null: none).
    metric_name: str | None = Field(default=None, max_length=100)
    baseline_run_id: int | None = None
    baseline_s: float | None = Field(default=None, gt=0, le=86_400)
    profile_steps: int | None = Field(default=None, ge=1, le=100_000)


class AlertRule(AlertRuleBase, table=True):
    __tablename__ = "alert_rule"

    id: int | None = Field(default=None, primary_key=True)
    builtin: str | None = Field(default=None, max_length=50)
    created_at: datetime = Field(default_factory=utc_now)
    updated_at: datetime = Field(default_factory=utc_now)


class AlertRulePublic(AlertRuleBase):
    id: int
    builtin: str | None
    created_at: datetime
    updated_at: datetime


class BrowserChannel(BaseModel):
    model_config = ConfigDict(extra="forbid")
    type: Literal["browser"]


class WebhookChannel(BaseModel):
    model_config = ConfigDict(extra="forbid")
    type: Literal["webhook"]
    url: AnyHttpUrl
    format: Literal["json", "slack"] = "json"


Channel = Annotated[BrowserChannel | WebhookChannel, PydanticField(discriminator="type")]


def _finite(value: float) -> float:
    if not math.isfinite(value):
        raise ValueError("threshold must be a finite number")
    return value


# What a user's rule may hold: text both databases can store (PostgreSQL text cannot hold
# NUL), ids in a row id's range, a finite threshold, channels of a known type.
RuleText = Annotated[str, StringConstraints(min_length=1, max_length=200), AfterValidator(no_nul)]
RuleRunId = Annotated[int, PydanticField(ge=1, le=2**31 - 1)]
MetricName = Annotated[str, StringConstraints(min_length=1, max_length=100), AfterValidator(no_nul)]
Threshold = Annotated[float, AfterValidator(_finite)]


def _browser_only() -> list[Channel]:
    return [BrowserChannel(type="browser")]


def check_scope(scope: AlertScope, project: str | None, run_id: int | None) -> None:
    if scope == AlertScope.project and not project:
        raise ValueError("scope 'project' needs a 'project' name")
    if scope == AlertScope.run and run_id is None:
        raise ValueError("scope 'run' needs a 'run_id'")


# `POST /alert-rules`: the base's fields, checked as a user's input.
class AlertRuleCreate(AlertRuleBase):
    # SQLModel types model_config as its own ConfigDict subtype.
    model_config = ConfigDict(extra="forbid")  # type: ignore[assignment]

    name: RuleText
    threshold: Threshold
    project: RuleText | None = None
    run_id: RuleRunId | None = None
    # Checked channels; stored as their JSON (the table's `channels`).
    channels: list[Channel] = PydanticField(  # type: ignore[assignment]
        default_factory=_browser_only, max_length=20
    )
    metric_name: MetricName | None = None
    baseline_run_id: RuleRunId | None = None

    @model_validator(mode="after")
    def _scope_names_its_target(self) -> "AlertRuleCreate":
        check_scope(self.scope, self.project, self.run_id)
        return self


# `PATCH /alert-rules/{id}`: every field optional, only the ones sent change. The overrides
# make the base's required fields optional, which the type checker cannot accept.
class AlertRuleUpdate(AlertRuleBase):
    model_config = ConfigDict(extra="forbid")  # type: ignore[assignment]

    name: RuleText | None = None  # type: ignore[assignment]
    metric: AlertMetric | None = None  # type: ignore[assignment]
    comparison: Comparison | None = None  # type: ignore[assignment]
    threshold: Threshold | None = None  # type: ignore[assignment]
    for_s: float | None = PydanticField(default=None, ge=0, le=86_400)  # type: ignore[assignment]
    keep_firing_for_s: float | None = PydanticField(default=None, ge=0, le=86_400)  # type: ignore[assignment]
    only_while_stepping: bool | None = None  # type: ignore[assignment]
    scope: AlertScope | None = None  # type: ignore[assignment]
    project: RuleText | None = None
    run_id: RuleRunId | None = None
    channels: list[Channel] | None = PydanticField(default=None, max_length=20)  # type: ignore[assignment]
    enabled: bool | None = None  # type: ignore[assignment]
    metric_name: MetricName | None = None
    baseline_run_id: RuleRunId | None = None


class AlertRulesPublic(SQLModel):
    data: list[AlertRulePublic]
    count: int


class Alert(SQLModel, table=True):
    """One episode of one rule on one run (or on the server: no run): pending, then perhaps
    firing, then resolved."""

    __table_args__ = (Index("ix_alert_run_state", "run_id", "state"),)

    id: int | None = Field(default=None, primary_key=True)
    rule_id: int | None = Field(default=None, foreign_key="alert_rule.id", ondelete="SET NULL")
    run_id: int | None = Field(default=None, foreign_key="run.id", ondelete="CASCADE")
    rule_name: str = Field(max_length=200)
    state: AlertState = Field(index=True)
    value: float | None = None
    message: str = Field(default="", max_length=2000)
    started_at: datetime = Field(default_factory=utc_now)  # pending since
    fired_at: datetime | None = None
    resolved_at: datetime | None = None
    # One entry per webhook delivery attempt series: url, event, status, attempts, error.
    deliveries: list[dict[str, Any]] = _json(default_factory=list)
    # The profile this alert's rule captured when it fired, if any.
    profile_id: int | None = None


class AlertPublic(SQLModel):
    id: int
    rule_id: int | None
    run_id: int | None  # None: a server alert (disk)
    rule_name: str
    state: AlertState
    value: float | None
    message: str
    started_at: datetime
    fired_at: datetime | None
    resolved_at: datetime | None
    deliveries: list[dict[str, Any]]
    profile_id: int | None = None


class AlertsPublic(SQLModel):
    data: list[AlertPublic]
    count: int


class SeedMarker(SQLModel, table=True):
    """Records one-time setup already done (e.g. default alert rules created)."""

    __tablename__ = "seed_marker"

    key: str = Field(primary_key=True, max_length=100)
    at: datetime = Field(default_factory=utc_now)


# --- Profiler captures --------------------------------------------------------------------


class ProfileStatus(StrEnum):
    requested = "requested"
    capturing = "capturing"
    uploading = "uploading"
    ready = "ready"
    failed = "failed"


class Profile(SQLModel, table=True):
    """One TensorFlow profiler capture of a run, asked for from the browser."""

    id: int | None = Field(default=None, primary_key=True)
    run_id: int = Field(foreign_key="run.id", ondelete="CASCADE", index=True)
    status: ProfileStatus = ProfileStatus.requested
    steps: int
    created_at: datetime = Field(default_factory=utc_now)
    updated_at: datetime = Field(default_factory=utc_now)
    first_step: int | None = _big(default=None)
    last_step: int | None = _big(default=None)
    error: str | None = Field(default=None, max_length=2000)
    trace_bytes: int | None = _big(default=None)  # announced size of the trace
    received_bytes: int = _big(default=0)
    trace_evicted: bool = False
    overhead: dict[str, Any] = _json(default_factory=dict)
    analysis: dict[str, Any] = _json(default_factory=dict)
    input_share_profiler: float | None = None
    input_share_stoker: float | None = None
    # Each asked worker's part, by rank (str): ProfileWorker's fields.
    workers: dict[str, Any] = _json(default_factory=dict)
    # The alert whose rule asked for this capture; null when a user did.
    alert_id: int | None = None


class ProfileWorker(SQLModel):
    """One worker's part of a capture: every connected agent of the run is asked, each uploads
    its own trace into the profile."""

    rank: int
    status: ProfileStatus
    error: str | None = None
    first_step: int | None = None
    last_step: int | None = None
    overhead: dict[str, Any] = Field(default_factory=dict)
    trace_bytes: int | None = None
    received_bytes: int = 0
    # Failed only because the server heard nothing from it: a late trace is still accepted.
    lost: bool = False
    # xprof's analysis of this worker's trace alone: conclusion, step_ms_average,
    # breakdown_ms, step_range (the profile's own analysis is of all traces together).
    analysis: dict[str, Any] = Field(default_factory=dict)
    input_share_profiler: float | None = None
    input_share_stoker: float | None = None


class ProfilePublic(SQLModel):
    id: int
    run_id: int
    status: ProfileStatus
    steps: int
    created_at: datetime
    first_step: int | None
    last_step: int | None
    error: str | None
    trace_bytes: int | None
    trace_evicted: bool
    overhead: dict[str, Any]
    analysis: dict[str, Any]
    input_share_profiler: float | None
    input_share_stoker: float | None
    workers: list[ProfileWorker] = Field(default_factory=list)
    alert_id: int | None = None


class ProfilesPublic(SQLModel):
    data: list[ProfilePublic]
    count: int


class PipelineRead(SQLModel, table=True):
    """One read of a run's tf.data autotuning model: its stages, source first.

    Only the latest `MAX_PIPELINE_READS` reads of a run are kept
    (backend/stoker_server/ingest/pipeline_store.py).
    """

    __table_args__ = (Index("ix_pipelineread_run_t", "run_id", "t"),)

    id: int | None = _row_id()
    run_id: int = Field(foreign_key="run.id", ondelete="CASCADE")
    rank: int = 0
    t: float
    source: str = Field(max_length=20)  # "autotune_model" | "unavailable"
    stages: list[dict[str, Any]] = _json(default_factory=list)
    read_us: float | None = None


# `stoker tune` (trainer_agent/tune/): a group of trial runs and the table comparing them.
TuneText = Annotated[str, StringConstraints(max_length=2000), AfterValidator(no_nul)]
TuneLabel = Annotated[str, StringConstraints(max_length=300), AfterValidator(no_nul)]
TuneKey = Annotated[
    str, StringConstraints(min_length=8, max_length=64, pattern=r"^[A-Za-z0-9_-]+$")
]
RunKey = Annotated[str, StringConstraints(min_length=8, max_length=128), AfterValidator(no_nul)]
Figure = Annotated[float, PydanticField(allow_inf_nan=False)]
Count = Annotated[int, PydanticField(ge=0, le=MAX_INT64)]


class TuneStatus(StrEnum):
    running = "running"
    finished = "finished"
    failed = "failed"
    interrupted = "interrupted"


class _TuneInput(BaseModel):
    model_config = ConfigDict(extra="forbid")


class TuneEdit(_TuneInput):
    """The line to edit: the call as written and as changed."""

    where: TuneLabel
    path: TuneText = ""
    line: int = PydanticField(ge=0, le=10_000_000)
    before: TuneText
    after: TuneText


class TuneRow(_TuneInput):
    """One change of the tune table (trainer_agent/tune/table.py's `Row`)."""

    id: TuneLabel
    advice: TuneLabel = ""
    label: TuneLabel
    title: TuneText = ""
    verdict: TuneLabel
    note: TuneText = ""
    steps_per_s: Figure | None = None
    input_wait_share: Figure | None = None
    speedup: Figure | None = None
    repeat_steps_per_s: Figure | None = None
    repeat_speedup: Figure | None = None
    batches: Count | None = None
    examples: Count | None = None
    cpu_cores: Figure | None = None
    function: TuneLabel | None = None
    defined_at: TuneText | None = None
    edit: TuneEdit | None = None
    keeps: TuneText = ""
    run_key: RunKey | None = None
    repeat_run_key: RunKey | None = None


class TuneTable(_TuneInput):
    rows: list[TuneRow] = PydanticField(default_factory=list, max_length=100)
    steps: Count = 0
    noise: Figure | None = None
    noise_text: TuneText = ""
    best: TuneLabel | None = None
    conclusion: TuneText = ""
    elements_text: TuneText = ""
    warnings: list[TuneText] = PydanticField(default_factory=list, max_length=20)
    # Why the group gave no table (its unchanged run failed).
    error: TuneText | None = None


class TuneTrial(_TuneInput):
    """One trial of the group and the run it streamed as."""

    id: TuneLabel  # "unchanged", a change id, or "repeat"
    label: TuneLabel
    run_key: RunKey


class TuneGroupIn(_TuneInput):
    """`POST /tune-groups`: the whole group as `stoker tune` knows it now (stored by `key`)."""

    key: TuneKey
    name: Annotated[str, StringConstraints(max_length=200), AfterValidator(no_nul)] = ""
    project: Annotated[str, StringConstraints(max_length=200), AfterValidator(no_nul)] = "default"
    command: list[TuneText] = PydanticField(default_factory=list, max_length=200)
    cwd: TuneText = ""
    steps: int = PydanticField(ge=1, le=10_000_000)
    status: TuneStatus = TuneStatus.running
    trials: list[TuneTrial] = PydanticField(default_factory=list, max_length=100)
    table: TuneTable = PydanticField(default_factory=TuneTable)


class TuneGroup(SQLModel, table=True):
    """A `stoker tune` invocation: its trials (runs, by run key) and its table."""

    id: int | None = Field(default=None, primary_key=True)
    key: str = Field(max_length=64, unique=True, index=True)
    name: str = Field(default="", max_length=200)
    project: str = Field(default="default", max_length=200)
    command: list[str] = _json(default_factory=list)
    cwd: str = Field(default="", max_length=2000)
    steps: int = 0
    status: TuneStatus = TuneStatus.running
    created_at: datetime = Field(default_factory=utc_now, index=True)
    updated_at: datetime = Field(default_factory=utc_now)
    trials: list[dict[str, Any]] = _json(default_factory=list)
    table: dict[str, Any] = _json(default_factory=dict)


class TuneTrialPublic(SQLModel):
    id: str
    label: str
    run_key: str
    # The run the trial streamed as (null until the server has it, or once it is deleted).
    run_id: int | None = None
    run_status: RunStatus | None = None


class TuneGroupPublic(SQLModel):
    id: int
    key: str
    name: str
    project: str
    command: list[str]
    cwd: str
    steps: int
    status: TuneStatus
    created_at: datetime
    updated_at: datetime
    trials: list[TuneTrialPublic]
    table: TuneTable


class TuneGroupsPublic(SQLModel):
    data: list[TuneGroupPublic]
    count: int
