"""The in-memory columnar buffers between the recording threads and the sender thread.

Recording appends one row tuple to a list under a lock (a few hundred nanoseconds); the
sender swaps the list out and turns the rows into columns. When nothing drains them (a
wedged sender), each buffer stops growing at its cap and counts what it drops.
"""

import threading
from operator import itemgetter
from typing import Any

# Wire sections (docs/protocol.md) and their columns, in order.
SECTIONS: dict[str, tuple[str, ...]] = {
    "steps": ("step", "t", "dur", "wait", "batch_size"),
    "metrics": ("step", "name", "value"),
    "epochs": ("epoch", "step", "t", "name", "value"),
    "device": (
        "t", "gpu", "util", "mem_util", "mem_used", "mem_total", "proc_mem",
        "tf_mem_current", "tf_mem_peak", "temp_c", "power_w", "power_limit_w",
        "sm_clock_mhz", "throttle", "pcie_tx_bps", "pcie_rx_bps",
        # NVML GPM (trainer_agent/telemetry/gpm.py) and energy (trainer_agent/telemetry/energy.py)
        "sm_util", "sm_occupancy", "tensor_util", "dram_bw_util", "fp32_util", "fp16_util",
        "energy_j", "energy_integrated",
    ),
    "host": ("t", "proc_cpu", "sys_cpu", "rss", "mem_used", "mem_total"),
    # One row per read of tf.data's model: stages is a list of stage objects per row.
    "pipeline": ("t", "source", "stages", "read_us"),
}  # fmt: skip

# Columns every row has; the others are omitted from a batch when they are all null.
REQUIRED: dict[str, tuple[str, ...]] = {
    "steps": ("step", "t", "dur"),
    "metrics": ("step", "name", "value"),
    "epochs": ("epoch", "step", "t", "name", "value"),
    "device": ("t", "gpu"),
    "host": ("t",),
    "pipeline": ("t", "source", "stages"),
}

Columns = dict[str, list[Any]]


class ColumnBuffer:
    """Rows of one section, handed out as columns."""

    def __init__(self, section: str, max_rows: int) -> None:
        self.section = section
        self._names = SECTIONS[section]
        self._max_rows = max_rows
        self._lock = threading.Lock()
        self._rows: list[tuple[Any, ...]] = []
        self.dropped = 0

    def append(self, *row: Any) -> None:
        with self._lock:
            if len(self._rows) >= self._max_rows:
                self.dropped += 1
                return
            self._rows.append(row)

    def extend(self, rows: list[tuple[Any, ...]]) -> None:
        """Append many rows at once (one lock for all)."""
        with self._lock:
            room = self._max_rows - len(self._rows)
            if room < len(rows):
                self.dropped += len(rows) - max(0, room)
                rows = rows[: max(0, room)]
            self._rows.extend(rows)

    def drain(self) -> Columns | None:
        """Take everything recorded so far, or None when empty."""
        with self._lock:
            if not self._rows:
                return None
            rows, self._rows = self._rows, []
        # One column at a time: `zip(*rows)` would hold an iterator per row, thousands of
        # objects Python's cyclic GC tracks, alive at once (trainer_agent/capture/input_wait.py,
        # `Stamp`, says what that costs).
        columns = {name: list(map(itemgetter(i), rows)) for i, name in enumerate(self._names)}
        required = REQUIRED[self.section]
        for name in self._names:
            if name not in required and columns[name].count(None) == len(rows):
                del columns[name]
        return columns

    def __len__(self) -> int:
        return len(self._rows)


class Recorder:
    """One buffer per wire section."""

    def __init__(self, max_rows: int) -> None:
        self.buffers = {name: ColumnBuffer(name, max_rows) for name in SECTIONS}
        self.steps = self.buffers["steps"]
        self.metrics = self.buffers["metrics"]
        self.epochs = self.buffers["epochs"]
        self.device = self.buffers["device"]
        self.host = self.buffers["host"]
        self.pipeline = self.buffers["pipeline"]

    def drain(self) -> dict[str, Columns]:
        drained = {name: buffer.drain() for name, buffer in self.buffers.items()}
        return {name: columns for name, columns in drained.items() if columns is not None}

    @property
    def dropped(self) -> int:
        return sum(buffer.dropped for buffer in self.buffers.values())

    def __len__(self) -> int:
        return sum(len(buffer) for buffer in self.buffers.values())


def row_count(columns: Columns) -> int:
    return len(next(iter(columns.values()))) if columns else 0
