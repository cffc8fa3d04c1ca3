"""One trial of `stoker tune`, inside the script's own process.

`stoker tune` starts the script with `STOKER_TUNE` set (a `TrialSpec` as JSON); the
`sitecustomize` that `stoker run` uses calls `start_trial`, which turns autolog on with
`TrialHooks`. At the script's first `fit` the hooks apply the trial's change (the
pipeline rebuilt from the user's own datasets, or `steps_per_execution`), let Stoker's
callback monitor the fit as a run of the tune group, stop it after N steps, write what was
measured to the spec's result file and end the process: the rest of the script does not run.
The unchanged run also lists every change Stoker would try on this fit and why some are not.

A process the script starts inherits `STOKER_TUNE`; only the first to reach a fit (it
creates the claim file) is the trial, the others' fits run unmonitored.
"""

import json
import logging
import math
import os
import statistics
import sys
import time
import traceback
from dataclasses import asdict, dataclass, field
from typing import Any

from trainer_agent.capture import autolog
from trainer_agent.tune import changes as changes_module
from trainer_agent.tune.chain import Link, cardinality, links, signature
from trainer_agent.tune.rebuild import CannotRebuild

TUNE_ENV = "STOKER_TUNE"
UNCHANGED = "unchanged"
# The first steps of a trial are not measured: tracing, the autotuner's ramp, caches.
WARMUP_SHARE = 0.1
MAX_WARMUP_STEPS = 20
# How long a trial waits, at its end, for its run to reach the server.
DELIVERY_TIMEOUT_S = 30.0
# A trial that cannot run its change exits with this code (the result says why).
NOT_APPLIED_EXIT = 3

log = logging.getLogger("trainer_agent")


@dataclass
class TrialSpec:
    """What one trial process is to do (from `stoker tune`, in `STOKER_TUNE`)."""

    trial: str  # UNCHANGED or a change id
    steps: int
    result_path: str
    claim_path: str
    work_dir: str
    cache_budget_bytes: int
    steps_per_execution: int | None = None
    # The unchanged run's pipeline (chain.signature): a trial's script must build the same.
    signature: list[str] | None = None

    def to_json(self) -> str:
        return json.dumps(asdict(self))

    @classmethod
    def from_json(cls, text: str) -> "TrialSpec":
        return cls(**json.loads(text))


@dataclass
class TrialResult:
    """What a trial measured (written as JSON to the spec's result file)."""

    trial: str
    status: str = "ok"  # "ok", "not_applied", "failed", "declined"
    error: str | None = None
    steps: int = 0  # steps the fit ran, up to N
    measured_steps: int = 0  # after the warm-up
    warmup_steps: int = 0
    steps_per_s: float | None = None
    input_wait_share: float | None = None
    step_ms_median: float | None = None
    compute_ms_median: float | None = None
    # Elements the N steps consumed: batches, and examples (the batches' sizes summed).
    batches: int = 0
    examples: int | None = None
    cpu_cores: float | None = None  # process CPU time over the measured steps' wall time
    steps_per_epoch: int | None = None
    data: str = ""  # "tf.data", or what the fit's x was
    signature: list[str] = field(default_factory=list)
    changes: list[dict[str, Any]] = field(default_factory=list)
    # Each user function's share of the pipeline's processing time (the unchanged run).
    time_shares: dict[str, float] = field(default_factory=dict)


def start_trial(spec_json: str, autolog_options: dict[str, Any]) -> None:
    """Turn autolog on with the trial's hooks (called by the `stoker run` sitecustomize)."""
    spec = TrialSpec.from_json(spec_json)
    autolog.set_fit_hooks(TrialHooks(spec))
    autolog.autolog(**autolog_options)


def _write(path: str, result: TrialResult) -> None:
    temporary = f"{path}.{os.getpid()}.tmp"
    with open(temporary, "w", encoding="utf-8") as file:
        json.dump(asdict(result), file)
    os.replace(temporary, path)


def end_process(code: int) -> None:
    """End the trial's process now: the rest of the script is not the trial's. Python's own
    shutdown is skipped too (a tf.data iterator still alive in a numpy_function can hang it)."""
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


class TrialHooks:
    """autolog's `FitHooks` for one trial."""

    def __init__(self, spec: TrialSpec) -> None:
        self.spec = spec
        self.claimed = False

    def _claim(self) -> bool:
        if self.claimed:
            return False  # the trial's fit ran already; another fit is not measured
        try:
            os.close(os.open(self.spec.claim_path, os.O_CREAT | os.O_EXCL | os.O_WRONLY))
        except FileExistsError:
            return False
        self.claimed = True
        return True

    def declined(self, reason: str) -> None:
        if self._claim():
            error = (
                f"{reason}: stoker tune measures a fit that it monitors itself; run the script "
                "without that callback (stoker tune and stoker run add one)"
            )
            result = TrialResult(trial=self.spec.trial, status="declined", error=error)
            _write(self.spec.result_path, result)
            end_process(NOT_APPLIED_EXIT)

    def prepare(
        self, model: Any, keras_name: str, arguments: dict[str, Any], callback: Any
    ) -> bool:
        if not self._claim():
            return False
        try:
            return self._prepare(model, keras_name, arguments, callback)
        except _NotApplied as not_applied:
            reason = str(not_applied)
            result = TrialResult(trial=self.spec.trial, status="not_applied", error=reason)
            _write(self.spec.result_path, result)
            end_process(NOT_APPLIED_EXIT)
        except Exception as error:
            result = TrialResult(
                trial=self.spec.trial,
                status="failed",
                error=f"{type(error).__name__}: {error}\n{traceback.format_exc(limit=6)}",
            )
            _write(self.spec.result_path, result)
            end_process(1)
        return False  # not reached: end_process does not return

    def _prepare(
        self, model: Any, keras_name: str, arguments: dict[str, Any], callback: Any
    ) -> bool:
        spec = self.spec
        x = arguments.get("x")
        dataset, chain, data = _pipeline(x)
        steps_per_epoch = _steps_per_epoch(arguments, dataset)
        files = _search_files(chain)
        context = changes_module.Context(
            steps=spec.steps,
            steps_per_epoch=steps_per_epoch,
            cache_budget_bytes=spec.cache_budget_bytes,
            model=model,
        )
        candidates = changes_module.candidate_changes(dataset, chain, files, context)
        if dataset is None:
            candidates = [*changes_module.not_a_pipeline(data), *candidates]
        if spec.signature is not None and signature(chain) != spec.signature:
            raise _NotApplied(
                "the script built a different pipeline than in the unchanged run "
                f"({' > '.join(signature(chain))})"
            )
        cache_file = _cache_file(spec.work_dir, spec.trial)
        if dataset is not None:
            redirected = changes_module.with_file_caches_redirected(chain, cache_file)
            if redirected is not None:
                dataset, chain = redirected, links(redirected)
        if spec.trial != UNCHANGED:
            dataset = self._apply(spec, candidates, chain, dataset, model, cache_file)
        if dataset is not None:
            arguments["x"] = dataset
        _run_for_steps(arguments, spec.steps, steps_per_epoch)
        trial_callback = _trial_callback_class(keras_name)(
            spec=spec,
            stoker=callback,
            result=TrialResult(
                trial=spec.trial,
                steps_per_epoch=steps_per_epoch,
                data=data,
                signature=signature(chain),
                changes=[c.as_dict() for c in candidates] if spec.trial == UNCHANGED else [],
            ),
        )
        arguments["callbacks"] = [*arguments["callbacks"], trial_callback]
        return True

    def _apply(
        self,
        spec: TrialSpec,
        candidates: list[changes_module.Change],
        chain: list[Link],
        dataset: Any,
        model: Any,
        cache_file: Any,
    ) -> Any:
        change = next((c for c in candidates if c.id == spec.trial), None)
        if change is None:
            raise _NotApplied(f"this fit offers no change {spec.trial!r}")
        if change.not_tried:
            raise _NotApplied(change.not_tried)
        if change.advice == "steps_per_execution":
            if not spec.steps_per_execution:
                raise _NotApplied("no steps_per_execution given")
            changes_module.set_steps_per_execution(model, spec.steps_per_execution)
            return dataset
        try:
            return changes_module.apply_to_dataset(change.id, chain, dataset, cache_file)
        except CannotRebuild as error:
            raise _NotApplied(str(error)) from None


class _NotApplied(Exception):
    """The trial's change cannot be applied to this fit; the message says why."""


def _pipeline(x: Any) -> tuple[Any, list[Link], str]:
    """(the tf.data dataset or None, its chain, what the data is)."""
    tf = sys.modules.get("tensorflow")
    if tf is not None and isinstance(x, tf.data.Dataset):
        return x, links(x), "tf.data"
    kind = type(x).__name__
    if type(x).__module__.startswith("numpy"):
        kind = "a NumPy array"
    elif kind in ("generator",):
        kind = "a Python generator"
    else:
        kind = f"a {kind}"
    return None, [], kind


def _search_files(chain: list[Link]) -> list[str]:
    from trainer_agent.tune.source import search_files

    return search_files(chain)


def _steps_per_epoch(arguments: dict[str, Any], dataset: Any) -> int | None:
    given = arguments.get("steps_per_epoch")
    if given:
        return int(given)
    if dataset is None:
        return None
    count = cardinality(dataset)
    return count if count > 0 else None


def _run_for_steps(arguments: dict[str, Any], steps: int, steps_per_epoch: int | None) -> None:
    """The fit's arguments for a trial: enough epochs for `steps` steps, no validation (only
    training steps are measured), no progress bar."""
    if steps_per_epoch:
        initial = int(arguments.get("initial_epoch") or 0)
        needed = initial + math.ceil(steps / steps_per_epoch)
        arguments["epochs"] = max(int(arguments.get("epochs") or 1), needed)
    arguments["validation_data"] = None
    arguments["verbose"] = 0


def _cache_file(work_dir: str, trial: str) -> Any:
    safe = "".join(c if c.isalnum() else "-" for c in trial)

    def path(index: int) -> str:
        return os.path.join(work_dir, f"cache-{safe}-{index}")

    return path


def warmup_steps(steps: int, steps_per_execution: int = 1) -> int:
    """The first steps left out: a tenth of them (at most 20), and at least the first call of
    the train function (its steps share the tracing time)."""
    return max(1, steps_per_execution, min(MAX_WARMUP_STEPS, int(steps * WARMUP_SHARE)))


def measure(
    rows: dict[int, tuple[float, float | None, int | None]],
    steps: int,
    result: TrialResult,
    steps_per_execution: int = 1,
) -> TrialResult:
    """The result's figures from the recorded steps (step -> duration, wait, batch size):
    the steps after the warm-up up to `steps - 1` are measured, all `steps` counted."""
    counted = [rows[step] for step in sorted(rows) if step < steps]
    result.steps = len(counted)
    result.batches = len(counted)
    sizes = [size for _, _, size in counted]
    result.examples = sum(s for s in sizes if s is not None) if None not in sizes else None
    result.warmup_steps = warmup_steps(steps, steps_per_execution)
    window = [rows[step] for step in sorted(rows) if result.warmup_steps <= step < steps]
    result.measured_steps = len(window)
    total = sum(duration for duration, _, _ in window)
    if not window or total <= 0:
        return result
    result.steps_per_s = len(window) / total
    result.step_ms_median = statistics.median(d for d, _, _ in window) * 1000
    waited = [(d, w) for d, w, _ in window if w is not None]
    if len(waited) * 2 >= len(window):  # an epoch's first step may have no measured wait
        result.input_wait_share = sum(w for _, w in waited) / sum(d for d, _ in waited)
        result.compute_ms_median = statistics.median(max(0.0, d - w) for d, w in waited) * 1000
    else:
        result.compute_ms_median = result.step_ms_median
    return result


class TrialCallbackBase:
    """Counts the fit's steps, stops it after N, measures them through Stoker's callback,
    writes the result and ends the process at the fit's end. Keras's `Callback` of the
    model's family is added as a base (`_trial_callback_class`)."""

    model: Any
    params: dict[str, Any]

    def __init__(self, *, spec: TrialSpec, stoker: Any, result: TrialResult) -> None:
        super().__init__()
        self.spec = spec
        self.stoker = stoker
        self.result = result
        self.rows: dict[int, tuple[float, float | None, int | None]] = {}
        self.steps_before_epoch = 0
        self.steps_in_epoch = 0
        self.stopping = False
        self.cpu_started: tuple[float, float] | None = None
        self.cpu_s: float | None = None

    def _record(
        self, step: int, start: float, duration: float, wait: float | None, batch: int | None
    ) -> None:
        self.rows[step] = (duration, wait, batch)

    def on_train_begin(self, logs: Any = None) -> None:
        session = getattr(self.stoker, "run_session", None)
        if session is not None:
            session.step_listener = self._record

    def on_epoch_begin(self, epoch: int, logs: Any = None) -> None:
        self.steps_in_epoch = 0

    def on_train_batch_begin(self, batch: int, logs: Any = None) -> None:
        per_call = _steps_per_call(self.model)
        step = self.steps_before_epoch + batch
        self.steps_in_epoch = batch + per_call
        warmup = warmup_steps(self.spec.steps, per_call)
        if self.cpu_started is None and step >= warmup:
            self.cpu_started = (time.process_time(), time.perf_counter())
        if not self.stopping and step + per_call >= self.spec.steps:
            self.stopping = True
            self.model.stop_training = True
            self._read_pipeline()

    def on_epoch_end(self, epoch: int, logs: Any = None) -> None:
        self.steps_before_epoch += self.steps_in_epoch
        self.steps_in_epoch = 0

    def _read_pipeline(self) -> None:
        """The unchanged run's share of the pipeline's time per user function, from tf.data's
        model of the live iterator, to keep only the maps worth parallelizing."""
        if self.spec.trial != UNCHANGED:
            return
        session = getattr(self.stoker, "run_session", None)
        try:
            stages = session.pipeline.stages_now() if session is not None else []
        except Exception as error:
            log.info("Stoker tune: tf.data's model could not be read (%s)", error)
            return
        self.result.time_shares = changes_module.time_shares(stages)
        changes_module.ranked_parallel(self.result.changes, self.result.time_shares)

    def on_train_end(self, logs: Any = None) -> None:
        if self.cpu_started is not None:
            cpu, wall = self.cpu_started
            elapsed = time.perf_counter() - wall
            if elapsed > 0:
                self.result.cpu_cores = (time.process_time() - cpu) / elapsed
        from trainer_agent.capture.session import flush

        # Stoker's callback (before this one) ended the run; its last steps are matched to
        # their stamps on its sender thread before they are sent, so they are all recorded
        # (and handed to `_record`) once the run is delivered.
        flush(DELIVERY_TIMEOUT_S)
        result = measure(self.rows, self.spec.steps, self.result, _steps_per_call(self.model))
        _write(self.spec.result_path, result)
        end_process(0)


def _steps_per_call(model: Any) -> int:
    return changes_module.steps_per_execution(model) or 1


def _trial_callback_class(keras_name: str) -> type:
    import importlib

    base = importlib.import_module(keras_name).callbacks.Callback
    return type("StokerTuneTrial", (TrialCallbackBase, base), {"__module__": __name__})
