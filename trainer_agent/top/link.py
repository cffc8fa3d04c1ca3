"""`stoker top`'s connection to the server: the browsers' live socket (`/api/v1/live`) and the
REST reads beside it, with the viewer token. Every way of failing to reach or to be let in
becomes a `TopError`: one line for the user and the command's exit status."""

import asyncio
import json
from datetime import UTC, datetime
from typing import Any

import httpx
from websockets.asyncio.client import ClientConnection, connect
from websockets.exceptions import InvalidHandshake, InvalidStatus

from trainer_agent.top.state import TopState

EXIT_UNREACHABLE = 3
EXIT_REFUSED = 4
TIMEOUT_S = 10.0
# At most this many runs are polled for their latest steps, GPUs and verdict.
MAX_POLLED_RUNS = 50
STEPS_TAIL = 200
# Ended runs listed when asked for (`a`, `--all`): the newest, ended or not.
ENDED_RUNS = 100


class TopError(Exception):
    def __init__(self, message: str, code: int, status: int | None = None) -> None:
        super().__init__(message)
        self.code = code
        self.status = status  # the HTTP status the server answered, if it answered


class ServerLink:
    def __init__(self, server: str, token: str | None) -> None:
        self.server = server
        self.headers = {"Authorization": f"Bearer {token}"} if token else {}
        self.http = httpx.AsyncClient(
            base_url=f"{server}/api/v1", headers=self.headers, timeout=TIMEOUT_S
        )

    async def close(self) -> None:
        await self.http.aclose()

    def _unreachable(self, why: object) -> TopError:
        return TopError(
            f"cannot reach the server at {self.server} ({why or 'no answer'}); "
            "is `stoker serve` running there? Set --server or STOKER_SERVER.",
            EXIT_UNREACHABLE,
        )

    def _refused(self, status: int, detail: str) -> TopError:
        if status in (401, 403):
            return TopError(
                f"the server at {self.server} refused the token ({status}: {detail}); "
                "pass the viewer token with --token or STOKER_VIEW_TOKEN.",
                EXIT_REFUSED,
                status,
            )
        return TopError(
            f"the server at {self.server} answered {status} ({detail}); "
            "is it a Stoker server of this version?",
            EXIT_UNREACHABLE,
            status,
        )

    async def open_live(self) -> ClientConnection:
        scheme, rest = self.server.split("://", 1)
        url = f"{'wss' if scheme == 'https' else 'ws'}://{rest}/api/v1/live"
        try:
            return await connect(
                url, additional_headers=self.headers, open_timeout=TIMEOUT_S,
                max_size=None, compression=None,
            )  # fmt: skip
        except InvalidStatus as error:
            response = error.response
            raise self._refused(response.status_code, _detail(response.body)) from None
        except (OSError, TimeoutError, InvalidHandshake) as error:
            raise self._unreachable(_reason(error)) from None

    async def get(self, path: str, **params: Any) -> Any:
        try:
            response = await self.http.get(path, params=params)
        except httpx.HTTPError as error:
            raise self._unreachable(_reason(error)) from None
        if response.status_code != 200:
            raise self._refused(response.status_code, _detail(response.content))
        return response.json()

    # -- what is read --------------------------------------------------------------------------

    async def snapshot(self, state: TopState) -> None:
        """The running runs (the latest ended ones too, when shown) and the firing alerts, as
        they are now."""
        runs = await self.get("/runs", status="running", limit=1000)
        for run in runs["data"]:
            state.set_run(run)
        if state.show_ended:
            await self.read_ended(state)
        alerts = await self.get("/alerts", state="firing", limit=10_000)
        state.firing.clear()
        for alert in alerts["data"]:
            state.set_alert(alert)

    async def open_run(self, state: TopState, run_id: int) -> None:
        """Open run `run_id`, running or ended (`--run`); a run the server has not is an error."""
        try:
            state.set_run(await self.get(f"/runs/{run_id}"))
        except TopError as error:
            if error.status == 404:
                raise TopError(f"the server has no run {run_id}", error.code, 404) from None
            raise
        state.opened = state.selected = run_id

    async def read_ended(self, state: TopState) -> None:
        """The newest ENDED_RUNS runs, ended ones among them: their figures are their summary's."""
        runs = await self.get("/runs", limit=ENDED_RUNS)
        for run in runs["data"]:
            state.set_run(run)
        state.ended_read = True

    async def poll(self, state: TopState, *, verdicts: bool = True) -> None:
        """The latest steps and GPU readings of each running run (and the opened run), and with
        `verdicts` their diagnosis (the opened run's always). Ended runs are read once, when
        they are first shown."""
        if state.show_ended and not state.ended_read:
            await self.read_ended(state)
        ids = state.running_ids()[:MAX_POLLED_RUNS]
        if state.opened is not None and state.opened not in ids:
            ids.append(state.opened)
        await asyncio.gather(
            *(self._poll_run(state, i, verdicts or i == state.opened) for i in ids)
        )

    async def _poll_run(self, state: TopState, run_id: int, verdict: bool) -> None:
        view = state.runs.get(run_id)
        if view is None:
            return
        held = view.steps[-1].step if view.steps else max(-1, view.step - STEPS_TAIL - 1)
        try:
            steps = await self.get(f"/runs/{run_id}/steps", after_step=held, max_points=STEPS_TAIL)
            view.add_steps(steps)
            since = _unix(view.run.get("last_seen_at") or view.run.get("started_at"))
            samples = await self.get(
                f"/runs/{run_id}/samples", fields="util,sm_util,mem_used,mem_total",
                max_points=20, **({"since_t": since - 60} if since is not None else {}),
            )  # fmt: skip
            view.set_samples(samples["series"])
            if verdict:
                view.diagnosis = await self.get(f"/runs/{run_id}/diagnosis")
        except TopError as error:
            if error.status != 404:  # 404: a run deleted meanwhile; its run_deleted follows
                raise


async def read_messages(socket: ClientConnection, state: TopState, changed: asyncio.Event) -> None:
    """Apply every live message until the socket closes."""
    async for text in socket:
        state.apply(json.loads(text))
        changed.set()


def _unix(iso: str | None) -> float | None:
    if not iso:
        return None
    moment = datetime.fromisoformat(iso.replace("Z", "+00:00"))
    if moment.tzinfo is None:  # the server writes UTC
        moment = moment.replace(tzinfo=UTC)
    return moment.timestamp()


def _detail(body: bytes | bytearray | None) -> str:
    try:
        return str(json.loads(body or b"")["detail"])
    except (ValueError, KeyError, TypeError):
        return (body or b"").decode(errors="replace").strip()[:200] or "no detail"


def _reason(error: BaseException) -> str:
    text = str(error) or type(error).__name__
    return text.splitlines()[0]
