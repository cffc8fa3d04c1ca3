"""`StokerCallback`: step timing, input wait and scalar logs for `model.fit`."""

import functools
import importlib
import logging
import os
import threading
import time
from typing import Any, Unpack

from trainer_agent.capture.dataset_graph import DatasetNode, read_dataset
from trainer_agent.capture.dispatched import DispatchedSteps
from trainer_agent.capture.fit_stamps import FitStamps
from trainer_agent.capture.guard import DISABLED_STATUS, Guard, end_in_background
from trainer_agent.capture.input_wait import (
    Execution,
    Row,
    split_execution,
)
from trainer_agent.capture.job import job_rank, job_run_key
from trainer_agent.capture.pipeline import describe_tree
from trainer_agent.capture.session import RunSession, scalars
from trainer_agent.capture.stamped_iterator import batch_hint, ring_for
from trainer_agent.capture.step_boundary import StepBoundary
from trainer_agent.capture.train_function import keras_backend
from trainer_agent.config import AgentConfig, RunArguments, RunOptions, takes_run_options
from trainer_agent.log_once import warn_once
from trainer_agent.telemetry.environment import collect_later
from trainer_agent.telemetry.nvml import shared_nvml

log = logging.getLogger("trainer_agent")

# Every Keras hook the callback overrides; each is guarded (trainer_agent/capture/guard.py).
GUARDED_HOOKS = (
    "on_train_begin", "on_train_batch_begin", "on_train_batch_end", "on_test_begin",
    "on_test_end", "on_epoch_end", "on_train_end",
)  # fmt: skip


def _keras_callback_base() -> type:
    """The `Callback` class of the Keras whose `fit` will run: tf_keras when TensorFlow is
    told to use it (`TF_USE_LEGACY_KERAS`, TensorFlow's own switch), else Keras 3. Each
    Keras refuses the other's callbacks."""
    if os.environ.get("TF_USE_LEGACY_KERAS", "") in ("true", "True", "1"):
        try:
            import tf_keras

            return tf_keras.callbacks.Callback
        except ImportError:
            pass
    import keras

    return keras.callbacks.Callback


class StokerHooks:
    """Streams every training step of `model.fit` to a Stoker server.

    A step's time is measured from one `on_train_batch_begin` to the next, so it includes
    everything the training loop does per step. Pass the training data through
    `cb.wrap(dataset)` to measure input wait: the train function's own fetch of each batch
    is stamped in its graph when it asks and when the batch is handed over.
    The batch hooks only append to memory; the stamps are read and matched to the steps on
    the run's sender thread, the scalar logs kept every `every_n_batches` steps. All I/O
    happens in one background thread; if the server is down, training is unaffected. Each
    `fit()` call is one run. If the agent itself fails, it logs why once, ends its run and
    stays off; training goes on.

    Takes the keyword arguments of `trainer_agent.config.RunOptions` (the same as `Monitor`
    and `autolog`): run_name, project, tags, config, server, token, run_key, every_n_batches,
    sample_interval_s, all_gpus.

    Example:
        cb = StokerCallback(run_name="bs256", project="cifar10", config={"batch_size": 256})
        model.fit(cb.wrap(train_ds), epochs=3, callbacks=[cb])
    """

    # Keras may run the batch-end hook on a thread pool (backends that allow it, JAX and
    # PyTorch; with TensorFlow all hooks are synchronous), possibly after the next
    # batch-begin. It only appends to locked buffers and dicts there; the steps' ends are
    # stamped by the train-function wrapper on the training thread (`StepBoundary`), which
    # also closes the profiler's step marker: the profiler leaves a marker alone off the
    # thread that opened it (tests/fit/test_profiler_threads.py drives it so).
    async_safe = True
    # tf_keras: hand the batch logs over as tensors; only every n-th step's are converted.
    _supports_tf_logs = True
    # Set by the Keras callback base the concrete class adds (`set_model`, `set_params`).
    model: Any
    params: dict[str, Any]

    @takes_run_options
    def __init__(self, **options: Unpack[RunArguments]) -> None:
        super().__init__()
        self.options = RunOptions.of(type(self).__name__, options)
        self._agent_config = AgentConfig.from_options(self.options)
        self.every_n_batches = self.options.every_n_batches
        # The fit's stamped fetches (its model's ring) and the calls still to be matched to
        # them, while its fetches are stamped (TensorFlow); resolved on the sender thread.
        self._stamps: FitStamps | None = None
        # Whether `wrap` was called: the fits of this callback then measure input wait.
        self._wrapped = False
        # What `wrap` learned of the training pipeline: its description (for the diagnosis's
        # advice), its functions' names (for the pipeline view's stages) and the batch size
        # it batches to (for fetches whose size the graph does not read); None unwrapped.
        self._input_pipeline: dict[str, Any] | None = None
        self._batch_hint: int | None = None
        self._dataset_tree: DatasetNode | None = None
        self._session: RunSession | None = None
        # Sees the step's boundaries (train-function call and return, batch begin and end)
        # and hands them to the timing below, the profiler's markers and the pipeline view.
        self._boundary = StepBoundary()
        self._epochs_done = 0
        # PyTorch: the epoch iterator fetches between a call's return and the next begin.
        self._fetches_before_begin = False
        # JAX and PyTorch: when each execution's outputs were ready (its batch-end hook, which
        # Keras calls once the logs are converted), by its first step. JAX's executions wait
        # for that time in the fit's `DispatchedSteps`, matched to it on the sender thread.
        self._done: dict[int, float] = {}
        self._dispatched: DispatchedSteps | None = None
        self._guard = Guard(
            self,
            {name: None for name in GUARDED_HOOKS} | {"wrap": _unwrapped},
            on_disable=self._end_disabled_run,
        )

    @property
    def run_session(self) -> RunSession | None:
        return self._session

    def wrap(self, dataset: Any) -> Any:
        """Return `dataset`, noted so that this callback's fits measure input wait.

        Wrap the dataset you pass to `fit` as the training data. The dataset is returned as
        it is: the train function's own fetches are timed (two timestamps around each, in
        its graph), and `wrap` only describes the pipeline for the diagnosis's advice and the
        pipeline view. Nothing is traced here.
        """
        try:
            self._wrapped = True
            described = _last_wrapped.get(dataset)
            if described is None:
                described = _described(dataset)
                _last_wrapped.put(dataset, described)
            self._input_pipeline, self._dataset_tree, self._batch_hint = described
        except Exception as error:
            return self._unstamped(error, dataset)
        return dataset

    def _stamped(self, iterator: Any) -> Any:
        """The train function's iterator for `iterator` (TensorFlow): the same, with its
        fetches stamped into the model's ring; `iterator` itself when it cannot be."""
        stamps = self._stamps
        if stamps is None or stamps.unstamped:
            return iterator
        try:
            stamped = stamps.ring.stamped(iterator)
            if stamped is None:
                raise TypeError(f"{type(iterator).__name__} is not an iterator it can stamp")
            stamps.started()
            return stamped
        except Exception as error:
            self._stamp_failed(error)
            return iterator

    def _stamp_failed(self, error: BaseException) -> None:
        """The fetches of this fit cannot be stamped: it is still monitored (step times,
        samplers); only its input wait is not."""
        try:
            if self._stamps is not None:
                self._stamps.without_stamps()
            warn_once(
                f"stamp:{type(error).__name__}",
                "Stoker: input wait is not measured for this fit: its input cannot be "
                "stamped (%s: %s). Step times and device metrics are still recorded.",
                type(error).__name__, error,
            )  # fmt: skip
        except Exception as unexpected:
            self._guard.trip("on_train_batch_begin", unexpected)

    def _unstamped(self, error: BaseException, dataset: Any) -> Any:
        """`wrap` failed: the dataset as given, its fits monitored without input wait."""
        self._wrapped = False
        self._input_pipeline = self._dataset_tree = self._batch_hint = None
        warn_once(
            f"wrap:{type(error).__name__}",
            "Stoker: input wait is not measured for this fit: its dataset cannot be "
            "stamped (%s: %s). Step times and device metrics are still recorded.",
            type(error).__name__, error,
        )  # fmt: skip
        return dataset

    def on_train_begin(self, logs: dict[str, Any] | None = None) -> None:
        try:
            self._begin_run()
        except Exception as error:
            self._guard.trip("on_train_begin", error)

    def _begin_run(self) -> None:
        if self._session is not None:
            # The previous fit() never reached on_train_end: it raised.
            self._session.close_abnormally("failed")
            self._session = None
        nvml = shared_nvml()
        pipeline = self._input_pipeline
        environment = collect_later(  # the slow part is read on the sender thread
            nvml, model=self.model, fit_params=self.params, all_gpus=self._agent_config.all_gpus,
            extra={"input_pipeline": pipeline} if pipeline else None,
        )  # fmt: skip
        self._session = RunSession(
            self._agent_config,
            environment=environment,
            rank=job_rank(),
            nvml=nvml,
            run_key=job_run_key(self._agent_config.run_name, self.options.run_key),
        )
        self._session.before_abnormal_close = self._hand_over_completed_steps
        self._session.start()
        # Stoker appends nothing to the pipeline: a prefetch the user's tree does not account
        # for is tf.data's.
        self._session.pipeline.describe(self._dataset_tree, stamped=False)
        session, profiler, boundary = self._session, self._session.profiler, self._boundary
        backend = keras_backend(self.model)
        self._done, self._dispatched = {}, None
        self._stamps = None
        if self._wrapped and backend == "tensorflow":
            try:
                ring = ring_for(self.model)
                self._stamps = FitStamps(ring, session.record_steps, self._batch_hint)
            except Exception as error:
                self._stamp_failed(error)
        stamps = self._stamps
        if stamps is not None:
            # The ring is read and its stamps matched to the steps before each flush.
            session.sender.before_collect = functools.partial(stamps.resolve, blocking=False)
        elif backend == "jax":
            # The closed executions are matched to their device time before each flush.
            self._dispatched = DispatchedSteps(self._done, session.record_steps)
            session.sender.before_collect = self._dispatched.before_flush
        sampler = session.sampler
        boundary.attach(
            self.model, (self.params or {}).get("steps"),
            began=(), computed=(),
            closed=self._closed if stamps is None else stamps.closed,
            ready=self._outputs_ready, ended=(self._batch_logs,),
            watchers=(session.pipeline,), on_error=self._guard.trip,
            stamp=_FetchStamps(self) if stamps is not None else None,
            step_ended=sampler.step_ended if sampler is not None else _no_step_ended,
            long_step_s=self._agent_config.sample_interval_s, ended_every=self.every_n_batches,
        )  # fmt: skip
        if stamps is not None:
            boundary.hold_back(stamps.backlog(boundary.steps_per_execution))
        elif self._dispatched is not None:
            boundary.hold_back(self._dispatched.backlog())
        # The profiler's step markers run only while a capture is asked for or runs.
        profiler.arm_with(boundary.arm(profiler.step_begin, profiler.step_end))
        self._fetches_before_begin = backend == "torch" and boundary.timing == "returns"
        self._epochs_done = 0

    def on_train_batch_begin(self, batch: int, logs: dict[str, Any] | None = None) -> None:
        try:
            self._boundary.batch_begin(batch)
        except Exception as error:
            self._guard.trip("on_train_batch_begin", error)

    def on_train_batch_end(self, batch: int, logs: dict[str, Any] | None = None) -> None:
        try:
            self._boundary.batch_end(batch, logs)
        except Exception as error:
            self._guard.trip("on_train_batch_end", error)

    def _outputs_ready(self, first_step: int, when: float) -> None:
        """JAX and PyTorch: the outputs of the call that began at `first_step` are ready."""
        self._done[first_step] = when

    def _batch_logs(self, step: int, logs: dict[str, Any] | None) -> None:
        """Keep the batch logs of every `every_n_batches`-th step (the boundary calls this
        only then)."""
        session = self._session
        if session is None or not logs:
            return
        for name, value in logs.items():
            try:
                session.record_metric(step, str(name), float(value))
            except (TypeError, ValueError):
                continue

    def on_test_begin(self, logs: dict[str, Any] | None = None) -> None:
        try:
            # Validation runs after the epoch's last step; it must not count as step time.
            self._boundary.close(time.perf_counter())
        except Exception as error:
            self._guard.trip("on_test_begin", error)

    def on_test_end(self, logs: dict[str, Any] | None = None) -> None:
        try:
            # fit's own validation arrives as val_* in the epoch logs; a standalone
            # evaluate() during the run is kept beside the epoch in progress.
            if self._session is not None and logs and not _in_fit_validation(self.model):
                evaluated = {f"evaluate_{name}": value for name, value in scalars(logs).items()}
                self._session.record_epoch(self._epochs_done, self._boundary.step, evaluated)
        except Exception as error:
            self._guard.trip("on_test_end", error)

    def on_epoch_end(self, epoch: int, logs: dict[str, Any] | None = None) -> None:
        try:
            self._boundary.close(time.perf_counter())
            self._renumber_short_calls()
            self._resolve_dispatched()
            self._epochs_done = epoch + 1
            if self._session is not None and logs:
                metrics = scalars(logs)
                if "learning_rate" not in metrics and "lr" not in metrics:
                    rate = _learning_rate(self.model)
                    if rate is not None:
                        metrics["learning_rate"] = rate
                self._session.record_epoch(epoch, self._boundary.step, metrics)
        except Exception as error:
            self._guard.trip("on_epoch_end", error)

    def on_train_end(self, logs: dict[str, Any] | None = None) -> None:
        try:
            self._boundary.close(time.perf_counter())
            self._resolve_dispatched()
            # The calls still to be matched to their stamps are, by the sender, before the
            # run's last records are sent.
            session, self._session = self._session, None
            self._release_fit()
            if session is not None:
                session.profiler.end()
                session.close("finished", wait=False)  # delivered in the background (§ agent.md)
        except Exception as error:
            self._guard.trip("on_train_end", error)

    def _release_fit(self) -> None:
        """Let go of everything of the fit that ended: its train function and its iterator.

        A `tf.data` iterator still referenced when the interpreter shuts down is destroyed
        during finalization, and one whose threads are inside a Python function
        (`numpy_function`, `py_function`, a generator) then waits forever for the GIL.
        """
        self._boundary.detach(self.model)

    def _end_disabled_run(self, reason: str) -> None:
        # The steps still held here are dropped: the state that raised is not trusted.
        session, self._session = self._session, None
        self._stamps = self._dispatched = None
        if session is not None:
            session.sender.before_collect = None
        try:
            self._release_fit()  # the call in progress is dropped with it
        except Exception:
            log.debug("Stoker could not restore the train function", exc_info=True)
        if session is not None:
            end_in_background(session, DISABLED_STATUS)

    def _hand_over_completed_steps(self) -> None:
        # The step that was open when training raised never completed: it is not recorded.
        self._boundary.open = None
        try:
            if self._stamps is not None:
                self._stamps.resolve()
            self._resolve_dispatched()
        finally:
            self._release_fit()

    def _closed(self, execution: Execution) -> None:
        """The boundary closed a call that trained: record its steps, or keep them until
        their device time (JAX) is known. (Calls whose fetches are stamped go to `FitStamps`
        instead.)"""
        session = self._session
        if session is None:
            return
        dispatched = self._dispatched
        if execution.fetched is not None and dispatched is not None:
            dispatched.closed(execution)  # JAX: matched to its device time on the sender thread
        elif self._fetches_before_begin:
            done = self._done.pop(execution.first_step, None)
            next_begin = execution.end if execution.closed_by_begin else None
            self._record(_fetched_before_begin(execution, next_begin, done))
        elif execution.n == 1:  # the common case, recorded without building rows
            session.record_step(
                execution.first_step,
                execution.begin,
                execution.end - execution.begin,
                tell_sampler=False,
            )
        else:
            self._record(split_execution(execution, None))

    def _resolve_dispatched(self) -> None:
        """The epoch's or the fit's end (Keras has run every batch-end hook): the closed JAX
        executions, all of them, matched to their device time here."""
        if self._dispatched is not None:
            self._dispatched.resolve(final=True)

    def _renumber_short_calls(self) -> None:
        """At an epoch's end under `steps_per_execution` > 1: the epoch's last call may have
        run out of data after fewer steps than counted (tf.data did not know the epoch's
        length). Its stamps say so; the steps from here on are numbered from its real end,
        before the next epoch numbers any."""
        stamps = self._stamps
        if stamps is None or self._boundary.steps_per_execution == 1:
            return  # one step a call: none is ever short
        stamps.resolve()
        shortfall = stamps.take_shortfall()
        if shortfall:
            self._boundary.shorten(shortfall)

    def _record(self, rows: list[Row]) -> None:
        session = self._session
        if session is not None:
            session.record_steps(rows)


class _FetchStamps:
    """What the train-function wrapper asks of the callback for each new iterator."""

    def __init__(self, hooks: StokerHooks) -> None:
        self._hooks = hooks

    def stamped(self, iterator: Any) -> Any:
        return self._hooks._stamped(iterator)

    def failed(self, error: BaseException) -> None:
        self._hooks._stamp_failed(error)


class StokerCallback(StokerHooks, _keras_callback_base()):  # type: ignore[misc]
    __doc__ = StokerHooks.__doc__


@functools.cache
def callback_class(keras_name: str) -> type[StokerHooks]:
    """`StokerCallback` for the fits of one Keras: "keras" (Keras 3, or Keras 2 up to TF 2.15)
    or "tf_keras". The importable `StokerCallback` is the one for the Keras that `tf.keras`
    names; a process can fit with both (a tf_keras model in a Keras 3 script), and each
    Keras takes only its own callbacks."""
    if keras_family(StokerCallback) == keras_name:
        return StokerCallback
    base = importlib.import_module(keras_name).callbacks.Callback
    attributes = {"__doc__": StokerHooks.__doc__, "__module__": __name__}
    return type("StokerCallback", (StokerHooks, base), attributes)


def keras_family(callback_class: type) -> str:
    """ "keras" or "tf_keras": the Keras whose `Callback` the class derives from."""
    for base in callback_class.__mro__:
        if base.__name__ == "Callback" and base is not StokerHooks:
            return base.__module__.split(".")[0]
    return ""


class _LastWrapped:
    """The dataset wrapped last in this process and its description. A script that fits
    again on the same dataset (a fit per epoch, active learning, autolog's new callback at
    every fit) gets it back instead of walking the pipeline again. Only the last one is
    held, so at most one dataset is kept beyond its fit; no iterator is."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._entry: tuple[Any, tuple[Any, Any, Any]] | None = None

    def get(self, dataset: Any) -> tuple[Any, Any, Any] | None:
        with self._lock:
            entry = self._entry
        if entry is None or entry[0] is not dataset:
            return None
        return entry[1]

    def put(self, dataset: Any, described: tuple[Any, Any, Any]) -> None:
        with self._lock:
            self._entry = (dataset, described)


_last_wrapped = _LastWrapped()


def _fetched_before_begin(
    execution: Execution, next_begin: float | None, done: float | None
) -> list[Row]:
    """PyTorch: Keras's epoch iterator fetches the next batches between a train-function call's
    return and the next batch-begin; the device idled for them from when it finished (`done`,
    if known by then, else the return) to that begin. The wait lies in the last step of
    `execution`. Closed otherwise (validation, the epoch's end), no fetch followed."""
    rows = split_execution(execution, None)
    if next_begin is not None and execution.returned is not None:
        free = execution.returned if done is None else max(done, execution.returned)
        rows = [(step, start, dur, 0.0, size) for step, start, dur, _, size in rows]
        step, start, dur, _, size = rows[-1]
        rows[-1] = (step, start, dur, min(dur, max(0.0, next_begin - free)), size)
    return rows


def _in_fit_validation(model: Any) -> bool:
    """Whether `fit` is validating: it keeps its evaluation iterator meanwhile (Keras 3's
    `_eval_epoch_iterator`, tf_keras's `_eval_data_handler`)."""
    return any(
        getattr(model, name, None) is not None
        for name in ("_eval_epoch_iterator", "_eval_data_handler")
    )


def _learning_rate(model: Any) -> float | None:
    """The optimizer's current learning rate, when it has a plain one."""
    try:
        return float(model.optimizer.learning_rate)
    except Exception:
        return None


def _described(dataset: Any) -> tuple[Any, Any, Any]:
    """What `wrap` keeps of a pipeline: its description, its tree (the pipeline view names
    stages by its functions) and the batch size it batches to; all None (said once) when it
    cannot be walked."""
    try:
        tree = read_dataset(dataset)
        described = None if tree is None else describe_tree(tree)
        return described, tree, batch_hint(dataset)
    except Exception as error:
        warn_once(
            f"describe:{type(error).__name__}",
            "Stoker: the input pipeline is not described (%s: %s)", type(error).__name__, error,
        )  # fmt: skip
        return None, None, None


def _no_step_ended(duration_s: float) -> None:
    return None


def _unwrapped(dataset: Any) -> Any:
    """`wrap` once the agent is disabled: the dataset as given."""
    return dataset
