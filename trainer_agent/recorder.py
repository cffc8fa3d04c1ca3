"""The in-memory columnar buffer between the training thread and the sender thread.

The training thread only appends to Python lists (a few hundred nanoseconds); the sender
swaps the lists out under a lock. When nothing drains it (a wedged sender), the buffer
stops growing at its cap and counts what it drops.
"""

import threading
from typing import Any


class StepBuffer:
    def __init__(self, max_rows: int) -> None:
        self._max_rows = max_rows
        self._lock = threading.Lock()
        self._columns = self._empty()
        self.dropped = 0

    @staticmethod
    def _empty() -> dict[str, list[Any]]:
        return {"step": [], "t": [], "dur": [], "wait": [], "batch_size": []}

    def append(
        self, step: int, t: float, dur: float, wait: float | None, batch_size: int | None
    ) -> None:
        with self._lock:
            columns = self._columns
            if len(columns["step"]) >= self._max_rows:
                self.dropped += 1
                return
            columns["step"].append(step)
            columns["t"].append(t)
            columns["dur"].append(dur)
            columns["wait"].append(wait)
            columns["batch_size"].append(batch_size)

    def drain(self) -> dict[str, list[Any]] | None:
        """Take everything recorded so far, or None when empty."""
        with self._lock:
            if not self._columns["step"]:
                return None
            columns, self._columns = self._columns, self._empty()
        if all(w is None for w in columns["wait"]):
            del columns["wait"]
        if all(b is None for b in columns["batch_size"]):
            del columns["batch_size"]
        return columns

    def __len__(self) -> int:
        return len(self._columns["step"])
