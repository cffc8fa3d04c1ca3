"""The agent's hooks with their step rows kept in memory instead of sent: what the input-wait
accuracy benches (TensorFlow, JAX, PyTorch) compare against their truth. No server is
involved; the unreachable address only gives the agent somewhere to not deliver to."""

from typing import Any

from trainer_agent.capture.callback import StokerCallback
from trainer_agent.capture.input_wait import StepRow
from trainer_agent.capture.monitor import Monitor

NO_SERVER = "http://127.0.0.1:9"


class CapturingCallback(StokerCallback):
    """Keeps the step rows of its latest fit, as its run records them (`step_listener`)."""

    def __init__(self) -> None:
        super().__init__(server=NO_SERVER)
        self._agent_config.close_timeout_s = 0.1
        self.rows: list[StepRow] = []

    def on_train_begin(self, logs: Any = None) -> None:
        super().on_train_begin(logs)
        self.rows = []
        if self.run_session is not None:
            self.run_session.step_listener = self._keep

    def on_train_end(self, logs: Any = None) -> None:
        # The stamped calls still held are matched here rather than on the sender thread:
        # the rows are read as soon as `fit` returns.
        if self._stamps is not None:
            self._stamps.resolve()
        super().on_train_end(logs)

    def _keep(
        self, step: int, start: float, dur: float, wait: float | None, batch_size: int | None
    ) -> None:
        self.rows.append(StepRow(step, start, dur, wait, batch_size))


class CapturingMonitor(Monitor):
    """Keeps `Monitor.iterate`'s step rows. `start`: open a run, which `Monitor.log` needs to
    learn when JAX outputs were ready; timing alone needs none."""

    def __init__(self, *, start: bool = False) -> None:
        super().__init__(server=NO_SERVER)
        self.config.close_timeout_s = 0.1
        self.rows: list[StepRow] = []
        if start:
            self.start()

    def _record_step(self, row: StepRow) -> None:
        self.rows.append(row)
