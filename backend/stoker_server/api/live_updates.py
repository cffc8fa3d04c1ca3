"""Browser live updates: run changes for everyone, steps for the runs a client subscribed to."""

import asyncio
import contextlib
import json
import logging

from fastapi import APIRouter, WebSocket, WebSocketDisconnect
from sqlalchemy.engine import Engine
from sqlmodel import Session

from stoker_server.api.queries import list_runs_json
from stoker_server.api.state import app_state
from stoker_server.core.auth import Role, check_role, refuse_websocket
from stoker_server.core.errors import StokerError
from stoker_server.live.hub import LiveClient, LiveHub, live_run
from stoker_server.live.messages import NoticeMessage, RunMessage

log = logging.getLogger(__name__)
router = APIRouter(prefix="/api/v1", tags=["live"])
MAX_COMMAND_BYTES = 4096
# Runs sent to a new live client (newest first), before it asks for more over REST.
INITIAL_RUNS = 1000
CLOSE_TRY_AGAIN_LATER = 1013


@router.websocket("/live")
async def live_socket(websocket: WebSocket) -> None:
    try:
        check_role(websocket, Role.viewer)
    except StokerError as error:
        await refuse_websocket(websocket, error)
        return
    state = app_state(websocket)
    hub = state.hub
    await websocket.accept()
    if hub.full:
        await websocket.close(
            code=CLOSE_TRY_AGAIN_LATER,
            reason=f"this server serves {hub.max_clients} live clients at most: try later",
        )
        return
    client = hub.connect()
    try:
        runs = await asyncio.to_thread(_current_runs, state.engine)
        for run in runs:
            client.offer_message(RunMessage(run=run))
        sender = asyncio.create_task(_send_forever(websocket, client), name="stoker-live-send")
        try:
            await _receive_commands(websocket, hub, client)
        finally:
            sender.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await sender
    except WebSocketDisconnect:
        pass
    finally:
        hub.disconnect(client)


def _current_runs(engine: Engine) -> list[dict]:
    with Session(engine) as session:
        runs = json.loads(list_runs_json(session=session, limit=INITIAL_RUNS))["data"]
    return [live_run(run) for run in reversed(runs)]


async def _send_forever(websocket: WebSocket, client: LiveClient) -> None:
    while True:
        encoded = await client.next_message()
        notice = client.take_notice()
        if notice is not None:
            await websocket.send_text(notice)
        await websocket.send_text(encoded)


async def _receive_commands(websocket: WebSocket, hub: LiveHub, client: LiveClient) -> None:
    while True:
        message = await websocket.receive()
        if message["type"] == "websocket.disconnect":
            return
        if len(message.get("text") or message.get("bytes") or "") > MAX_COMMAND_BYTES:
            await websocket.close(
                code=1009, reason=f"commands are at most {MAX_COMMAND_BYTES} bytes"
            )
            return
        try:
            command = json.loads(message.get("text") or "")
            kind, run_id = command["type"], command.get("run_id")
            if kind not in ("subscribe", "unsubscribe") or not isinstance(run_id, int):
                raise ValueError
        except (ValueError, KeyError, TypeError):
            client.offer_message(
                NoticeMessage(
                    message='commands are {"type": "subscribe"|"unsubscribe", "run_id": <int>}'
                )
            )
            continue
        if kind == "subscribe":
            if not hub.subscribe(client, run_id):
                client.offer_message(
                    NoticeMessage(
                        message=f"subscribe to run {run_id} refused: one live client follows "
                        f"{hub.max_subscriptions} runs at most; unsubscribe from one first"
                    )
                )
        else:
            hub.unsubscribe(client, run_id)
