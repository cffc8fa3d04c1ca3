"""Agent ingest: the WebSocket stream and its HTTP fallback (docs/protocol.md)."""

import asyncio
import contextlib
import json
import logging
from dataclasses import dataclass
from typing import Annotated, Any

from fastapi import APIRouter, Depends, Request, WebSocket
from pydantic import Field, TypeAdapter, ValidationError

from stoker_server.api.deps import StateDep
from stoker_server.api.publish import (
    BatchPublisher,
    publish_run_ended,
    push_live_steps,
    refreshed,
    stored_batch_publisher,
)
from stoker_server.api.state import AppState, app_state
from stoker_server.api.telemetry import Telemetry
from stoker_server.core.auth import AgentAuth, Role, check_role, refuse_websocket
from stoker_server.core.errors import (
    BadRequest,
    PayloadTooLarge,
    StokerError,
    UnsupportedMediaType,
    describe,
)
from stoker_server.core.models import IngestResult, Run, RunPublic, RunStatus
from stoker_server.ingest.agent_writes import BatchJob, end_run, open_run, store_batch
from stoker_server.ingest.protocol import (
    Ack,
    AgentSettings,
    Batch,
    End,
    ErrorReply,
    Hello,
    HttpIngest,
    Welcome,
    oversize_hello,
)
from stoker_server.ingest.summary import run_public
from stoker_server.ingest.writer import StreamFailed
from stoker_server.live.agents import AgentLink

log = logging.getLogger(__name__)
router = APIRouter(prefix="/api/v1", tags=["agent"])

AgentFrame = TypeAdapter(Annotated[Batch | End, Field(discriminator="type")])

# WebSocket close codes (RFC 6455 and the private 4000 range).
CLOSE_UNSUPPORTED_DATA = 1003
CLOSE_TOO_BIG = 1009
CLOSE_SERVER_ERROR = 1011
CLOSE_TRY_AGAIN_LATER = 1013
CLOSE_BAD_HELLO = 4400


def _inline_refs(schema: dict[str, Any]) -> dict[str, Any]:
    """A JSON schema with its local `$defs` references inlined (for the OpenAPI document)."""
    defs = schema.pop("$defs", {})

    def resolve(node: Any) -> Any:
        if isinstance(node, dict):
            ref = node.get("$ref", "")
            if ref.startswith("#/$defs/"):
                return resolve(defs[ref.removeprefix("#/$defs/")])
            return {k: resolve(v) for k, v in node.items()}
        if isinstance(node, list):
            return [resolve(v) for v in node]
        return node

    return resolve(schema)


def _reason(text: str) -> str:
    # A close reason must fit in 123 bytes of UTF-8.
    return text.encode("utf-8")[:123].decode("utf-8", "ignore")


# Publishes what a stored batch changed; a dependency, so a test can hand in its own.
PublisherDep = Annotated[BatchPublisher, Depends(stored_batch_publisher)]


@router.websocket("/agent")
async def agent_socket(websocket: WebSocket, publish: PublisherDep) -> None:
    state = app_state(websocket)
    settings, writer, telemetry = state.settings, state.writer, state.telemetry
    try:
        check_role(websocket, Role.agent)
    except StokerError as error:
        telemetry.rejects.labels("unauthorized").inc()
        await refuse_websocket(websocket, error)
        return
    if state.agents.total >= settings.max_agent_connections:
        telemetry.rejects.labels("too_many_connections").inc()
        await websocket.accept()  # closed at once: the agent retries later, or posts over HTTP
        await websocket.close(code=CLOSE_TRY_AGAIN_LATER, reason="too many agent connections")
        return
    await websocket.accept()
    telemetry.connections.inc()
    text = await _receive_text(websocket, settings.max_frame_bytes, telemetry)
    if text is None:
        return
    try:
        hello = Hello.model_validate_json(text)
    except ValidationError as error:
        telemetry.rejects.labels("bad_hello").inc()
        await websocket.close(code=CLOSE_BAD_HELLO, reason=_reason("bad hello: " + describe(error)))
        return
    if oversize := _oversize(hello, state):
        await websocket.close(code=CLOSE_BAD_HELLO, reason=_reason(oversize))
        return
    run, last_seq = await writer.run(open_run, hello=hello)
    assert run.id is not None
    await _serve_agent(websocket, state, run, hello, last_seq, publish)


# Batches of one agent being stored at once. The agent may send ahead of its acks; while
# this many wait for their commit, the server reads no further frames from it.
MAX_IN_FLIGHT = 8


@dataclass
class _InFlight:
    frame: Batch | End
    stored: asyncio.Future


def _oversize(hello: Hello, state: AppState) -> str | None:
    refusal = oversize_hello(
        hello,
        max_config_bytes=state.settings.max_config_bytes,
        max_environment_bytes=state.settings.max_environment_bytes,
    )
    if refusal is not None:
        state.telemetry.rejects.labels("hello_too_large").inc()
    return refusal


async def _serve_agent(
    websocket: WebSocket,
    state: AppState,
    run: Run,
    hello: Hello,
    last_seq: int,
    publish: BatchPublisher,
) -> None:
    """Read, check and queue the agent's frames; `_acknowledge` answers them once stored.

    Reading does not wait for commits, so an agent that sends ahead is stored in bigger
    groups and its steps reach the browsers (pushed on arrival) without waiting for the
    database. Acks still follow the commit, in the order the frames came.
    """
    settings, writer, hub, telemetry = state.settings, state.writer, state.hub, state.telemetry
    assert run.id is not None
    await writer.forgive((run.id, hello.stream))
    telemetry.live.started(run.id, name=run.name, project=run.project)
    public = run_public(run)
    welcome = Welcome(
        run_id=run.id,
        last_seq=last_seq,
        settings=AgentSettings(max_frame_bytes=settings.max_frame_bytes),
    )
    await websocket.send_json(welcome.to_json())
    hub.publish_run(public.model_dump(mode="json"))
    state.detectors.attach(public)

    async def send(message: dict[str, Any]) -> None:
        await websocket.send_json(message)

    # Told whether a browser watches the run, and sent commands (e.g. profile) by rank. It
    # counts as connected until its last frame is answered: an `end` it sent before closing
    # is then read as said by a live agent.
    agent = AgentLink(rank=hello.rank, send=send, run_key=hello.run_key)
    state.agents.attach(run.id, agent)
    in_flight: asyncio.Queue[_InFlight | None] = asyncio.Queue(maxsize=MAX_IN_FLIGHT)
    failed = asyncio.Event()
    acknowledging = asyncio.create_task(
        _acknowledge(websocket, state, public, hello, in_flight, failed, publish),
        name=f"stoker-acks-{run.id}",
    )
    try:
        while not failed.is_set():
            text = await _receive_text(websocket, settings.max_frame_bytes, telemetry)
            if text is None or failed.is_set():
                return
            try:
                frame = AgentFrame.validate_json(text)
            except ValidationError as error:
                telemetry.rejects.labels("invalid").inc()
                refused = ErrorReply(seq=_seq_of(text), message=describe(error))
                await websocket.send_json(refused.to_json())
                continue
            if isinstance(frame, End):
                ended = writer.submit(
                    end_run, run_id=run.id, status=RunStatus(frame.status),
                    stream=hello.stream, unsent_steps=frame.unsent_steps, rank=hello.rank,
                )  # fmt: skip
                await in_flight.put(_InFlight(frame, ended))
                continue
            if frame.row_count() > settings.max_batch_rows:
                telemetry.rejects.labels("too_many_rows").inc()
                too_big = ErrorReply(
                    seq=frame.seq,
                    message=f"batch has {frame.row_count()} rows; the limit is "
                    f"{settings.max_batch_rows}: send smaller batches",
                )
                await websocket.send_json(too_big.to_json())
                continue
            push_live_steps(hub, run.id, frame, hello.rank)
            stored = writer.submit_store(BatchJob(run.id, hello.stream, hello.rank, frame))
            await in_flight.put(_InFlight(frame, stored))
    finally:
        await in_flight.put(None)
        await acknowledging
        state.agents.detach(run.id, agent)


async def _acknowledge(
    websocket: WebSocket,
    state: AppState,
    public: RunPublic,
    hello: Hello,
    in_flight: "asyncio.Queue[_InFlight | None]",
    failed: asyncio.Event,
    publish: BatchPublisher,
) -> None:
    """Publish what each queued frame changed once it is stored, then ack it, in order.

    Runs until the reader is done, even after the socket closed: a batch committed after the
    agent went away still updates the run's summary, the gauges and the detectors. A frame
    that fails to store or to publish is not acknowledged: the connection is closed (1011),
    so the agent reconnects and resends what it holds unacknowledged (a seq already stored is
    ignored). Nothing here ends this task early: the reader waits on it.
    """
    telemetry = state.telemetry
    connected = True

    async def reply(message: Ack) -> None:
        nonlocal connected
        if connected:
            try:
                await websocket.send_json(message.to_json())
            except Exception:  # the agent went away; keep publishing what gets stored
                connected = False

    async def fail(error: BaseException, what: str) -> None:
        nonlocal connected
        connected = False
        if failed.is_set():
            return
        failed.set()
        if not isinstance(error, StreamFailed):
            log.error("%s a frame of run %s failed", what, public.id, exc_info=error)
        with contextlib.suppress(Exception):
            await websocket.close(code=CLOSE_SERVER_ERROR, reason=f"{what} error; send again")

    while (item := await in_flight.get()) is not None:
        try:
            result = await item.stored
        except Exception as error:
            await fail(error, "storage")
            continue
        # Published before the ack: whoever the agent tells next (a user reading the
        # diagnosis after fit() returned) must find the detectors holding what was stored.
        frame = item.frame
        try:
            if isinstance(frame, End):
                public = publish_run_ended(state, result)
                ack = Ack(end=True)
            elif result is None:
                telemetry.replays.inc()
                ack = Ack(seq=frame.seq)
            else:
                public = refreshed(public, result)
                publish(public, frame, hello.rank)
                ack = Ack(seq=frame.seq)
        except Exception as error:
            await fail(error, "publishing")
            continue
        await reply(ack)


def _is_json(content_type: str) -> bool:
    media = content_type.split(";")[0].strip().lower()
    return media == "application/json" or (
        media.startswith("application/") and media.endswith("+json")
    )


def _seq_of(text: str) -> int | None:
    """The seq of a frame that failed validation, so the agent can tell which one it was."""
    try:
        seq = json.loads(text).get("seq")
    except (ValueError, AttributeError):
        return None
    return seq if isinstance(seq, int) else None


async def _receive_text(websocket: WebSocket, max_bytes: int, telemetry: Telemetry) -> str | None:
    """The next text frame, or None once the socket is closed (by the peer or by us)."""
    message = await websocket.receive()
    if message["type"] == "websocket.disconnect":
        return None
    text = message.get("text")
    if text is None:
        telemetry.rejects.labels("binary_frame").inc()
        await websocket.close(
            code=CLOSE_UNSUPPORTED_DATA, reason="binary frames are not supported: send JSON text"
        )
        return None
    if len(text) > max_bytes:
        telemetry.rejects.labels("frame_too_large").inc()
        await websocket.close(code=CLOSE_TOO_BIG, reason=f"frame over {max_bytes} bytes")
        return None
    return text


@router.post(
    "/ingest",
    dependencies=[AgentAuth],
    openapi_extra={
        "requestBody": {
            "required": True,
            "content": {
                "application/json": {"schema": _inline_refs(HttpIngest.model_json_schema())}
            },
        }
    },
)
async def ingest_http(request: Request, state: StateDep, publish: PublisherDep) -> IngestResult:
    """Store a hello and its batches in one request: the WebSocket fallback and offline upload.

    Either every batch is valid and stored, or nothing is (422 naming the problem).
    """
    writer, hub = state.writer, state.hub
    if not _is_json(request.headers.get("content-type", "")):
        state.telemetry.rejects.labels("not_json").inc()
        raise UnsupportedMediaType("POST /ingest takes JSON: send Content-Type: application/json")
    body = await request.body()
    try:
        payload = HttpIngest.model_validate_json(body)
    except ValidationError as error:
        state.telemetry.rejects.labels("invalid").inc()
        raise BadRequest(describe(error)) from None
    if oversize := _oversize(payload.hello, state):
        raise PayloadTooLarge(oversize)
    too_big = [b.seq for b in payload.batches if b.row_count() > state.settings.max_batch_rows]
    if too_big:
        raise PayloadTooLarge(
            f"batches {too_big[:5]} have over {state.settings.max_batch_rows} rows: split them"
        )
    run, _ = await writer.run(open_run, hello=payload.hello)
    assert run.id is not None
    state.telemetry.live.started(run.id, name=run.name, project=run.project)
    acked: list[int] = []
    public = run_public(run)
    for batch in payload.batches:
        fresh = await writer.store_rows(
            store_batch,
            run_id=run.id,
            stream=payload.hello.stream,
            rank=payload.hello.rank,
            batch=batch,
        )  # one transaction per batch, in order
        acked.append(batch.seq)
        if fresh is not None:
            public = refreshed(public, fresh)
            push_live_steps(hub, run.id, batch, payload.hello.rank)
            publish(public, batch, payload.hello.rank)
    if payload.end is not None:
        ended = await writer.run(
            end_run, run_id=run.id, status=RunStatus(payload.end.status),
            stream=payload.hello.stream, unsent_steps=payload.end.unsent_steps,
            rank=payload.hello.rank,
        )  # fmt: skip
        publish_run_ended(state, ended)
    return IngestResult(run_id=run.id, acked=acked)
