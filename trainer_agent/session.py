"""One monitored run: its buffer, its sender, and the hello that names it."""

import atexit
import logging
import os
import socket
import sys
import time
import uuid
from collections.abc import Callable
from typing import Any

from trainer_agent.config import AgentConfig
from trainer_agent.nvml import Nvml, shared_nvml
from trainer_agent.recorder import Recorder
from trainer_agent.samplers import DeviceSource, HostSource, Sampler
from trainer_agent.sender import Sender

log = logging.getLogger("trainer_agent")

PROTOCOL_VERSION = 1


def _new_run_key() -> str:
    return uuid.uuid4().hex


class RunSession:
    """Owns the resources of one run; the training thread only calls the `record_*` methods."""

    def __init__(
        self,
        config: AgentConfig,
        *,
        environment: dict[str, Any] | None = None,
        run_key: str | None = None,
        rank: int = 0,
        nvml: Nvml | None = None,
    ) -> None:
        self.config = config
        self._nvml = nvml
        self.run_key = run_key or _new_run_key()
        self.recorder = Recorder(max_rows=config.max_pending_rows)
        hello = {
            "type": "hello",
            "protocol": PROTOCOL_VERSION,
            "run_key": self.run_key,
            "name": config.run_name,
            "project": config.project,
            "tags": list(config.tags),
            "config": config.config,
            "environment": environment or {},
            "host": socket.gethostname()[:200],
            "pid": os.getpid(),
            "rank": rank,
        }
        self.sender = Sender(config=config, hello=hello, buffer=self.recorder)
        # Durations come from the monotonic perf_counter; this offset turns them into wall time.
        self._wall_offset_s = time.time() - time.perf_counter()
        self.sampler: Sampler | None = None
        self.closed = False
        # Set by the owner to hand over what it still holds before an abnormal close.
        self.before_abnormal_close: Callable[[], None] | None = None

    def start(self) -> None:
        self.sender.on_command = self._on_command
        self.sender.start()
        atexit.register(self._close_at_exit)
        try:
            host = HostSource()
        except Exception as error:  # psutil missing or refused
            log.warning("Stoker: host metrics are off (%s)", error)
            host = None
        device = DeviceSource(self._nvml or shared_nvml(), all_gpus=self.config.all_gpus)
        self.sampler = Sampler(
            self.recorder, interval_s=self.config.sample_interval_s, device=device, host=host
        )
        self.sampler.start()

    def _on_command(self, command: dict[str, Any]) -> None:
        """Server commands; unknown ones are ignored (docs/protocol.md)."""
        if command.get("name") == "set_interval" and self.sampler is not None:
            self.sampler.set_interval(float(command["interval_s"]))
            log.info("Stoker: sampling every %.2f s (server command)", self.sampler.interval_s)

    def wall_time(self, perf_s: float) -> float:
        return perf_s + self._wall_offset_s

    def record_step(
        self,
        step: int,
        start_perf_s: float,
        duration_s: float,
        wait_s: float | None = None,
        batch_size: int | None = None,
    ) -> None:
        self.recorder.steps.append(
            step, self.wall_time(start_perf_s), duration_s, wait_s, batch_size
        )

    def record_metric(self, step: int, name: str, value: float | None) -> None:
        self.recorder.metrics.append(step, name[:100], value)

    def close(self, status: str = "finished") -> None:
        """Stop sampling, flush (bounded by `close_timeout_s`) and end the run with `status`."""
        if self.closed:
            return
        self.closed = True
        atexit.unregister(self._close_at_exit)
        if self.sampler is not None:
            self.sampler.close()
        self.sender.close(status)

    def _close_at_exit(self) -> None:
        # The process is exiting with the run still open: training raised (the interpreter
        # keeps the uncaught exception in sys.last_value), was interrupted, or just ended.
        error = getattr(sys, "last_value", None)
        if isinstance(error, KeyboardInterrupt):
            status = "interrupted"
        elif error is not None:
            status = "failed"
        else:
            status = "finished"
        log.info("Stoker: process exiting; ending run as %s", status)
        self.close_abnormally(status)

    def close_abnormally(self, status: str) -> None:
        """End a run its owner did not close (training raised or the process is exiting)."""
        if self.before_abnormal_close is not None:
            try:
                self.before_abnormal_close()
            except Exception:
                log.debug("could not hand over the last records", exc_info=True)
        self.close(status)
