"""The messages the server pushes to browsers over `/api/v1/live`, one model per `type`.

Each is encoded once, whatever the number of browsers (`LiveHub`). Optional fields left
None are omitted, not sent as null.
"""

from typing import Any, Literal

from pydantic import BaseModel, Field

from stoker_server.core.models import AlertPublic, ProfilePublic, RunEventPublic
from stoker_server.diagnosis.verdict import Diagnosis


def _omitted_when_none(value: Any) -> bool:
    return value is None


class RunMessage(BaseModel):
    """A run started, ended, was edited, or its summary moved on."""

    type: Literal["run"] = "run"
    run: dict[str, Any] = Field(description="the run as GET /runs/{id} returns it (RunPublic)")


class StepsData(BaseModel):
    step: list[int]
    t: list[float]
    dur: list[float]
    wait: list[float | None]


class StepsMessage(BaseModel):
    """Steps of a run, to the browsers subscribed to it."""

    type: Literal["steps"] = "steps"
    run_id: int
    data: StepsData
    rank: int | None = Field(default=None, exclude_if=_omitted_when_none)  # omitted for rank 0


class RunDeletedMessage(BaseModel):
    type: Literal["run_deleted"] = "run_deleted"
    run_id: int


class NoticeMessage(BaseModel):
    """Something the browser should know: dropped messages, an interrupted relay, a bad
    command."""

    type: Literal["notice"] = "notice"
    message: str
    dropped: int | None = Field(default=None, exclude_if=_omitted_when_none)


class VerdictMessage(BaseModel):
    type: Literal["verdict"] = "verdict"
    run_id: int
    diagnosis: Diagnosis


class EventMessage(BaseModel):
    type: Literal["event"] = "event"
    run_id: int
    event: RunEventPublic


class AlertMessage(BaseModel):
    type: Literal["alert"] = "alert"
    alert: AlertPublic


class ProfileMessage(BaseModel):
    """A profiler capture changed status, to every browser of this process: it is not relayed
    to other processes, since its analysis can exceed a PostgreSQL notification."""

    type: Literal["profile"] = "profile"
    run_id: int
    profile: ProfilePublic = Field(description="as GET /runs/{id}/profiles/{pid} returns it")


LiveMessage = (
    RunMessage
    | StepsMessage
    | RunDeletedMessage
    | NoticeMessage
    | VerdictMessage
    | EventMessage
    | AlertMessage
    | ProfileMessage
)
# Verdicts, alerts and events go to every browser (LiveHub.broadcast).
Broadcast = VerdictMessage | EventMessage | AlertMessage
