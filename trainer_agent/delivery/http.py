"""`POST /api/v1/ingest`: the hello and a group of batches (and the end) in one request, when
the WebSocket upgrade is refused or `transport="http"`. The server holds no connection, so
there is nothing to open, and it sends no commands."""

from collections.abc import Callable
from typing import Any

from trainer_agent.config import AgentConfig
from trainer_agent.delivery.classify import INGEST, Answer, Post, Verdict, http_post, post
from trainer_agent.delivery.transport import Batch, Item, Welcome

HTTP_CHUNK_BYTES = 4 * 2**20
HTTP_CHUNK_ITEMS = 1000


def post_ingest(
    send: Post,
    *,
    server: str,
    token: str | None,
    timeout: float,
    hello: dict[str, Any],
    batches: list[Batch],
    end: dict[str, Any] | None = None,
) -> Answer:
    """One `POST /api/v1/ingest`: the hello, `batches` and the run's `end`, stored all or
    none. The live transport and the uploaders of spooled runs both send this way."""
    payload: dict[str, Any] = {"hello": hello, "batches": batches}
    if end is not None:
        payload["end"] = end
    return post(send, server, INGEST, "/api/v1/ingest", body=payload, token=token, timeout=timeout)


def http_chunks(items: list[Item], size_of: Callable[[Item], int]) -> list[list[Item]]:
    """Consecutive groups of at most ~HTTP_CHUNK_BYTES (and HTTP_CHUNK_ITEMS items), each
    non-empty: what one `POST /api/v1/ingest` carries. An item over the byte size goes alone."""
    chunks: list[list[Item]] = []
    current: list[Item] = []
    current_bytes = 0
    for item in items:
        size = size_of(item)
        if current and (
            current_bytes + size > HTTP_CHUNK_BYTES or len(current) >= HTTP_CHUNK_ITEMS
        ):
            chunks.append(current)
            current, current_bytes = [], 0
        current.append(item)
        current_bytes += size
    if current:
        chunks.append(current)
    return chunks


class HttpTransport:
    name = "http"

    def __init__(
        self,
        config: AgentConfig,
        hello: dict[str, Any],
        *,
        post: Post = http_post,
        run_id: int | None = None,
    ) -> None:
        self._config = config
        self._hello = hello
        self._post = post
        self._open = False
        self.run_id = run_id

    @property
    def is_open(self) -> bool:
        return self._open

    def open(self, deadline: float) -> Welcome | None:
        self._open = True
        return None

    def groups(self, items: list[Item], size_of: Callable[[Item], int]) -> list[list[Item]]:
        return http_chunks(items, size_of)

    def send(self, batches: list[Batch], deadline: float) -> list[str | None]:
        return self._post_batches(batches)

    def end(self, end: dict[str, Any], deadline: float) -> None:
        self._post_batches([], end=end)

    def send_with_end(
        self, batches: list[Batch], end: dict[str, Any], deadline: float
    ) -> tuple[list[str | None], bool]:
        """`batches` and the run's `end` in one request: each batch's outcome, and whether
        the end was stored (the server stores all of them or none)."""
        outcomes = self._post_batches(batches, end=end)
        return outcomes, not any(outcomes)

    def poll_commands(self) -> None:
        pass

    def close(self) -> None:
        self._open = False

    def _post_batches(
        self, batches: list[Batch], end: dict[str, Any] | None = None
    ) -> list[str | None]:
        answer = post_ingest(
            self._post,
            server=self._config.server,
            token=self._config.token,
            timeout=self._config.ack_timeout_s,
            hello=self._hello,
            batches=batches,
            end=end,
        )
        if answer.verdict is Verdict.RETRY:
            raise answer.failure()
        if answer.verdict is Verdict.REFUSED:  # stored none of them: retrying cannot help
            return [answer.reason] * len(batches)
        self.run_id = answer.body.get("run_id", self.run_id)
        return [None] * len(batches)
