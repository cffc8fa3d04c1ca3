"""What to try, as one table of rules (`RULES`), each reading the facts of a run and saying one
thing.

The facts: the shape of the user's pipeline as the agent described it
(trainer_agent/capture/pipeline.py: what it prefetches, maps, caches, interleaves, and where
its elements come from: files, memory, a generator), the host CPU, the step length, and, for a
bottleneck, the slow stage. Four kinds of rule:

- `fix`: the change for the stage that starves the steps (the first advice of a bottleneck):
  one applies to each stage, and a `fix` rule marked `note` adds to it;
- `remedy`: a thing the pipeline lacks, said inside a `pipeline` item ("Try: ...");
- `pipeline`: an item of the advice when steps wait for input; each that applies is said;
- `device`: an item of the advice when steps do not wait.

No rule tells the user to add what the pipeline has, and none speaks of files to a pipeline
that reads none. `once` keeps each remedy said once across items.
"""

import os
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Literal

from trainer_agent.figures import ms_text, percent_text

# Host CPU levels (percent) and a short step (s).
CPU_SATURATED_PCT = 85.0
CPU_IDLE_PCT = 50.0
LOW_UTIL_PCT = 70.0
# Steps this short pay a fixed cost per step (the fetch, the host's dispatch) that no pipeline
# hides: larger batches or steps_per_execution amortize it.
SHORT_STEP_S = 0.010
# A map whose work shows on fewer threads than this runs serially.
SERIAL_BELOW_THREADS = 1.5

AUTOTUNE_MARK = " (autotune)"
_MAPS = ("map", "parallel_map", "map_and_batch")


@dataclass(frozen=True)
class Shape:
    """What the agent reported the user's pipeline does (`None`: not reported)."""

    prefetch: bool | None = None
    parallel_map: bool | None = None
    serial_map: bool = False
    cache: bool | None = None
    parallel_interleave: bool | None = None
    serial_interleave: bool = False
    reads_files: bool | None = None
    source: str | None = None  # "files" | "memory" | "generator" | "unknown"

    @classmethod
    def of(cls, pipeline: dict[str, Any]) -> "Shape":
        def flag(key: str) -> bool | None:
            value = pipeline.get(key)
            return value if isinstance(value, bool) else None

        parallel_interleave = flag("parallel_interleave")
        source = pipeline.get("source")
        return cls(
            prefetch=flag("prefetch"),
            parallel_map=flag("parallel_map"),
            serial_map=bool(pipeline.get("serial_map")) and not pipeline.get("parallel_map"),
            cache=flag("cache"),
            parallel_interleave=parallel_interleave,
            serial_interleave=bool(pipeline.get("interleave")) and not parallel_interleave,
            reads_files=flag("reads_files"),
            source=source if isinstance(source, str) else None,
        )

    @property
    def fed(self) -> bool:
        """The input side is already parallel and prefetched: what is left is elsewhere."""
        return (
            self.prefetch is True
            and self.parallel_map is True
            and not self.serial_map
            and not self.serial_interleave
        )

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


@dataclass(frozen=True)
class SlowStage:
    """The stage that starves the steps, among the pipeline's stages."""

    stage: dict[str, Any]
    stages: list[dict[str, Any]]
    threads: float  # the threads its work shows on
    cpus: int | None = None

    @property
    def kind(self) -> str:
        return str(self.stage["kind"])

    @property
    def autotuned(self) -> bool:
        return AUTOTUNE_MARK in str(self.stage.get("name") or "")

    @property
    def later(self) -> list[dict[str, Any]]:
        return self.stages[self.stage["position"] + 1 :]

    @property
    def set_threads(self) -> int:
        """The threads its num_parallel_calls (or cycle) sets, as tf.data's model reads it and
        as a whole number; `threads` may read more where the run went faster than the model's
        figures."""
        return max(1, round(_threads(self.stage, self.stages)))

    @property
    def many(self) -> bool:
        """More threads would help: the host has more cores than the stage uses."""
        return self.cpus is None or self.threads < self.cpus

    @property
    def serial(self) -> bool:
        # A serial map is serial whatever its rate shows (threads read off the rate carry the
        # model's noise: 1.3 "threads" is one thread).
        return (
            self.kind == "map"
            or bool(self.stage.get("serial"))
            or self.threads < SERIAL_BELOW_THREADS
        )


@dataclass(frozen=True)
class Facts:
    """Everything the rules read."""

    shape: Shape = field(default_factory=Shape)
    cpu: float | None = None  # host CPU busy, percent
    util: float | None = None  # GPU utilization, percent
    step_s: float | None = None
    steps_per_execution: int = 1
    slow: SlowStage | None = None

    @property
    def saturated(self) -> bool:
        return self.cpu is not None and self.cpu >= CPU_SATURATED_PCT

    @property
    def idle(self) -> bool:
        return self.cpu is not None and self.cpu < CPU_IDLE_PCT

    @property
    def short_steps(self) -> bool:
        return self.step_s is not None and self.step_s < SHORT_STEP_S

    def remedies(self) -> list[str]:
        return [rule.says(self) for rule in RULES if rule.kind == "remedy" and rule.applies(self)]


Kind = Literal["fix", "remedy", "pipeline", "device"]


@dataclass(frozen=True)
class Rule:
    name: str
    kind: Kind
    applies: Callable[[Facts], bool]
    says: Callable[[Facts], str]
    note: bool = False  # a `fix` said after the fix that applies, not instead of it


# --- the slow stage ----------------------------------------------------------------------


def stage_label(stage: dict[str, Any]) -> str:
    """`stage 3 (map 'slow_decode' at train.py:42)`: its position, kind and the user's
    function(s), with the line of a single function."""
    function = stage.get("function")
    name = f"{stage['kind']} '{function}'" if function else stage["kind"]
    functions = stage.get("functions") or []
    where = _where(functions[0]) if len(functions) == 1 else None
    return f"stage {stage['position']} ({name}{f' at {where}' if where else ''})"


def _where(function: dict[str, Any]) -> str | None:
    """`train.py:42` for a function whose file and line the agent read."""
    file, line = function.get("file"), function.get("line")
    if not file or not line:
        return None
    return f"{os.path.basename(str(file))}:{line}"


def singled_out(stage: dict[str, Any]) -> dict[str, Any] | None:
    """The function to change in a stage running several (tf.data fused them): the only one
    that calls Python (tf.numpy_function, tf.py_function); None when none or several do."""
    functions = stage.get("functions") or []
    if len(functions) < 2:
        return None
    calling = [f for f in functions if f.get("calls_python")]
    return calling[0] if len(calling) == 1 else None


def _label(facts: Facts) -> str:
    assert facts.slow is not None
    return stage_label(facts.slow.stage)


def _slow(kinds: tuple[str, ...]) -> Callable[[Facts], bool]:
    return lambda facts: facts.slow is not None and facts.slow.kind in kinds


def _whats_left(facts: Facts) -> str:
    """What is left to try on a stage that already runs in parallel (said once each)."""
    assert facts.slow is not None
    later = facts.slow.later
    tips = []
    if any(s["kind"] == "cache" for s in later):
        tips.append(
            "the .cache() after it fills during the first epoch, and later epochs skip this "
            "stage; if every epoch waits, the cache is not reached (an infinite repeat "
            "before it, or a cache to a file that is rewritten)"
        )
    else:
        tips.append(
            "if its work is the same every epoch (decoding, resizing), put .cache() right "
            "after it (before random augmentation) so it runs once"
        )
    if facts.slow.kind in ("map", "parallel_map") and any(
        s["kind"] in ("batch", "map_and_batch") for s in later
    ):
        tips.append("if its ops work on whole batches, batch before it (vectorized)")
    tips.append("preprocess offline (resize and encode once)")
    tips.append("run random augmentation on the device (Keras preprocessing layers)")
    tips.append("give the input more host cores, or more input workers (tf.data service)")
    return "; ".join(tips) + "."


def _reads_files_or_unknown(facts: Facts) -> bool:
    return facts.shape.reads_files is not False


def _map_threads(facts: Facts) -> bool:
    slow = facts.slow
    return (
        slow is not None
        and slow.kind in _MAPS
        and not slow.autotuned
        and not slow.serial
        and slow.many
    )


def _serial_map(facts: Facts) -> bool:
    slow = facts.slow
    return slow is not None and slow.kind in _MAPS and slow.serial and not slow.autotuned


def _interleave_threads(facts: Facts) -> bool:
    slow = facts.slow
    return (
        slow is not None and slow.kind == "parallel_interleave" and not slow.autotuned and slow.many
    )


# Stage kinds a rule of their own speaks to; any other gets the general fix.
_FIXED_KINDS = (
    "generator", "file_reader", "flat_map", "interleave", "parallel_interleave", "filter", *_MAPS
)  # fmt: skip


def _focus(facts: Facts) -> str:
    assert facts.slow is not None
    function = singled_out(facts.slow.stage) or {}
    where = _where(function)
    return (
        f"Of its functions, {function.get('name')}{f' ({where})' if where else ''} calls "
        "Python (tf.numpy_function or tf.py_function): start there, with its work in TF ops or "
        "its own map with num_parallel_calls."
    )


# --- the pipeline ------------------------------------------------------------------------


def _and(items: list[str]) -> str:
    return items[0] if len(items) == 1 else ", ".join(items[:-1]) + " and " + items[-1]


def _idle_applies(facts: Facts) -> bool:
    return not facts.saturated and facts.idle and bool(facts.remedies() or not facts.shape.fed)


def _idle_says(facts: Facts) -> str:
    adds = facts.remedies()
    io_adds = [a for a in adds if not a.startswith(".cache()")] or adds
    what = (
        "the pipeline runs serially (its elements are already in memory: no reads to wait on)"
        if facts.shape.reads_files is False
        else "the pipeline is I/O-bound or serial"
    )
    cpu = percent_text(facts.cpu or 0.0)
    tries = f" Try: {'; '.join(io_adds)}." if io_adds else ""
    return f"The host CPU is mostly idle ({cpu}) while the step waits: {what}.{tries}"


def _feed_faster_applies(facts: Facts) -> bool:
    return not facts.saturated and not _idle_applies(facts) and bool(facts.remedies())


def _feed_faster_says(facts: Facts) -> str:
    present = facts.shape.present()
    known = "" if not present else f" (it already {_and(present)})"
    return (
        f"Feed the device faster{known}: {'; '.join(facts.remedies())}; preprocess offline "
        "what does not change between epochs."
    )


def _short_steps_says(facts: Facts) -> str:
    more = (
        f"a larger steps_per_execution (now {facts.steps_per_execution})"
        if facts.steps_per_execution > 1
        else "steps_per_execution=N in compile() (several steps per call)"
    )
    return (
        "Steps are very short: handing each step its batch has a fixed cost that no "
        f"pipeline hides. Larger batches or {more} spread it over more work."
    )


def _host_left_says(facts: Facts) -> str:
    present = facts.shape.present()
    return (f"The pipeline already {_and(present)}. " if present else "") + (
        "What is left is on the host: more host cores or input workers (tf.data service), "
        "preprocessing offline what does not change between epochs, and moving augmentation "
        "onto the device (Keras preprocessing layers inside the model)."
    )


RULES: tuple[Rule, ...] = (
    # The slow stage: the first fix that applies.
    Rule(
        "generator",
        "fix",
        _slow(("generator",)),
        lambda f: (
            f"{_label(f)} is a Python generator: from_generator runs it one element at a time "
            "under the GIL, so no parallelism helps. Move the per-element work into TF ops (a "
            "map with num_parallel_calls=tf.data.AUTOTUNE)"
            + (
                ", or read the files with tf.data readers (TFRecordDataset, list_files + "
                "interleave)."
                if f.shape.reads_files is not False
                else "."
            )
        ),
    ),
    Rule(
        "file_reader",
        "fix",
        _slow(("file_reader",)),
        lambda f: (
            f"{_label(f)} reads one file at a time: read several at once with "
            "files.interleave(tf.data.TFRecordDataset, cycle_length=8, "
            "num_parallel_calls=tf.data.AUTOTUNE, deterministic=False)."
        ),
    ),
    Rule(
        "flat_map",
        "fix",
        _slow(("flat_map",)),
        lambda f: (
            f"{_label(f)} reads one of its elements at a time: replace flat_map with "
            "interleave(..., cycle_length=8, num_parallel_calls=tf.data.AUTOTUNE, "
            "deterministic=False) to read several at once."
        ),
    ),
    Rule(
        "serial_interleave",
        "fix",
        _slow(("interleave",)),
        lambda f: (
            f"{_label(f)} runs its function's datasets on one thread: pass "
            "num_parallel_calls=tf.data.AUTOTUNE (and cycle_length=8 if it is lower), "
            "deterministic=False if the order does not matter."
        ),
    ),
    Rule(
        "interleave_threads",
        "fix",
        _interleave_threads,
        lambda f: (
            f"{_label(f)} reads on {f.slow.set_threads if f.slow else 0} threads: raise "
            "cycle_length and pass num_parallel_calls=tf.data.AUTOTUNE."
        ),
    ),
    Rule(
        "interleave_left",
        "fix",
        lambda f: _slow(("parallel_interleave",))(f) and not _interleave_threads(f),
        lambda f: (
            f"{_label(f)} already reads on about {f.slow.threads if f.slow else 0:.2g} parallel "
            "threads and is still the slowest stage: raise cycle_length if the reads wait on "
            "storage (more files open at once); " + _whats_left(f)
        ),
    ),
    Rule(
        "filter",
        "fix",
        _slow(("filter",)),
        lambda f: (
            f"{_label(f)} runs its predicate serially (filter has no num_parallel_calls): "
            "compute the expensive part in a map with num_parallel_calls=tf.data.AUTOTUNE "
            "before it and filter on its result, or drop the rejected elements offline."
        ),
    ),
    Rule(
        "serial_map",
        "fix",
        _serial_map,
        lambda f: f"{_label(f)} runs serially: pass num_parallel_calls=tf.data.AUTOTUNE to it.",
    ),
    Rule(
        "map_threads",
        "fix",
        _map_threads,
        lambda f: (
            f"{_label(f)} runs on {f.slow.set_threads if f.slow else 0} threads "
            f"(num_parallel_calls={f.slow.set_threads if f.slow else 0}): pass "
            "num_parallel_calls=tf.data.AUTOTUNE to use the host's cores."
        ),
    ),
    Rule(
        "map_left",
        "fix",
        lambda f: _slow(_MAPS)(f) and not _serial_map(f) and not _map_threads(f),
        lambda f: (
            f"{_label(f)} already runs in parallel ("
            + ("with num_parallel_calls=AUTOTUNE, " if f.slow and f.slow.autotuned else "")
            + f"about {f.slow.threads if f.slow else 0:.2g} threads at work) and is still the "
            "slowest stage: " + _whats_left(f)
        ),
    ),
    Rule(
        "other_stage",
        "fix",
        lambda f: f.slow is not None and f.slow.kind not in _FIXED_KINDS,
        lambda f: (
            f"{_label(f)} is the slowest stage: give it more parallelism or less work per element."
        ),
    ),
    Rule(
        "fused_calls_python",
        "fix",
        lambda f: f.slow is not None and singled_out(f.slow.stage) is not None,
        _focus,
        note=True,
    ),
    # What the pipeline lacks, said inside the items below.
    Rule(
        "add_parallel_map",
        "remedy",
        lambda f: f.shape.parallel_map is None and not f.shape.serial_map,
        lambda f: "map(..., num_parallel_calls=tf.data.AUTOTUNE)",
    ),
    Rule(
        "add_interleave",
        "remedy",
        lambda f: (
            f.shape.reads_files is True
            and not f.shape.parallel_interleave
            and not f.shape.serial_interleave
            and not f.shape.fed
        ),
        lambda f: (
            "interleave(..., num_parallel_calls=tf.data.AUTOTUNE) to read several files at once"
        ),
    ),
    Rule(
        "add_interleave_if_files",
        "remedy",
        lambda f: (
            f.shape.reads_files is None
            and not f.shape.parallel_interleave
            and not f.shape.serial_interleave
            and not f.shape.fed
            and (f.shape.parallel_interleave is None or f.idle)
        ),
        lambda f: (
            "if it reads files, interleave(..., num_parallel_calls=tf.data.AUTOTUNE) to read "
            "several at once"
        ),
    ),
    Rule(
        "add_cache",
        "remedy",
        lambda f: not f.shape.cache,
        lambda f: ".cache() after expensive loading or decoding when the data fits",
    ),
    Rule(
        "add_prefetch",
        "remedy",
        lambda f: f.shape.prefetch is None,
        lambda f: ".prefetch(tf.data.AUTOTUNE) at the end",
    ),
    # Steps wait for input: each item that applies, in this order.
    Rule(
        "no_prefetch",
        "pipeline",
        lambda f: f.shape.prefetch is False,
        lambda f: (
            "The pipeline does not prefetch: end it with .prefetch(tf.data.AUTOTUNE) so the "
            "next batch is prepared while the device computes."
        ),
    ),
    Rule(
        "serial_maps",
        "pipeline",
        lambda f: f.shape.serial_map,
        lambda f: (
            "map runs one element at a time: pass num_parallel_calls=tf.data.AUTOTUNE "
            "(and deterministic=False if order does not matter)."
        ),
    ),
    Rule(
        "serial_interleaves",
        "pipeline",
        lambda f: f.shape.serial_interleave,
        lambda f: (
            "interleave reads one input at a time: pass num_parallel_calls=tf.data.AUTOTUNE "
            "to it, with a cycle_length of several files."
        ),
    ),
    Rule("short_steps", "pipeline", lambda f: f.short_steps, _short_steps_says),
    Rule(
        "cpu_saturated",
        "pipeline",
        lambda f: f.saturated,
        lambda f: (
            f"The host CPU is saturated ({percent_text(f.cpu or 0.0)}): preprocessing is "
            "CPU-bound. Do "
            "less of it per step: preprocess offline what does not change between epochs "
            "(resize and normalize once), move augmentation onto the device (Keras "
            "preprocessing layers inside the model), or give the input more host cores or "
            "workers (tf.data service)."
            + (f" Also: {'; '.join(f.remedies())}." if f.remedies() else "")
        ),
    ),
    Rule("cpu_idle", "pipeline", _idle_applies, _idle_says),
    Rule("feed_faster", "pipeline", _feed_faster_applies, _feed_faster_says),
    Rule(
        "host_left",
        "pipeline",
        lambda f: f.shape.fed and not f.saturated,
        _host_left_says,
    ),
    Rule(
        "cache_placement",
        "pipeline",
        lambda f: f.shape.fed and bool(f.shape.cache),
        lambda f: (
            "Check where cache() sits: it keeps what comes before it, so place it after the "
            "expensive loading and decoding and before random augmentation (which must run "
            "every epoch)."
        ),
    ),
    # Steps do not wait.
    Rule(
        "low_util",
        "device",
        lambda f: f.util is not None and f.util < LOW_UTIL_PCT,
        lambda f: (
            f"GPU utilization is low ({percent_text(f.util or 0.0)}) without input wait: steps "
            "are too "
            "small or host-side overhead dominates. Try a larger batch, "
            "model.compile(..., jit_compile=True), and steps_per_execution to run several "
            "steps per call."
        ),
    ),
    Rule(
        "short_steps_no_gpu",
        "device",
        lambda f: f.util is None and f.step_s is not None and f.step_s < 0.005,
        lambda f: (
            f"Steps are short ({ms_text(f.step_s or 0.0)}): per-step host overhead "
            "may dominate. steps_per_execution in compile() and a larger batch help."
        ),
    ),
    Rule(
        "keeps_up",
        "device",
        lambda f: (
            not (f.util is not None and f.util < LOW_UTIL_PCT)
            and not (f.util is None and f.step_s is not None and f.step_s < 0.005)
        ),
        lambda f: "The input pipeline keeps up: nothing to change on the input side.",
    ),
)


def said(facts: Facts, kind: Kind) -> list[str]:
    """What the rules of `kind` say about `facts`, in the table's order (of the `fix` rules
    one applies to a stage, then its notes)."""
    return [rule.says(facts) for rule in RULES if rule.kind == kind and rule.applies(facts)]


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
    facts = Facts(
        shape=Shape.of(pipeline),
        cpu=cpu,
        step_s=step_s,
        steps_per_execution=steps_per_execution,
    )
    return said(facts, "pipeline")


def device_advice(*, util: float | None, step_s: float | None) -> list[str]:
    """What to try when steps do not wait for input."""
    return said(Facts(util=util, step_s=step_s), "device")


def fix_for(
    stage: dict[str, Any],
    stages: list[dict[str, Any]],
    cpus: int | None = None,
    *,
    threads: float | None = None,
    pipeline: dict[str, Any] | None = None,
) -> str:
    """The change that fits the stage's kind and what the pipeline already does: never one
    it has (parallelism already set, a cache already after it). `threads`: the threads the
    run shows the stage's work on, when the model's parallelism reads fewer."""
    shown = _threads(stage, stages)
    slow = SlowStage(stage=stage, stages=stages, threads=max(shown, threads or 0.0), cpus=cpus)
    return " ".join(said(Facts(shape=Shape.of(pipeline or {}), slow=slow), "fix"))


_INTERLEAVES = ("interleave", "parallel_interleave", "flat_map")
INNER_SEPARATOR = "/"


def _threads(stage: dict[str, Any], stages: list[dict[str, Any]]) -> float:
    """The threads that run the stage's work: an interleave's are its inner stages'."""
    if stage["kind"] in _INTERLEAVES:
        inner = [
            s for s in stages[: stage["position"]] if INNER_SEPARATOR in str(s.get("name") or "")
        ]
        if inner:
            return max(s.get("parallelism") or 1.0 for s in inner)
    return stage.get("parallelism") or 1.0


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
