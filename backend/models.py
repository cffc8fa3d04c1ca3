"""Tables and API shapes. One family per entity: Base (shared), table, Public (output)."""

from datetime import UTC, datetime
from enum import StrEnum
from typing import Any

from sqlalchemy import JSON, Column, Index, UniqueConstraint
from sqlmodel import Field, SQLModel


def utc_now() -> datetime:
    return datetime.now(UTC)


class RunStatus(StrEnum):
    running = "running"
    finished = "finished"
    failed = "failed"
    interrupted = "interrupted"


class RunBase(SQLModel):
    name: str = Field(max_length=200)
    project: str = Field(default="default", max_length=200, index=True)
    tags: list[str] = Field(default_factory=list, sa_column=Column(JSON, nullable=False))
    notes: str = Field(default="", max_length=10_000)


class Run(RunBase, table=True):
    id: int | None = Field(default=None, primary_key=True)
    run_key: str = Field(max_length=128, unique=True, index=True)
    status: RunStatus = Field(default=RunStatus.running, index=True)
    started_at: datetime = Field(default_factory=utc_now, index=True)
    ended_at: datetime | None = None
    last_seen_at: datetime | None = None
    config: dict[str, Any] = Field(default_factory=dict, sa_column=Column(JSON, nullable=False))
    environment: dict[str, Any] = Field(
        default_factory=dict, sa_column=Column(JSON, nullable=False)
    )
    # Running aggregates, updated with every committed batch (see backend.summary).
    stats: dict[str, Any] = Field(default_factory=dict, sa_column=Column(JSON, nullable=False))


class RunSummary(SQLModel):
    steps: int = 0
    step_time_ms_median: float | None = None
    step_time_ms_p95: float | None = None
    input_wait_share: float | None = None
    gpu_util_mean: float | None = None
    samples_per_s: float | None = None


class RunPublic(RunBase):
    id: int
    status: RunStatus
    started_at: datetime
    ended_at: datetime | None
    last_seen_at: datetime | None
    config: dict[str, Any]
    environment: dict[str, Any]
    summary: RunSummary


class RunsPublic(SQLModel):
    data: list[RunPublic]
    count: int


class Step(SQLModel, table=True):
    """One training step of one worker (rank). Narrow on purpose: there are millions."""

    __table_args__ = (Index("ix_step_run_rank_step", "run_id", "rank", "step"),)

    id: int | None = Field(default=None, primary_key=True)
    run_id: int = Field(foreign_key="run.id", ondelete="CASCADE")
    rank: int = 0
    step: int
    t: float  # wall-clock start, unix seconds
    dur: float  # seconds
    wait: float | None = None  # seconds blocked waiting for input, when measured
    batch_size: int | None = None


class IngestCursor(SQLModel, table=True):
    """The highest batch seq committed per run and agent stream: replays are recognised here."""

    __table_args__ = (UniqueConstraint("run_id", "stream"),)

    id: int | None = Field(default=None, primary_key=True)
    run_id: int = Field(foreign_key="run.id", ondelete="CASCADE", index=True)
    stream: str = Field(max_length=200)
    last_seq: int = 0


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
