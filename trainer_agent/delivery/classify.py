"""The one way the agent posts to the server over HTTP, and the one place that reads the answer.

Every HTTP request the agent makes goes through `post`: the live HTTP transport
(`POST /api/v1/ingest`), `stoker upload` and the background upload of what earlier processes
spooled (the same route), and the profiler's statuses and trace chunks
(`POST /api/v1/runs/{id}/profiles/{pid}/status|trace`). `classify` turns what came back, an
answer or the error raised instead, into one of three verdicts, the same for all of them:

- DELIVERED: a 2xx with the JSON Stoker answers on that route;
- REFUSED: Stoker refused it for good (a 4xx with Stoker's `{"detail": ...}`: invalid, an
  unknown profile, a trace over its cap). Retrying cannot help: the caller drops it and says
  why, once;
- RETRY: no answer (refused, no route, timeout), the server busy or failing (5xx, 408, 429),
  or a setting to fix: a token Stoker refuses (401/403), or something that answers HTTP but
  is not a Stoker server (404/405/501 where Stoker never gives them, a redirect, no Stoker
  JSON). The last two carry `problem`, whose text names the URL and the fix: the caller says
  it (never as "unreachable") and keeps what it was sending, trying again with backoff, since
  the setting may be fixed on the server's side.
"""

import logging
import os
import threading
from collections.abc import Mapping
from dataclasses import dataclass
from enum import Enum
from typing import Any, Protocol

from trainer_agent.delivery import wire
from trainer_agent.delivery.transport import Misconfigured, NotStokerServer, TokenRefused, bearer

log = logging.getLogger("trainer_agent")


class Response(Protocol):
    """What `classify` reads of an HTTP answer (httpx.Response has it)."""

    @property
    def status_code(self) -> int: ...

    @property
    def headers(self) -> Mapping[str, str]: ...

    @property
    def text(self) -> str: ...

    def json(self) -> Any: ...


class Post(Protocol):
    """One HTTP POST: `httpx.post`, or `httpx.Client.post` to reuse one connection."""

    def __call__(
        self,
        url: str,
        *,
        content: bytes,
        headers: dict[str, str],
        timeout: float,
        params: dict[str, Any] | None = None,
    ) -> Response: ...


def http_post(
    url: str,
    *,
    content: bytes,
    headers: dict[str, str],
    timeout: float,
    params: dict[str, Any] | None = None,
) -> Response:
    import httpx

    return httpx.post(url, content=content, headers=headers, timeout=timeout, params=params)


_clients: dict[bool, Any] = {}
_clients_lock = threading.Lock()


def shared_http_post(
    url: str,
    *,
    content: bytes,
    headers: dict[str, str],
    timeout: float,
    params: dict[str, Any] | None = None,
) -> Response:
    """`http_post` on the process's own client, which keeps its connections open between
    requests: a new client per request (`httpx.post`) costs ~5 ms of CPU, most of it
    loading the CA certificates, even for plain http."""
    tls = url.startswith("https:")
    with _clients_lock:
        client = _clients.get(tls)
        if client is None:
            import httpx

            # No certificates to load for plain http; https verifies as httpx.post does.
            client = _clients[tls] = httpx.Client(verify=tls)
    return client.post(url, content=content, headers=headers, timeout=timeout, params=params)


def _forget_clients_in_child() -> None:
    """A forked child must not share its parent's open connections."""
    global _clients_lock
    _clients.clear()
    _clients_lock = threading.Lock()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_forget_clients_in_child)


class Verdict(Enum):
    DELIVERED = "delivered"  # the server stored it
    REFUSED = "refused"  # the server will never take it: drop it, say why
    RETRY = "retry"  # away, busy, or a setting to fix: keep it, try again later


@dataclass(frozen=True)
class Route:
    """What Stoker answers on one route: a key its 2xx answer always holds, and the statuses
    it never gives there (whatever gives them is not a Stoker server)."""

    answer_key: str
    foreign: tuple[int, ...] = (405, 501)


INGEST = Route("run_id", foreign=(404, 405, 501))
PROFILE_STATUS = Route("status")  # the profile, as the server holds it now
PROFILE_TRACE = Route("received")  # the bytes it holds of the worker's trace


class ServerFailing(ConnectionError):
    """The server answered, but busy or failing (5xx, 408, 429): try again later."""


@dataclass(frozen=True)
class Answer:
    verdict: Verdict
    # Why it was refused (the server's answer), or why it is to be retried, for the log.
    reason: str = ""
    # The server's JSON, when it stored it.
    body: Any = None
    # RETRY because of a setting to fix (a refused token, not a Stoker server): say it.
    problem: Misconfigured | None = None
    # RETRY because no answer came: what was raised instead.
    error: BaseException | None = None

    def failure(self) -> Exception:
        """A RETRY as the exception the sender's failure handling tells apart (a
        `Misconfigured`, a timeout, a connection error)."""
        if self.problem is not None:
            return self.problem
        if isinstance(self.error, Exception):
            return self.error
        return ServerFailing(self.reason)


DELIVERED = Answer(Verdict.DELIVERED)

# Statuses that mean "busy, come back later" whoever answers them.
_BUSY = (408, 429)


def classify(server: str, route: Route, request: str, answer: Response | BaseException) -> Answer:
    """What the server's `answer` to `request` (e.g. `POST /api/v1/ingest`) on `route` says,
    or what the error raised instead of an answer does."""
    if isinstance(answer, BaseException):
        return Answer(Verdict.RETRY, str(answer) or type(answer).__name__, error=answer)
    status = int(answer.status_code)
    if (status >= 500 and status not in route.foreign) or status in _BUSY:
        # Stoker failing, or a proxy in front of a Stoker that is down or busy.
        return Answer(Verdict.RETRY, _status_line(answer))
    try:
        body = answer.json()
    except ValueError:
        body = None
    if 200 <= status < 300 and isinstance(body, dict) and route.answer_key in body:
        return Answer(Verdict.DELIVERED, body=body)
    detail = body.get("detail") if isinstance(body, dict) else None
    stoker_refusal = (
        400 <= status < 500
        and detail is not None
        and status not in route.foreign
        # Starlette's answer for a path no route serves, not Stoker's unknown run or profile.
        and not (status == 404 and detail == "Not Found")
    )
    if stoker_refusal and status in (401, 403):
        return Answer(
            Verdict.RETRY,
            _status_line(answer),
            problem=TokenRefused(
                f"the Stoker server at {server} refuses the agent token (HTTP {status}: "
                f"{detail}): set STOKER_AGENT_TOKEN (or token=) to the server's agent token"
            ),
        )
    if stoker_refusal:
        return Answer(Verdict.REFUSED, answer.text[:500])
    content_type = answer.headers.get("content-type", "no content type").split(";")[0]
    said = _status_line(answer)
    location = answer.headers.get("location")
    said += f" to {location}" if location else f", {content_type}"
    return Answer(
        Verdict.RETRY,
        said,
        problem=NotStokerServer(f"{server} answers but is not a Stoker server ({request}: {said})"),
    )


def _status_line(answer: Response) -> str:
    reason = getattr(answer, "reason_phrase", "")
    return f"HTTP {answer.status_code} {reason}" if reason else f"HTTP {answer.status_code}"


def post(
    send: Post,
    server: str,
    route: Route,
    path: str,
    *,
    body: dict[str, Any] | bytes,
    token: str | None,
    timeout: float,
    params: dict[str, Any] | None = None,
) -> Answer:
    """POST `body` (JSON, or raw bytes) to `server` + `path` with the agent token, by `send`;
    never raises: whatever happens is an `Answer`."""
    server = server.rstrip("/")
    headers = bearer(token)
    if isinstance(body, bytes):
        content = body
        headers["Content-Type"] = "application/octet-stream"
    else:
        content = wire.dumps(body)
        headers["Content-Type"] = "application/json"
    outcome: Response | BaseException
    try:
        outcome = send(
            server + path, content=content, headers=headers, timeout=timeout, params=params
        )
    except Exception as error:
        outcome = error
    return classify(server, route, f"POST {path}", outcome)


_said_lock = threading.Lock()
_said: set[str] = set()


def say_once(message: str) -> None:
    """Log `message` as a warning the first time this process meets it: a thread that retries
    a setting to fix says so once, not at every attempt."""
    with _said_lock:
        if message in _said:
            return
        _said.add(message)
    log.warning("%s", message)
