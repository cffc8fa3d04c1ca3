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


class StepColumns(_Strict):
    step: list[Annotated[int, Field(ge=0)]]
    t: list[float]
    dur: list[Annotated[float, Field(ge=0)]]
    wait: list[Annotated[float, Field(ge=0)] | None] | None = None
    batch_size: list[Annotated[int, Field(ge=0)] | None] | None = None

    @field_validator("wait", mode="before")
    @classmethod
    def _non_finite_wait_is_unknown(cls, values: Any) -> Any:
        if not isinstance(values, list):
            return values
        return [None if isinstance(v, float) and not math.isfinite(v) else v for v in values]

    @model_validator(mode="after")
    def _columns_align(self) -> "StepColumns":
        n = len(self.step)
        for name in ("t", "dur", "wait", "batch_size"):
            column = getattr(self, name)
            if column is not None and len(column) != n:
                raise ValueError(f"column {name!r} has {len(column)} values, 'step' has {n}")
        if not all(math.isfinite(v) for v in self.t):
            raise ValueError("column 't' must hold finite timestamps")
        if not all(math.isfinite(v) for v in self.dur):
            raise ValueError("column 'dur' must hold finite durations")
        return self

    def __len__(self) -> int:
        return len(self.step)

    def waits(self) -> list[float | None]:
        return self.wait if self.wait is not None else [None] * len(self.step)

    def batch_sizes(self) -> list[int | None]:
        return self.batch_size if self.batch_size is not None else [None] * len(self.step)


class Batch(_Strict):
    type: Literal["batch"]
    seq: int = Field(ge=1)
    steps: StepColumns | None = None

    def row_count(self) -> int:
        return len(self.steps) if self.steps else 0


class End(_Strict):
    type: Literal["end"]
    status: Literal["finished", "failed", "interrupted"] = "finished"


class HttpIngest(_Strict):
    """The HTTP fallback and offline-upload shape: the hello plus the batches to store."""

    hello: Hello
    batches: list[Batch] = Field(default_factory=list, max_length=10_000)
    end: End | None = None
