"""The browser guard's cost (core/browser_guard.py): Python calls per HTTP request through it,
against the bare ASGI app and the body-size middleware every request also crosses. Counted
with cProfile (a count, not a time: it does not depend on the machine's load).

    .venv/bin/python -m bench.guard_cost
"""

import asyncio
import cProfile
import pstats
from typing import Any

from stoker_server.core.browser_guard import BrowserGuard
from stoker_server.core.middleware import BodySizeLimit

SCOPE = {"type": "http", "method": "GET", "path": "/api/v1/runs",
         "headers": [(b"host", b"127.0.0.1:8470"), (b"accept", b"*/*")]}  # fmt: skip
REQUESTS = 1000


async def _app(scope: Any, receive: Any, send: Any) -> None:
    await send({"type": "http.response.start", "status": 200, "headers": []})
    await send({"type": "http.response.body", "body": b"{}"})


async def _receive() -> dict[str, Any]:
    return {"type": "http.request"}


async def _send(message: dict[str, Any]) -> None:
    pass


async def _requests(target: Any, n: int) -> None:
    for _ in range(n):
        await target(SCOPE, _receive, _send)


def calls_per_request(target: Any) -> float:
    asyncio.run(_requests(target, 10))  # warm the guard's caches
    profile = cProfile.Profile()
    profile.enable()
    asyncio.run(_requests(target, REQUESTS))
    profile.disable()
    return pstats.Stats(profile).total_calls / REQUESTS  # type: ignore[attr-defined]


def main() -> None:
    guard = BrowserGuard(_app, loopback=True, allowed_hosts=[], allowed_origins=[])
    for name, target in (
        ("bare app", _app),
        ("BodySizeLimit", BodySizeLimit(_app, max_bytes=8 << 20)),
        ("BrowserGuard", guard),
    ):
        print(f"{name:14} {calls_per_request(target):5.1f} Python calls per request "
              "(asyncio.run's own included)")  # fmt: skip


if __name__ == "__main__":
    main()
