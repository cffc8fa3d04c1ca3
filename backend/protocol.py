"""Agent ⇄ server wire messages (DESIGN.md, "Wire protocol"). Strict: unknown fields are errors."""

import math
from typing import Annotated, Any, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    StringConstraints,
    field_validator,
    model_validator,
)

PROTOCOL_VERSION = 1

ShortText = Annotated[str, StringConstraints(max_length=200)]
Tag = Annotated[str, StringConstraints(min_length=1, max_length=100)]


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class Hello(_Strict):
    type: Literal["hello"]
    protocol: int
    run_key: Annotated[str, StringConstraints(min_length=8, max_length=128)]
    name: ShortText = ""
    project: ShortText = "default"
    tags: list[Tag] = Field(default_factory=list, max_length=100)
    config: dict[str, Any] = Field(default_factory=dict)
    environment: dict[str, Any] = Field(default_factory=dict)
    host: ShortText = ""
    pid: int = 0
    rank: int = Field(default=0, ge=0, le=100_000)

    @model_validator(mode="after")
    def _known_protocol(self) -> "Hello":
        if self.protocol != PROTOCOL_VERSION:
            raise ValueError(
                f"unsupported protocol version {self.protocol}; this server speaks "
                f"{PROTOCOL_VERSION}: upgrade the agent or the server so they match"
            )
        return self

    @property
    def stream(self) -> str:
        """Identifies one agent process within a run, for seq de-duplication."""
        return f"{self.host}:{self.rank}"


def _none_if_not_finite(values: Any) -> Any:
    if not isinstance(values, list):
        return values
    return [None if isinstance(v, float) and not math.isfinite(v) else v for v in values]


class _Columns(_Strict):
    """A columnar section: every column present has as many values as the first one."""

    @model_validator(mode="after")
    def _columns_align(self) -> "_Columns":
        lengths = {
            name: len(value) for name, value in self.__dict__.items() if isinstance(value, list)
        }
        first_name = next(iter(type(self).model_fields))
        expected = lengths.get(first_name, 0)
        for name, length in lengths.items():
            if length != expected:
                raise ValueError(
                    f"column {name!r} has {length} values, {first_name!r} has {expected}"
                )
        return self

    def __len__(self) -> int:
        return len(getattr(self, next(iter(type(self).model_fields))))

    def column(self, name: str) -> list[Any]:
        """A column's values, or nulls when the agent did not send it."""
        values = getattr(self, name)
        return values if values is not None else [None] * len(self)


class StepColumns(_Columns):
    step: list[Annotated[int, Field(ge=0)]]
    t: list[float]
    dur: list[Annotated[float, Field(ge=0)]]
    wait: list[Annotated[float, Field(ge=0)] | None] | None = None
    batch_size: list[Annotated[int, Field(ge=0)] | None] | None = None

    @field_validator("wait", mode="before")
    @classmethod
    def _non_finite_wait_is_unknown(cls, values: Any) -> Any:
        return _none_if_not_finite(values)

    @model_validator(mode="after")
    def _finite_times(self) -> "StepColumns":
        if not all(math.isfinite(v) for v in self.t):
            raise ValueError("column 't' must hold finite timestamps")
        if not all(math.isfinite(v) for v in self.dur):
            raise ValueError("column 'dur' must hold finite durations")
        if any(b <= a for a, b in zip(self.step, self.step[1:], strict=False)):
            raise ValueError("column 'step' must increase strictly within a batch")
        return self


OptionalFloats = list[float | None] | None
OptionalCounts = list[Annotated[float, Field(ge=0)] | None] | None


class MetricColumns(_Columns):
    step: list[Annotated[int, Field(ge=0)]]
    name: list[Annotated[str, StringConstraints(min_length=1, max_length=100)]]
    value: list[float | None]

    @field_validator("value", mode="before")
    @classmethod
    def _non_finite_is_null(cls, values: Any) -> Any:
        return _none_if_not_finite(values)


class DeviceColumns(_Columns):
    t: list[float]
    gpu: list[Annotated[int, Field(ge=0, le=1024)]]
    util: OptionalCounts = None
    mem_util: OptionalCounts = None
    mem_used: OptionalCounts = None
    mem_total: OptionalCounts = None
    proc_mem: OptionalCounts = None
    tf_mem_current: OptionalCounts = None
    tf_mem_peak: OptionalCounts = None
    temp_c: OptionalFloats = None
    power_w: OptionalCounts = None
    power_limit_w: OptionalCounts = None
    sm_clock_mhz: OptionalCounts = None
    throttle: list[Annotated[int, Field(ge=0)] | None] | None = None
    pcie_tx_bps: OptionalCounts = None
    pcie_rx_bps: OptionalCounts = None

    @field_validator("*", mode="before")
    @classmethod
    def _non_finite_is_null(cls, values: Any) -> Any:
        return _none_if_not_finite(values)

    @model_validator(mode="after")
    def _finite_times(self) -> "DeviceColumns":
        if not all(math.isfinite(v) for v in self.t if v is not None):
            raise ValueError("column 't' must hold finite timestamps")
        return self


class HostColumns(_Columns):
    t: list[float]
    proc_cpu: OptionalCounts = None
    sys_cpu: OptionalCounts = None
    rss: OptionalCounts = None
    mem_used: OptionalCounts = None
    mem_total: OptionalCounts = None

    @field_validator("*", mode="before")
    @classmethod
    def _non_finite_is_null(cls, values: Any) -> Any:
        return _none_if_not_finite(values)

    @model_validator(mode="after")
    def _finite_times(self) -> "HostColumns":
        if not all(math.isfinite(v) for v in self.t if v is not None):
            raise ValueError("column 't' must hold finite timestamps")
        return self


class AgentCounters(_Strict):
    dropped_rows: int = Field(default=0, ge=0)
    spooled_rows: int = Field(default=0, ge=0)


class Batch(_Strict):
    type: Literal["batch"]
    seq: int = Field(ge=1)
    steps: StepColumns | None = None
    metrics: MetricColumns | None = None
    device: DeviceColumns | None = None
    host: HostColumns | None = None
    agent: AgentCounters | None = None

    def row_count(self) -> int:
        sections = (self.steps, self.metrics, self.device, self.host)
        return sum(len(section) for section in sections if section is not None)


class End(_Strict):
    type: Literal["end"]
    status: Literal["finished", "failed", "interrupted"] = "finished"


class HttpIngest(_Strict):
    """The HTTP fallback and offline-upload shape: the hello plus the batches to store."""

    hello: Hello
    batches: list[Batch] = Field(default_factory=list, max_length=10_000)
    end: End | None = None
