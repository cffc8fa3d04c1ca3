"""The single database writer.

All writes go through one named thread, so SQLite never sees two writers fighting over its
lock, and the event loop never blocks on a commit.
"""

import asyncio
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from functools import partial
from typing import Any, TypeVar

from sqlalchemy.engine import Engine
from sqlmodel import Session

T = TypeVar("T")


class Writer:
    def __init__(self, engine: Engine) -> None:
        self._engine = engine
        self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="stoker-writer")

    async def run(self, fn: Callable[..., T], /, **kwargs: Any) -> T:
        """Run `fn(session=..., **kwargs)` in the writer thread with a fresh session."""
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(self._pool, partial(self._call, fn, kwargs))

    def _call(self, fn: Callable[..., T], kwargs: dict[str, Any]) -> T:
        with Session(self._engine, expire_on_commit=False) as session:
            return fn(session=session, **kwargs)

    def close(self) -> None:
        self._pool.shutdown(wait=True)
