"""What Stoker's code does on the training thread, counted, never timed: the Python calls into
its code and the calls its code makes (`sys.setprofile`), and the TensorFlow ops run eagerly
there (TensorFlow's op callbacks). The CI guards (tests/fit/test_training_thread_cost.py) and
bench/agent_overhead.py count with it; a count does not depend on the machine's load.
"""

import os
import sys
import threading
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from types import CodeType, FrameType
from typing import Any

_STOKER = f"{os.sep}trainer_agent{os.sep}"


def _is_stoker(code: CodeType) -> bool:
    return _STOKER in code.co_filename


class StokerCalls:
    """Counts, on the thread that starts it, every Python call into Stoker's code (a dataclass
    `__init__` it calls included: generated code, file "<string>") and every call Stoker's
    code makes (C functions included), by name."""

    def __init__(self) -> None:
        self.calls = 0
        self.by_name: Counter[str] = Counter()
        self._on = False

    def _profile(self, frame: FrameType, event: str, arg: Any) -> None:
        if event == "call":
            code = frame.f_code
            caller = frame.f_back
            if _is_stoker(code) or (caller is not None and _is_stoker(caller.f_code)):
                self.calls += 1
                self.by_name[f"{os.path.basename(code.co_filename)}:{code.co_name}"] += 1
        elif event == "c_call" and _is_stoker(frame.f_code):
            self.calls += 1
            self.by_name[f"C:{getattr(arg, '__qualname__', repr(arg))}"] += 1

    def start(self) -> None:
        if not self._on:
            self._on = True
            sys.setprofile(self._profile)

    def stop(self) -> None:
        if self._on:
            self._on = False
            sys.setprofile(None)

    @contextmanager
    def counting(self) -> Iterator["StokerCalls"]:
        self.start()
        try:
            yield self
        finally:
            self.stop()


def steps_counter(callback_base: type, from_batch: int) -> Any:
    """A Keras callback (of the Keras whose `Callback` is `callback_base`) that counts Stoker's
    calls (`StokerCalls`) from the first batch at or past `from_batch` of the first epoch to
    its end: put it first in `callbacks`, so that Stoker's hooks run inside the window. Its
    `calls` and `steps` say how many in how many steps."""

    class StepsCounter(callback_base):
        def __init__(self) -> None:
            super().__init__()
            self.counter = StokerCalls()
            self.first: int | None = None
            self.last = 0

        def on_train_batch_begin(self, batch: int, logs: Any = None) -> None:
            if self.first is None and batch >= from_batch:
                self.first = batch
                self.counter.start()
            self.last = batch

        def on_epoch_end(self, epoch: int, logs: Any = None) -> None:
            self.counter.stop()

        @property
        def steps(self) -> int:
            spe = int(getattr(self.model, "steps_per_execution", 1) or 1)
            return 0 if self.first is None else self.last + spe - self.first

    return StepsCounter()


class EagerOps:
    """The TensorFlow ops run eagerly on the thread that made it, by type, while `counting`
    (a function call counts as one op, named after its function)."""

    def __init__(self) -> None:
        self.by_type: Counter[str] = Counter()
        self._thread = threading.get_ident()

    def _callback(
        self, op_type: Any, inputs: Any, attrs: Any, outputs: Any, op_name: Any = None,
        graph: Any = None,
    ) -> None:  # fmt: skip
        if graph is None and threading.get_ident() == self._thread:
            name = op_type.decode() if isinstance(op_type, bytes) else str(op_type)
            self.by_type[name] += 1

    @contextmanager
    def counting(self) -> Iterator["EagerOps"]:
        from tensorflow.python.framework import op_callbacks

        op_callbacks.add_op_callback(self._callback)
        try:
            yield self
        finally:
            op_callbacks.remove_op_callback(self._callback)

    def plain_ops(self) -> Counter[str]:
        """The ops that are not function calls."""
        return Counter({t: n for t, n in self.by_type.items() if not t.startswith("__")})
