"""`StokerCallback`: step timing for `model.fit`."""

import logging
import time
from typing import Any

import keras

from trainer_agent.config import AgentConfig, resolve_server, resolve_token
from trainer_agent.session import RunSession

log = logging.getLogger("trainer_agent")


class StokerCallback(keras.callbacks.Callback):
    """Streams every training step of `model.fit` to a Stoker server.

    A step's time is measured from one `on_train_batch_begin` to the next, so it includes
    everything the training loop does per step. The callback does not override
    `on_train_batch_end` and never reads `logs` per batch, so it forces no device sync and
    leaves Keras's asynchronous batch-end dispatch on. All I/O happens in one background
    thread; if the server is down, training is unaffected.

    Args:
        run_name: Name shown in the UI. Defaults to a short random id.
        project: Groups runs for filtering and comparison.
        server: Server URL; defaults to `STOKER_SERVER`, then `http://127.0.0.1:8470`.
        config: Your hyperparameters, shown and compared across runs.
        tags: Labels for filtering.
        token: Agent token when the server requires one (default: `STOKER_AGENT_TOKEN`).

    Example:
        cb = StokerCallback(run_name="bs256", project="cifar10", config={"batch_size": 256})
        model.fit(train_ds, epochs=3, callbacks=[cb])
    """

    def __init__(
        self,
        run_name: str = "",
        project: str = "default",
        server: str | None = None,
        config: dict[str, Any] | None = None,
        tags: list[str] | None = None,
        token: str | None = None,
    ) -> None:
        super().__init__()
        self._agent_config = AgentConfig(
            server=resolve_server(server),
            token=resolve_token(token),
            run_name=run_name,
            project=project,
            tags=list(tags or []),
            config=dict(config or {}),
        )
        self._session: RunSession | None = None
        self._step = 0
        self._open_step: int | None = None
        self._open_since = 0.0

    @property
    def run_session(self) -> RunSession | None:
        return self._session

    def on_train_begin(self, logs: dict[str, Any] | None = None) -> None:
        try:
            self._session = RunSession(self._agent_config)
            self._session.start()
        except Exception:
            log.exception("Stoker could not start; training continues unmonitored")
            self._session = None
        self._step = 0
        self._open_step = None

    def on_train_batch_begin(self, batch: int, logs: dict[str, Any] | None = None) -> None:
        now = time.perf_counter()
        self._close_step(now)
        self._open_step = self._step
        self._open_since = now
        self._step += 1

    def on_test_begin(self, logs: dict[str, Any] | None = None) -> None:
        # Validation runs after the epoch's last step; it must not count as step time.
        self._close_step(time.perf_counter())

    def on_epoch_end(self, epoch: int, logs: dict[str, Any] | None = None) -> None:
        self._close_step(time.perf_counter())

    def on_train_end(self, logs: dict[str, Any] | None = None) -> None:
        self._close_step(time.perf_counter())
        if self._session is not None:
            try:
                self._session.close("finished")
            except Exception:
                log.exception("Stoker could not flush its records")
            self._session = None

    def _close_step(self, now: float) -> None:
        if self._open_step is None or self._session is None:
            self._open_step = None
            return
        self._session.record_step(self._open_step, self._open_since, now - self._open_since)
        self._open_step = None
