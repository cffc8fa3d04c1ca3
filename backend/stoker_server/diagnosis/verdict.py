"""Is the GPU being fed? `diagnose` turns a run's window into a verdict with its evidence
and advice.

A measured input wait gives the input-bound level of `levels.py` (the TensorFlow profiler's
20 % and 5 % of step time).
"""

from dataclasses import dataclass, field
from typing import Any

from pydantic import BaseModel

from stoker_server.core.levels import (
    HIGHLY_INPUT_BOUND,
    MODERATELY_INPUT_BOUND,
    VERDICT_WORDS,
    Verdict,
    input_bound_verdict,
    shown_share,
)
from stoker_server.diagnosis.stragglers import find_straggler, worker_timings
from stoker_server.diagnosis.window import RunWindow
from trainer_agent.figures import count_text, ms_text, percent_text, share_text

# Fallback (no measured wait): what utilization and host CPU levels mean.
LOW_UTIL_PCT = 70.0
VERY_LOW_UTIL_PCT = 50.0
CPU_SATURATED_PCT = 85.0
CPU_IDLE_PCT = 50.0
HIGH_STEP_CV = 0.5
# Steps this short pay a fixed cost per step (the fetch, the host's dispatch) that no pipeline
# hides: larger batches or steps_per_execution amortize it.
SHORT_STEP_S = 0.010
WHOLE_RUN = "whole run"


class Evidence(BaseModel):
    key: str
    value: float | int | bool | str | None
    text: str


class GpuFinding(BaseModel):
    """A GPU busy but under-used (stoker_server.diagnosis.gpu_use), with its evidence and advice."""

    key: str  # launch_bound | tensor_cores_idle | oom_ahead | memory_growth_off
    title: str
    evidence: list[Evidence]
    advice: list[str]


class Diagnosis(BaseModel):
    run_id: int
    verdict: Verdict
    # The words every surface writes for the verdict ("moderately input-bound").
    verdict_label: str = ""
    # As shown everywhere: to a tenth of a percent (levels.shown_share).
    input_wait_share: float | None
    source: str  # "measured" | "fallback"
    window_s: float
    # What `input_wait_share` covers: "last 30 s" (a live run's window) or "whole run" (an
    # ended run, judged on the figure its summary shows).
    window_label: str = ""
    steps_in_window: int
    evidence: list[Evidence]
    advice: list[str]
    # A GPU busy but under-used: launch-bound, Tensor Cores idle, out of memory
    # ahead, memory growth off; each with its evidence and what to try. GET /diagnosis only.
    gpu_findings: list[GpuFinding] = []


def _pipeline(environment: dict[str, Any]) -> dict[str, Any]:
    """What the agent reported about the input pipeline (wrap inspects the dataset)."""
    for key in ("input_pipeline", "pipeline", "dataset"):
        value = environment.get(key)
        if isinstance(value, dict):
            return value
    return {}


def _steps_per_execution(environment: dict[str, Any]) -> int:
    value = environment.get("steps_per_execution")
    return value if isinstance(value, int) and not isinstance(value, bool) else 1


@dataclass
class _Findings:
    """The window's figures a verdict reads, and the evidence and advice gathered so far."""

    window: RunWindow
    share: float | None
    util: float | None
    cpu: float | None
    mean_step: float | None
    pipeline: dict[str, Any]
    source: str  # "measured" | "fallback"
    evidence: list[Evidence] = field(default_factory=list)
    advice: list[str] = field(default_factory=list)

    @classmethod
    def of(cls, window: RunWindow) -> "_Findings":
        whole = window.whole_run
        measured = whole.waited_steps if whole is not None else window.waited_count
        return cls(
            window=window,
            share=whole.share if whole is not None else window.input_wait_share(),
            util=window.mean_util(),
            cpu=window.mean_sys_cpu(),
            mean_step=window.mean_step_s(),
            pipeline=_pipeline(window.environment),
            source="measured" if measured else "fallback",
        )

    @property
    def window_label(self) -> str:
        """What the input-wait figure covers."""
        if self.window.whole_run is not None and self.source == "measured":
            return WHOLE_RUN
        return f"last {self.window.window_s:g} s"

    @property
    def step(self) -> tuple[str, float, str] | None:
        """The step time shown beside the input-wait figure, over the same steps, and named:
        an ended run's median over the whole run (its summary's, the figure the run page and
        the list show), else the mean over the window (which keeps sums, not every step). As
        (evidence key, seconds, its words with "{}" for the figure)."""
        whole = self.window.whole_run
        if whole is not None and self.window_label == WHOLE_RUN and whole.median_step_s is not None:
            return "median_step_ms", whole.median_step_s, "median step time {} over the whole run"
        if self.mean_step is not None:
            over = f"over the {self.window_label}"
            return "mean_step_ms", self.mean_step, "mean step time {} " + over
        return None

    @property
    def step_s(self) -> float | None:
        return None if self.step is None else self.step[1]

    @property
    def steps(self) -> int:
        """The steps the input-wait figure covers: the whole run's (its summary's count), or
        the window's."""
        whole = self.window.whole_run
        if whole is not None and self.window_label == WHOLE_RUN:
            return whole.steps
        return self.window.step_count

    def add(self, key: str, value: Any, text: str) -> None:
        self.evidence.append(Evidence(key=key, value=value, text=text))

    def result(self, verdict: Verdict, wait_share: float | None = None) -> Diagnosis:
        return Diagnosis(
            run_id=self.window.run_id,
            verdict=verdict,
            verdict_label=VERDICT_WORDS[verdict],
            input_wait_share=None if wait_share is None else shown_share(wait_share),
            source=self.source,
            window_s=self.window.window_s,
            window_label=self.window_label,
            steps_in_window=self.steps,
            evidence=self.evidence,
            advice=once(self.advice),
        )

    def advise(self, verdict: Verdict) -> None:
        if verdict != Verdict.not_input_bound:
            self.advice.extend(
                input_advice(
                    cpu=self.cpu,
                    pipeline=self.pipeline,
                    step_s=self.step_s,
                    steps_per_execution=_steps_per_execution(self.window.environment),
                )
            )
        else:
            _device_advice(self.advice, util=self.util, step_s=self.step_s)


def diagnose(
    window: RunWindow,
    *,
    now: float,
    connected: bool,
    min_steps: int,
    stall_min_s: float,
    stall_step_factor: float,
    highly: float = HIGHLY_INPUT_BOUND,
    moderately: float = MODERATELY_INPUT_BOUND,
) -> Diagnosis:
    """The verdict for one run's window, with the numbers behind it and what to try: stalled,
    else measured (the input wait is measured), else inferred from device and host figures.

    `connected`: an agent of this run is connected (a stall needs a live process)."""
    found = _Findings.of(window)
    idle = window.seconds_without_steps(now)
    limit = window.stall_threshold_s(min_s=stall_min_s, factor=stall_step_factor)
    if window.running and idle is not None and idle >= limit and connected:
        return _stalled(
            found, idle=idle, limit=limit, min_s=stall_min_s, step_factor=stall_step_factor
        )
    _describe(found, min_steps=min_steps)
    if found.source == "measured":
        return _measured(found, min_steps=min_steps, highly=highly, moderately=moderately)
    return _inferred(found, min_steps=min_steps)


def _stalled(
    found: _Findings, *, idle: float, limit: float, min_s: float, step_factor: float
) -> Diagnosis:
    """Steps stopped while the agent is still connected."""
    window, add, advice = found.window, found.add, found.advice
    median = window.median_step_s()
    add("seconds_without_steps", round(idle, 1), f"no step for {idle:.0f} s")
    add(
        "stall_threshold_s",
        round(limit, 1),
        f"stall threshold {limit:.0f} s = max({min_s:g} s, "
        f"{step_factor:g} x median step time {ms_text(median or 0)} of the last "
        f"{len(window.recent_durations)} steps)",
    )
    add("agent_connected", True, "the training process is still connected")
    recent_util = [r.util for r in window.recent_device(10.0) if r.util is not None]
    if recent_util:
        u = sum(recent_util) / len(recent_util)
        add("gpu_util_pct", round(u, 1), f"GPU utilization {percent_text(u)} in the last samples")
        if u >= LOW_UTIL_PCT:
            advice.append(
                f"The GPU is busy ({percent_text(u)}) but no step completes: typical of a hung "
                "collective (all-reduce) in a distributed job. Check that every worker "
                "is alive and not out of memory; one stuck replica stalls them all."
            )
        else:
            advice.append(
                "The GPU is idle and no step completes: the input pipeline may be "
                "blocked (a reader waiting on storage or a queue), or the training loop "
                "is stuck in Python. A stack dump (py-spy dump --pid) shows where."
            )
    else:
        advice.append(
            "Steps stopped while the process is alive. A hung collective (all-reduce) "
            "shows high GPU utilization and no steps; an idle GPU points at a blocked "
            "input pipeline or Python code. A stack dump (py-spy dump --pid) shows where."
        )
    return found.result(Verdict.stalled, found.share)


def _step_time(found: _Findings) -> None:
    """The step time beside the input-wait figure (`_Findings.step`)."""
    if found.step is not None:
        key, seconds, words = found.step
        found.add(key, round(seconds * 1000, 2), words.format(ms_text(seconds)))


def _describe(found: _Findings, *, min_steps: int) -> None:
    """The evidence every verdict but a stall shows: step time, device and host load, the
    pipeline's shape, a straggling worker."""
    add, pipeline = found.add, found.pipeline
    util, cpu = found.util, found.cpu
    _step_time(found)
    if util is not None:
        add("gpu_util_pct", round(util, 1), f"GPU utilization averages {percent_text(util)}")
    if cpu is not None:
        add("host_cpu_pct", round(cpu, 1), f"host CPU busy {percent_text(cpu)}")
    if "prefetch" in pipeline:
        has = bool(pipeline["prefetch"])
        add("prefetch", has, "the pipeline prefetches" if has else "the pipeline does not prefetch")
    if pipeline.get("serial_map") and not pipeline.get("parallel_map"):
        add("parallel_map", False, "map runs serially (no num_parallel_calls)")
    elif pipeline.get("parallel_map"):
        add("parallel_map", True, "map runs in parallel (num_parallel_calls)")
    if pipeline.get("cache"):
        add("cache", True, "the pipeline caches")
    straggler = find_straggler(worker_timings(found.window, min_steps=min_steps))
    if straggler is not None:
        add("straggler", straggler.rank, straggler.text)
        found.advice.append(
            f"Worker {straggler.rank} holds every worker back: "
            + (
                "speed up its input pipeline (its data source, its host's CPU, its "
                "num_parallel_calls and prefetch) or give it a faster share of the data."
                if straggler.kind == "input"
                else "check its GPU's cooling and power limit (its clocks were slowed)."
                if straggler.kind == "throttled"
                else "check its device and host (a slower or throttled GPU, a busy host)."
            )
        )


def _measured(found: _Findings, *, min_steps: int, highly: float, moderately: float) -> Diagnosis:
    """The input wait is measured: its share of step time is the verdict, once the window
    holds `min_steps` measured steps."""
    window, share, whole = found.window, found.share, found.window.whole_run
    waited = whole.waited_steps if whole is not None else window.waited_count
    if waited < min_steps or share is None:
        # Wait is measured but the window does not hold enough steps yet: say only that.
        found.add(
            "measured_steps",
            waited,
            f"{waited} of the {min_steps} measured steps a verdict needs so far",
        )
        found.advice.append("Keep training: the verdict appears once enough steps are measured.")
        return found.result(Verdict.insufficient_data, share)
    timed = whole.timed_steps if whole is not None else window.step_count
    measured = "" if waited >= timed else f", input wait measured on {count_text(waited)}"
    found.add(
        "input_wait_share",
        shown_share(share),
        f"input wait is {share_text(share)} of step time over the {found.window_label} "
        f"({count_text(found.steps)} steps{measured})",
    )
    executed = _steps_per_execution(window.environment)
    if executed > 1:
        found.add(
            "input_wait_estimated",
            True,
            f"with steps_per_execution = {executed}, TensorFlow fetches the next batch "
            "while a step computes, so the wait is estimated: the time the steps sat "
            "idle for their batch, not the time each fetch was blocked",
        )
    verdict = input_bound_verdict(share, highly=highly, moderately=moderately)
    found.advise(verdict)
    return found.result(verdict, share)


def _inferred(found: _Findings, *, min_steps: int) -> Diagnosis:
    """Input wait not measured: inferred from device utilization, step-time variance and
    host CPU, and said so."""
    window, util, cpu = found.window, found.util, found.cpu
    found.add(
        "source",
        "fallback",
        "input wait is not measured (wrap the dataset: model.fit(cb.wrap(ds)), or iterate "
        "with mon.iterate(ds)); this verdict is inferred",
    )
    cv = window.step_cv()
    if cv is not None:
        found.add(
            "step_time_cv", round(cv, 3), f"step time varies by {percent_text(cv * 100)} (std/mean)"
        )
    n = window.step_count
    if n < min_steps or util is None:
        if n >= min_steps and util is None:
            found.add("gpu_util_pct", None, "no GPU utilization reported (no NVIDIA driver/NVML?)")
        found.advice.append(
            "Wrap the input pipeline so Stoker measures input wait directly: "
            "model.fit(cb.wrap(train_ds), callbacks=[cb])."
        )
        return found.result(Verdict.insufficient_data)
    erratic = cv is not None and cv >= HIGH_STEP_CV
    saturated = cpu is not None and cpu >= CPU_SATURATED_PCT
    if util < VERY_LOW_UTIL_PCT and (erratic or saturated):
        verdict = Verdict.highly_input_bound
    elif util < LOW_UTIL_PCT and (erratic or saturated or util < VERY_LOW_UTIL_PCT):
        verdict = Verdict.moderately_input_bound
    else:
        verdict = Verdict.not_input_bound
    found.advise(verdict)
    found.advice.append(
        "Wrap the dataset (model.fit(cb.wrap(train_ds), ...)) so input wait is measured "
        "instead of inferred."
    )
    return found.result(verdict)


@dataclass(frozen=True)
class _Has:
    """What the agent reported the user's pipeline does (`None`: not reported)."""

    prefetch: bool | None
    parallel_map: bool | None
    serial_map: bool
    cache: bool | None
    parallel_interleave: bool | None
    serial_interleave: bool

    @classmethod
    def of(cls, pipeline: dict[str, Any]) -> "_Has":
        def flag(key: str) -> bool | None:
            value = pipeline.get(key)
            return value if isinstance(value, bool) else None

        parallel_interleave = flag("parallel_interleave")
        return cls(
            prefetch=flag("prefetch"),
            parallel_map=flag("parallel_map"),
            serial_map=bool(pipeline.get("serial_map")) and not pipeline.get("parallel_map"),
            cache=flag("cache"),
            parallel_interleave=parallel_interleave,
            serial_interleave=bool(pipeline.get("interleave")) and not parallel_interleave,
        )

    @property
    def fed(self) -> bool:
        """The input side is already parallel and prefetched: what is left is elsewhere."""
        return self.prefetch is True and self.parallel_map is True and not self.serial_map

    def present(self) -> list[str]:
        return [
            text
            for has, text in (
                (self.parallel_map, "maps in parallel"),
                (self.parallel_interleave, "reads in parallel"),
                (self.cache, "caches"),
                (self.prefetch, "prefetches"),
            )
            if has
        ]


def input_advice(
    *,
    cpu: float | None,
    pipeline: dict[str, Any],
    step_s: float | None = None,
    steps_per_execution: int = 1,
) -> list[str]:
    """What to change when steps wait for input, from what the pipeline already does: never
    to add what it has, each remedy once; once it is parallel and prefetched, what is left
    (short steps, the host's cores, offline preprocessing, cache placement, augmentation on
    the device)."""
    has = _Has.of(pipeline)
    advice: list[str] = []
    if has.prefetch is False:
        advice.append(
            "The pipeline does not prefetch: end it with .prefetch(tf.data.AUTOTUNE) so the "
            "next batch is prepared while the device computes."
        )
    if has.serial_map:
        advice.append(
            "map runs one element at a time: pass num_parallel_calls=tf.data.AUTOTUNE "
            "(and deterministic=False if order does not matter)."
        )
    if has.serial_interleave:
        advice.append(
            "interleave reads one input at a time: pass num_parallel_calls=tf.data.AUTOTUNE "
            "to it, with a cycle_length of several files."
        )
    # Remedies the pipeline does not have yet, in the order they usually pay off.
    adds: list[str] = []
    if has.parallel_map is None and not has.serial_map:
        adds.append("map(..., num_parallel_calls=tf.data.AUTOTUNE)")
    idle = cpu is not None and cpu < CPU_IDLE_PCT
    reads = not has.parallel_interleave and not has.serial_interleave and not has.fed
    if reads and (has.parallel_interleave is None or idle):  # reading files is what waits
        adds.append("interleave(..., num_parallel_calls=tf.data.AUTOTUNE) to read many files")
    if not has.cache:
        adds.append(".cache() after expensive loading or decoding when the data fits")
    if has.prefetch is None:
        adds.append(".prefetch(tf.data.AUTOTUNE) at the end")
    short = step_s is not None and step_s < SHORT_STEP_S
    left = _what_is_left(has, steps_per_execution=steps_per_execution, short=short)
    if short:
        advice.append(left.pop(0))
    if cpu is not None and cpu >= CPU_SATURATED_PCT:
        advice.append(
            f"The host CPU is saturated ({percent_text(cpu)}): preprocessing is CPU-bound. Do "
            "less of it per step: preprocess offline what does not change between epochs (resize "
            "and normalize once), move augmentation onto the device (Keras preprocessing layers "
            "inside the model), or give the input more host cores or workers (tf.data service)."
            + (f" Also: {'; '.join(adds)}." if adds else "")
        )
        left = [item for item in left if item.startswith("Check where cache()")]
    elif idle and (adds or not has.fed):
        io_adds = [a for a in adds if not a.startswith(".cache()")] or adds
        advice.append(
            f"The host CPU is mostly idle ({percent_text(cpu or 0.0)}) while the step waits: the "
            "pipeline is I/O-bound or serial." + (f" Try: {'; '.join(io_adds)}." if io_adds else "")
        )
    elif adds:
        what = "; ".join(adds)
        known = "" if not has.present() else f" (it already {_and(has.present())})"
        advice.append(
            f"Feed the device faster{known}: {what}; preprocess offline what does not change "
            "between epochs."
        )
    if has.fed:
        advice.extend(left)
    return advice


def _what_is_left(has: _Has, *, steps_per_execution: int, short: bool) -> list[str]:
    """Advice once the pipeline maps in parallel and prefetches and steps still wait (the
    short-step item first when steps are short)."""
    present = has.present()
    left = []
    if short:
        more = (
            f"a larger steps_per_execution (now {steps_per_execution})"
            if steps_per_execution > 1
            else "steps_per_execution=N in compile() (several steps per call)"
        )
        left.append(
            "Steps are very short: handing each step its batch has a fixed cost that no "
            f"pipeline hides. Larger batches or {more} spread it over more work."
        )
    left.append(
        (f"The pipeline already {_and(present)}. " if present else "")
        + "What is left is on the host: more host cores or input workers (tf.data service), "
        "preprocessing offline what does not change between epochs, and moving augmentation "
        "onto the device (Keras preprocessing layers inside the model)."
    )
    if has.cache:
        left.append(
            "Check where cache() sits: it keeps what comes before it, so place it after the "
            "expensive loading and decoding and before random augmentation (which must run "
            "every epoch)."
        )
    return left


def _and(items: list[str]) -> str:
    return items[0] if len(items) == 1 else ", ".join(items[:-1]) + " and " + items[-1]


# A remedy named in an advice item: an item whose remedies were all named before says nothing new.
_REMEDIES = (
    "num_parallel_calls",
    ".prefetch(",
    ".cache()",
    "interleave(",
    "steps_per_execution",
    "preprocess offline",
    "onto the device",
)


def once(advice: list[str]) -> list[str]:
    """`advice` with each thing said once: a repeated item, or one whose remedies were all
    named by earlier items (a bottleneck's fix first, then the general advice), is left out."""
    kept: list[str] = []
    named: set[str] = set()
    for item in advice:
        remedies = {r for r in _REMEDIES if r in item}
        if item in kept or (remedies and remedies <= named):
            continue
        kept.append(item)
        named |= remedies
    return kept


def _device_advice(advice: list[str], *, util: float | None, step_s: float | None) -> None:
    if util is not None and util < LOW_UTIL_PCT:
        advice.append(
            f"GPU utilization is low ({percent_text(util)}) without input wait: steps are too "
            "small or host-side overhead dominates. Try a larger batch, "
            "model.compile(..., jit_compile=True), and steps_per_execution to run several "
            "steps per call."
        )
    elif util is None and step_s is not None and step_s < 0.005:
        advice.append(
            f"Steps are short ({ms_text(step_s)}): per-step host overhead may dominate. "
            "steps_per_execution in compile() and a larger batch help."
        )
    if not advice:
        advice.append("The input pipeline keeps up: nothing to change on the input side.")
