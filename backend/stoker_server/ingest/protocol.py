"""Agent ⇄ server wire messages (docs/protocol.md). Strict: unknown fields are errors."""

import json
import math
from typing import Annotated, Any, Literal

import numpy as np
import orjson
from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Field,
    PrivateAttr,
    StringConstraints,
    field_validator,
    model_validator,
)

from stoker_server.core.text import Tag, no_nul

PROTOCOL_VERSION = 1
MAX_INT64 = 2**63 - 1


def clean_json(value: Any) -> Any:
    """JSON as both databases store it: NaN/Inf become null, NUL characters are dropped."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, str):
        return no_nul(value)
    if isinstance(value, dict):
        return {no_nul(str(k)): clean_json(v) for k, v in value.items()}
    if isinstance(value, list):
        return [clean_json(v) for v in value]
    return value


ShortText = Annotated[str, StringConstraints(max_length=200), AfterValidator(no_nul)]
JsonObject = Annotated[dict[str, Any], AfterValidator(clean_json)]
Int64 = Annotated[int, Field(ge=0, le=MAX_INT64)]
# Checked by pydantic-core itself: a Python validator per value cost more than the parsing.
FiniteTime = Annotated[float, Field(allow_inf_nan=False)]


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class Hello(_Strict):
    type: Literal["hello"]
    protocol: int
    run_key: Annotated[str, StringConstraints(min_length=8, max_length=128)]
    name: ShortText = ""
    project: ShortText = "default"
    tags: list[Tag] = Field(default_factory=list, max_length=100)
    config: JsonObject = Field(default_factory=dict)
    environment: JsonObject = Field(default_factory=dict)
    host: ShortText = ""
    pid: int = Field(default=0, ge=0, le=MAX_INT64)
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
    try:
        if math.isfinite(sum(values)):  # the common case, checked in C: nothing to replace
            return values
    except TypeError:  # nulls (or garbage, which validation then refuses)
        pass
    return [None if isinstance(v, float) and not math.isfinite(v) else v for v in values]


class Columns(_Strict):
    """A columnar section: every column present has as many values as the first one."""

    @model_validator(mode="after")
    def _columns_align(self) -> "Columns":
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


# step (int64), t, dur, wait and batch_size (float64, NaN: unknown)
StepColumnArrays = tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray]


class StepColumns(Columns):
    step: list[Int64]
    t: list[FiniteTime]
    dur: list[Annotated[float, Field(ge=0, allow_inf_nan=False)]]
    wait: list[Annotated[float, Field(ge=0)] | None] | None = None
    batch_size: list[Int64 | None] | None = None

    @field_validator("wait", mode="before")
    @classmethod
    def _non_finite_wait_is_unknown(cls, values: Any) -> Any:
        return _none_if_not_finite(values)

    # The columns as arrays, made once at parse and shared by the writer (rows, rollups,
    # statistics) and the detectors' window: each converting the lists again cost the event
    # loop and the writer as much as the parse.
    _arrays: StepColumnArrays | None = PrivateAttr(default=None)

    @model_validator(mode="after")
    def _steps_increase(self) -> "StepColumns":
        step = self.arrays()[0]
        if len(step) > 1 and not bool(np.all(step[1:] > step[:-1])):
            raise ValueError("column 'step' must increase strictly within a batch")
        return self

    def arrays(self) -> StepColumnArrays:
        """step (int64), t, dur, wait (NaN: unknown) and batch_size (float64, NaN: unknown;
        past 2**53 it rounds: exact values stay in the list)."""
        if self._arrays is None:
            self._arrays = (
                np.asarray(self.step, dtype=np.int64),
                np.asarray(self.t, dtype=np.float64),
                np.asarray(self.dur, dtype=np.float64),
                np.asarray(self.column("wait"), dtype=np.float64),
                np.asarray(self.column("batch_size"), dtype=np.float64),
            )
        return self._arrays


OptionalFloats = list[float | None] | None
OptionalCounts = list[Annotated[float, Field(ge=0)] | None] | None


class MetricColumns(Columns):
    step: list[Int64]
    name: list[Tag]
    value: list[float | None]

    @field_validator("value", mode="before")
    @classmethod
    def _non_finite_is_null(cls, values: Any) -> Any:
        return _none_if_not_finite(values)


class EpochColumns(MetricColumns):
    """Keras's epoch-end logs (and standalone `evaluate()` results): one row per (epoch, name).

    `epoch` is Keras's 0-based epoch index, `step` the run's step count when the epoch ended
    (its position on a step axis), `t` unix seconds; `name` and `value` as in `metrics`.
    """

    epoch: list[Annotated[int, Field(ge=0, le=MAX_INT64)]]
    t: list[FiniteTime]


class DeviceColumns(Columns):
    t: list[FiniteTime]
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
    throttle: list[Int64 | None] | None = None
    pcie_tx_bps: OptionalCounts = None
    pcie_rx_bps: OptionalCounts = None
    # NVML GPM (Hopper and newer), percent over the window since the previous row;
    # null where the GPU or the metric is unsupported, never 0.
    sm_util: OptionalCounts = None
    sm_occupancy: OptionalCounts = None
    tensor_util: OptionalCounts = None
    dram_bw_util: OptionalCounts = None
    fp32_util: OptionalCounts = None
    fp16_util: OptionalCounts = None
    # Joules this GPU drew since the run's first reading of it (cumulative), and whether they
    # were integrated from power because the driver has no energy counter.
    energy_j: OptionalCounts = None
    energy_integrated: list[bool | None] | None = None

    @field_validator("*", mode="before")
    @classmethod
    def _non_finite_is_null(cls, values: Any) -> Any:
        return _none_if_not_finite(values)


class HostColumns(Columns):
    t: list[FiniteTime]
    proc_cpu: OptionalCounts = None
    sys_cpu: OptionalCounts = None
    rss: OptionalCounts = None
    mem_used: OptionalCounts = None
    mem_total: OptionalCounts = None

    @field_validator("*", mode="before")
    @classmethod
    def _non_finite_is_null(cls, values: Any) -> Any:
        return _none_if_not_finite(values)


MAX_PIPELINE_STAGES = 64
OptionalFinite = Annotated[float, Field(ge=0, allow_inf_nan=False)] | None


class StageFunction(_Strict):
    """A user's function a stage runs, with where it is written (for advice on that line)."""

    name: ShortText
    file: ShortText | None = None
    line: int | None = Field(default=None, ge=0, le=100_000_000)
    calls_python: bool = False  # through tf.numpy_function or tf.py_function


IteratorPath = Annotated[str, StringConstraints(max_length=400), AfterValidator(no_nul)]


class PipelineStage(_Strict):
    """One stage of tf.data's autotuning model (trainer_agent/capture/pipeline_model.py)."""

    position: int = Field(ge=0, le=MAX_PIPELINE_STAGES)
    kind: Tag
    name: ShortText
    # The user's functions it runs, joined by "+" when tf.data fused several into it.
    function: ShortText | None = None
    functions: list[StageFunction] = Field(default_factory=list, max_length=8)
    # Its iterator's name in profiler traces ("Iterator::Root::Prefetch::MapAndBatch").
    path: IteratorPath = ""
    # It runs the user's map(s) written without num_parallel_calls, one element at a time
    # (a map fused with its batch included), whatever its rate seems to show.
    serial: bool = False
    parallelism: OptionalFinite = None
    ms_per_element: OptionalFinite = None
    elements: Int64 = 0
    buffered: Int64 = 0
    buffer_size: OptionalFinite = None
    bytes_per_element: OptionalFinite = None


class PipelineColumns(Columns):
    """One row per read of the model: `stages` holds the row's list of stages."""

    t: list[FiniteTime]
    source: list[Literal["autotune_model", "unavailable"]]
    stages: list[Annotated[list[PipelineStage], Field(max_length=MAX_PIPELINE_STAGES)]]
    read_us: OptionalCounts = None


class AgentCounters(_Strict):
    dropped_rows: int = Field(default=0, ge=0, le=MAX_INT64)
    spooled_rows: int = Field(default=0, ge=0, le=MAX_INT64)
    # Spooled batch files the agent could not read (moved aside as *.bad); sent when not 0.
    unreadable_spool_files: int = Field(default=0, ge=0, le=MAX_INT64)


class Batch(_Strict):
    type: Literal["batch"]
    seq: int = Field(ge=1, le=MAX_INT64)
    steps: StepColumns | None = None
    metrics: MetricColumns | None = None
    device: DeviceColumns | None = None
    host: HostColumns | None = None
    epochs: EpochColumns | None = None
    pipeline: PipelineColumns | None = None
    agent: AgentCounters | None = None

    def row_count(self) -> int:
        sections = (self.steps, self.metrics, self.device, self.host, self.epochs, self.pipeline)
        return sum(len(section) for section in sections if section is not None)


class End(_Strict):
    type: Literal["end"]
    status: Literal["finished", "failed", "interrupted"] = "finished"
    # Steps the agent still holds in its spool: the run ended, but they arrive later.
    unsent_steps: int = Field(default=0, ge=0, le=MAX_INT64)


def _json_bytes(value: Any) -> int:
    try:
        return len(orjson.dumps(value))
    except TypeError:  # an integer beyond 64 bits, which orjson does not write
        return len(json.dumps(value, ensure_ascii=False).encode())


def oversize_hello(
    hello: Hello, *, max_config_bytes: int, max_environment_bytes: int
) -> str | None:
    """Why the hello's config or environment is refused (over its byte limit, as JSON), or
    None. Every browser and comparison reads them: they are bounded like any input."""
    for name, value, limit in (
        ("config", hello.config, max_config_bytes),
        ("environment", hello.environment, max_environment_bytes),
    ):
        size = _json_bytes(value)
        if size > limit:
            return (
                f"the run's {name} is {size} bytes as JSON, over the server's {limit}-byte "
                f"limit: send a smaller {name} (e.g. paths instead of contents)"
            )
    return None


class HttpIngest(_Strict):
    """The HTTP fallback and offline-upload shape: the hello plus the batches to store."""

    hello: Hello
    batches: list[Batch] = Field(default_factory=list, max_length=10_000)
    end: End | None = None


# -- server → agent -------------------------------------------------------------------------


def _omitted_when_none(value: Any) -> bool:
    return value is None


class ServerMessage(BaseModel):
    def to_json(self) -> dict[str, Any]:
        """The message as the JSON object sent (optional fields left None are omitted)."""
        return self.model_dump(mode="json")


class AgentSettings(BaseModel):
    max_frame_bytes: int


class Welcome(ServerMessage):
    """The answer to a hello: the run the agent delivers to and the last seq stored from its
    stream (the agent resends what follows)."""

    type: Literal["welcome"] = "welcome"
    protocol: int = PROTOCOL_VERSION
    run_id: int
    last_seq: int
    settings: AgentSettings


class Ack(ServerMessage):
    """A batch (`seq`) or the end (`end: true`) is committed."""

    type: Literal["ack"] = "ack"
    seq: int | None = Field(default=None, exclude_if=_omitted_when_none)
    end: bool | None = Field(default=None, exclude_if=_omitted_when_none)


class ErrorReply(ServerMessage):
    """A frame was refused (not stored); `seq` names it when it could be read."""

    type: Literal["error"] = "error"
    seq: int | None = Field(default=None, exclude_if=_omitted_when_none)
    message: str


class WatchCommand(ServerMessage):
    """A browser started (true) or stopped (false) watching the run: send live, or at ease."""

    type: Literal["command"] = "command"
    name: Literal["watch"] = "watch"
    watched: bool
