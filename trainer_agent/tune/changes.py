"""The changes `stoker tune` tries: Stoker's advice, as rewrites that keep the data the same.

Each change keeps the elements the fit receives and their order:
- `parallel`: `num_parallel_calls=AUTOTUNE, deterministic=True` on a serial map or interleave
  (or AUTOTUNE on a fixed count): the same function on the same elements, handed over in
  the input's order (an interleave keeps its cycle and block length, so its order too);
- `prefetch`: a final `prefetch(AUTOTUNE)`: a buffer, nothing changes in the elements;
- `autotune`: tf.data's autotuning on, with its default CPU and RAM budgets: how many threads
  and buffers, not what they compute;
- `steps_per_execution`: several steps per call of the train function: the same batches in
  the same order;
- `cache`: `cache()` after a deterministic prefix (no shuffle, no random op, no Python whose
  randomness Stoker cannot see, no unordered parallel stage): every epoch reads the elements
  the first one computed, which are the ones it would compute again.
A change that cannot be applied this way is listed with the reason it was not tried.
"""

import math
from dataclasses import asdict, dataclass
from typing import Any

from trainer_agent.figures import percent_text, share_text
from trainer_agent.tune.chain import (
    AUTOTUNE,
    Link,
    calls_python,
    cardinality,
    element_bytes,
    ordered,
    schedulable_cpus,
    transparent,
)
from trainer_agent.tune.rebuild import rebuild_link, rebuilt_after, unrebuildable_after
from trainer_agent.tune.source import (
    CallSite,
    appended_edit,
    compile_edit,
    function_where,
    keyword_edit,
    option_edits,
)

# The advice a change follows (`stoker tune --only ADVICE`).
ADVICE = ("parallel", "prefetch", "autotune", "steps_per_execution", "cache")
ADVICE_ALIASES = {"spe": "steps_per_execution", "num_parallel_calls": "parallel"}
# At most this many maps or interleaves are parallelized, one trial each.
MAX_PARALLEL = 3
# A map whose function took less than this share of the pipeline's time is not worth a trial.
MIN_TIME_SHARE = 0.05
# Steps shorter than this (compute, net of input wait) pay the host's per-call overhead.
SHORT_STEP_S = 0.010
# Steps waiting for input this share of their time or more gain nothing from fewer calls.
INPUT_BOUND_SHARE = 0.2
# steps_per_execution aims at calls of about this long.
EXECUTION_TARGET_S = 0.05
MAX_STEPS_PER_EXECUTION = 32
# The kinds of work worth caching the output of.
_WORK = ("Map", "ParallelMap", "Interleave", "ParallelInterleave", "FlatMap", "Filter")
_PARALLELIZABLE = {"Map": "map", "ParallelMap": "map", "Interleave": "interleave",
                   "ParallelInterleave": "interleave"}  # fmt: skip


@dataclass
class Change:
    """One candidate change and, when it is not tried, why."""

    id: str  # "parallel:2", "prefetch", "autotune", "steps_per_execution", "cache:2"
    advice: str  # one of ADVICE
    title: str  # what is changed, in full
    label: str = ""  # the table's short name of it: "parallel map slow_decode"
    link: int | None = None  # the link it changes (or adds a stage after)
    function: str | None = None
    defined_at: str | None = None  # where the user's function is defined
    edit: dict[str, Any] | None = None  # CallSite.as_dict(): the line to edit
    not_tried: str | None = None
    # Why the change keeps the data the same (printed with `--explain`, stored with the row).
    keeps: str = ""
    # The function runs Python (numpy_function/py_function): parallel threads share the GIL.
    python: bool = False
    # steps_per_execution: to be decided from the unchanged run's step time.
    pending: bool = False

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass
class Context:
    """What the changes are judged on, besides the pipeline."""

    steps: int  # N, the steps each trial measures
    steps_per_epoch: int | None
    cache_budget_bytes: int
    model: Any = None


def _edit(site: CallSite | None) -> dict[str, Any] | None:
    return site.as_dict() if site is not None else None


def _last_stage(chain: list[Link]) -> Link | None:
    for link in reversed(chain):
        if not transparent(link) and link.kind != "AssertCardinality":
            return link
    return None


def _parallel_changes(chain: list[Link], files: list[str], options: Any) -> list[Change]:
    changes = []
    for link in chain:
        what = _PARALLELIZABLE.get(link.kind)
        if what is None or link.wrapper is None:
            continue
        serial = link.kind in ("Map", "Interleave")
        if not serial and (link.parallelism is None or link.parallelism == AUTOTUNE):
            continue  # parallel with AUTOTUNE already: nothing to change
        name = link.function_name
        title = (
            f"num_parallel_calls=AUTOTUNE, deterministic=True on {what} {name}"
            if serial
            else f"num_parallel_calls=AUTOTUNE on {what} {name} (was {link.parallelism})"
        )
        keywords = {"num_parallel_calls": "{TF}.data.AUTOTUNE"}
        if serial:
            keywords["deterministic"] = "True"
        if what == "interleave" and _cycle_length(link) != int(link.node._cycle_length):
            # AUTOTUNE: a serial interleave cycles through as many inputs as there are cores,
            # a parallel one through fewer; the order is kept only with the number written.
            keywords["cycle_length"] = str(_cycle_length(link))
        change = Change(
            id=f"parallel:{link.index}",
            advice="parallel",
            title=title,
            label=f"parallel {what} {name}",
            link=link.index,
            function=name or None,
            defined_at=function_where(link.function),
            edit=_edit(keyword_edit(link, files, keywords)),
            python=calls_python(link),
            keeps=_parallel_keeps(link, what, serial),
        )
        if serial and link.kind == "Map" and _parallelized_by_tf_data(link, options):
            change.not_tried = (
                f"already in effect: {name} is stateless, and tf.data runs stateless maps in "
                "parallel itself (its map_parallelization rewrite, in order)"
            )
        else:
            change.not_tried = unrebuildable_after(chain, link.index)
        changes.append(change)
    return changes


def _cycle_length(link: Link) -> int:
    """The interleave's cycle length as it runs: AUTOTUNE is the number of cores."""
    cycle = int(link.node._cycle_length)
    return schedulable_cpus() if cycle == AUTOTUNE else cycle


def _parallel_keeps(link: Link, what: str, serial: bool) -> str:
    name = link.function_name
    if serial:
        keeps = (
            f"the same {name} on the same elements; deterministic=True hands them over in the "
            "input's order"
        )
        if what == "interleave":
            keeps += (
                f", with the same cycle_length ({_cycle_length(link)}) and block_length "
                f"({int(link.node._block_length)})"
            )
    else:
        keeps = f"the same {name} on the same elements, in the order it already kept"
    if link.facts.random_ops:
        keeps += (
            f"; {name} draws random numbers, and threads draw them in another order than one "
            "thread: each element gets other random values, from the same distribution"
        )
    return keeps


def _parallelized_by_tf_data(link: Link, options: Any) -> bool:
    optimization = getattr(options, "experimental_optimization", None)
    enabled = getattr(optimization, "map_parallelization", None) is not False
    defaults = getattr(optimization, "apply_default_optimizations", None) is not False
    return enabled and defaults and not link.facts.stateful


# Dataset classes tf.data counts as asynchronous: it injects no prefetch after them.
_ASYNC_DATASETS = {
    "_PrefetchDataset",
    "_ParallelMapDataset",
    "ParallelInterleaveDataset",
    "_ParallelBatchDataset",
    "_MapAndBatchDataset",
}


def _would_inject_prefetch(dataset: Any) -> bool:
    """Whether tf.data would append its automatic prefetch to `dataset`. (It lived in
    capture/input_wait.py while the stamping stage moved that prefetch before itself.)"""
    try:
        options = dataset.options()
        if options.autotune.enabled is False:
            return False
        if options.experimental_optimization.inject_prefetch is False:
            return False
        node = dataset
        while type(node).__name__ == "_OptionsDataset":
            node = node._input_dataset
        return type(node).__name__ not in _ASYNC_DATASETS
    except Exception:
        return True


def _prefetch_change(chain: list[Link], files: list[str], dataset: Any) -> Change:
    last = _last_stage(chain)
    change = Change(
        id="prefetch",
        advice="prefetch",
        title="prefetch(AUTOTUNE) at the end",
        label="prefetch at the end",
        link=last.index if last is not None else None,
        keeps="a buffer of the elements the pipeline makes, in their order: none is changed",
    )
    if last is None:
        change.not_tried = "the pipeline has no stage to prefetch after"
        return change
    change.edit = _edit(appended_edit(last, files, ".prefetch({TF}.data.AUTOTUNE)"))
    if last.kind == "Prefetch":
        change.not_tried = "the pipeline ends with a prefetch already"
    elif _would_inject_prefetch(dataset):
        change.not_tried = (
            "already in effect: tf.data appends prefetch(AUTOTUNE) itself to a pipeline that "
            "ends in a synchronous stage (its inject_prefetch rewrite); writing it changes "
            "nothing"
        )
    return change


def _autotune_settings(options: Any) -> dict[str, Any]:
    """The options that keep tf.data's autotuning from its defaults, and what they become."""
    import psutil

    cpus = schedulable_cpus()
    half_ram = int(psutil.virtual_memory().total // 2)
    autotune = options.autotune
    settings: dict[str, Any] = {}
    if autotune.enabled is False:
        settings["autotune.enabled"] = True
    if autotune.cpu_budget is not None and 0 < autotune.cpu_budget < cpus:
        settings["autotune.cpu_budget"] = cpus
    if autotune.ram_budget is not None and 0 < autotune.ram_budget < half_ram:
        settings["autotune.ram_budget"] = half_ram
    threadpool = options.threading.private_threadpool_size
    if threadpool is not None and 0 < threadpool < cpus:
        settings["threading.private_threadpool_size"] = cpus
    return settings


def _autotune_change(files: list[str], options: Any) -> Change:
    settings = _autotune_settings(options)
    change = Change(
        id="autotune",
        advice="autotune",
        title="tf.data autotune on, default CPU and RAM budgets",
        label="autotune options",
        keeps="how many threads and buffers tf.data uses, not what they compute",
    )
    if not settings:
        change.not_tried = (
            "tf.data's autotuning is on already, with its default CPU budget (all cores) "
            "and RAM budget (half the memory)"
        )
        return change
    written = {option: repr(value) for option, value in settings.items()}
    sites = option_edits(files, written)
    if sites:
        change.edit = _edit(sites[0])
    change.title = "tf.data " + ", ".join(f"{o}={v}" for o, v in written.items())
    return change


def autotuned_options(options: Any) -> Any:
    """Options that put tf.data's autotuning back to its defaults (merged last, they win)."""
    import tensorflow as tf

    changed = tf.data.Options()
    for option, value in _autotune_settings(options).items():
        group, name = option.split(".")
        setattr(getattr(changed, group), name, value)
    return changed


def _steps_per_execution_change(files: list[str], model: Any) -> Change:
    change = Change(
        id="steps_per_execution",
        advice="steps_per_execution",
        title="steps_per_execution in compile",
        label="steps_per_execution",
        keeps="the same batches, in the same order: several steps run per call",
    )
    current = steps_per_execution(model)
    if current is None:
        change.not_tried = "Stoker cannot set steps_per_execution on this model's Keras"
    elif current > 1:
        change.not_tried = f"compile runs {current} steps per call already"
    else:
        change.pending = True  # decided on the unchanged run's step time (decide_steps_per...)
        change.edit = _edit(compile_edit(files, {"steps_per_execution": "{K}"}))
    return change


def steps_per_execution(model: Any) -> int | None:
    """The model's steps per call of its train function, or None when it cannot tell."""
    if model is None:
        return None
    value = getattr(model, "steps_per_execution", None)
    if value is None:
        value = getattr(model, "_steps_per_execution", None)
    if value is None:
        return None
    try:
        return int(value)
    except (TypeError, ValueError):
        try:
            return int(value.numpy())
        except Exception:
            return None


def decide_steps_per_execution(
    change: dict[str, Any], compute_s: float | None, wait_share: float | None, steps: int
) -> tuple[dict[str, Any], int | None]:
    """The pending steps_per_execution change decided on the unchanged run's median compute
    time per step and its input-wait share: (the change, the steps per call to try or None).
    The steps per call leave at least three calls to measure after the first (whose steps
    share the tracing) within the `steps` of a trial."""
    decided = {**change, "pending": False}
    if compute_s is None:
        decided["not_tried"] = "the unchanged run measured no step time"
        return decided, None
    if wait_share is not None and wait_share >= INPUT_BOUND_SHARE:
        decided["not_tried"] = (
            f"the steps wait for input {share_text(wait_share)} of the time: fewer calls per step "
            "cannot help before the input keeps up"
        )
        return decided, None
    if compute_s >= SHORT_STEP_S:
        decided["not_tried"] = (
            f"a step computes for {compute_s * 1000:.3g} ms: steps_per_execution saves the "
            f"host's per-call overhead, which matters for steps under "
            f"{SHORT_STEP_S * 1000:g} ms"
        )
        return decided, None
    per_call = 2 ** round(math.log2(max(2.0, EXECUTION_TARGET_S / max(compute_s, 1e-6))))
    measurable = 2 ** int(math.log2(max(2, steps // 4)))
    per_call = min(MAX_STEPS_PER_EXECUTION, measurable, max(2, per_call))
    decided["title"] = f"steps_per_execution={per_call} in compile"
    decided["label"] = f"steps_per_execution={per_call}"
    if decided.get("edit"):
        edit = dict(decided["edit"])
        edit["after"] = str(edit["after"]).replace("{K}", str(per_call))
        decided["edit"] = edit
    return decided, per_call


def _cache_change(chain: list[Link], files: list[str], options: Any, context: Context) -> Change:
    change = Change(
        id="cache",
        advice="cache",
        title="cache()",
        label="cache",
        keeps=(
            "every epoch reads the elements the first one computed; before the cache nothing "
            "is random or unordered, so they are the ones it would compute again"
        ),
    )
    cached = [link for link in chain if link.kind == "Cache"]
    if cached:
        first = cached[0]
        change.not_tried = f"the pipeline caches already ({first.label}, stage {first.index})"
        return change
    prefix, stop = _deterministic_prefix(chain, options)
    work = [link for link in prefix if link.kind in _WORK]
    if not work:
        change.not_tried = _nothing_to_cache(stop)
        return change
    link = work[-1]  # right after the last work the prefix does: "cache after decoding"
    change.id = f"cache:{link.index}"
    change.link = link.index
    change.title = f"cache() after {link.label}"
    change.label = f"cache after {link.label}"
    change.function = link.function_name or None
    change.edit = _edit(appended_edit(link, files, ".cache()"))
    reason = _cache_blocked(chain, link, context)
    if reason:
        change.not_tried = reason
    return change


def _cache_blocked(chain: list[Link], link: Link, context: Context) -> str:
    """Why a cache after `link` is not tried, or ""."""
    count = cardinality(link.node)
    if count < 0:
        return (
            f"the pipeline up to {link.label} has {'no end' if count == -1 else 'an unknown size'}"
            ": a cache must hold all of it"
        )
    size = element_bytes(link.node)
    if size is None:
        return f"the size of {link.label}'s elements varies: Stoker cannot tell that they fit"
    total = size * count
    if total > context.cache_budget_bytes:
        return (
            f"{link.label}'s {count:,} elements take {_bytes(total)}, more than the memory "
            f"allowed ({_bytes(context.cache_budget_bytes)}, --cache-memory)"
        )
    epoch = context.steps_per_epoch
    if epoch is not None and context.steps <= epoch:
        return (
            f"the {context.steps} steps measured end within the first epoch ({epoch} steps): "
            f"a cache only fills then (run with --steps {2 * epoch} or more)"
        )
    blocked = unrebuildable_after(chain, link.index)
    if blocked:
        return blocked
    return ""


def _bytes(count: int) -> str:
    for unit, size in (("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if count >= size:
            return f"{count / size:.3g} {unit}"
    return f"{count} bytes"


def _deterministic_prefix(
    chain: list[Link], options: Any
) -> tuple[list[Link], tuple[Link, str] | None]:
    """The links from the source up to the first one whose elements may differ from one pass
    to the next, and that one with how (None when Stoker can tell that every link is
    deterministic)."""
    prefix: list[Link] = []
    for link in chain:
        why = _varies(link, options)
        if why:
            return prefix, (link, why)
        prefix.append(link)
    return prefix, None


def _varies(link: Link, options: Any) -> str:
    """How the link may change its elements or their order from one pass to the next ("" when
    Stoker can tell it does not)."""
    if link.kind == "Shuffle":
        return "shuffles: a cache after it would repeat the first epoch's order"
    if link.kind in ("Random", "RandomDataset"):
        return "makes random elements"
    if link.facts.random_ops:
        ops = ", ".join(link.facts.random_ops[:3])
        return (
            f"draws random numbers ({ops}): a cache after it would repeat the first epoch's "
            "random values"
        )
    if link.facts.python_ops:
        return (
            "runs Python (numpy_function/py_function): Stoker cannot tell whether it draws "
            "random numbers, which a cache after it would repeat"
        )
    if not ordered(link, options):
        return "hands its elements over in any order (deterministic=False)"
    return ""


def _nothing_to_cache(stop: tuple[Link, str] | None) -> str:
    if stop is None:
        return "no stage of the pipeline does work worth caching"
    link, why = stop
    return f"{link.label} (stage {link.index}) {why}, and nothing before it does work worth caching"


def candidate_changes(
    dataset: Any, chain: list[Link], files: list[str], context: Context
) -> list[Change]:
    """Every change Stoker would advise for this fit, each with why it is not tried when it
    is not."""
    changes: list[Change] = []
    if dataset is not None and chain:
        options = dataset.options()
        changes += _parallel_changes(chain, files, options)
        changes.append(_prefetch_change(chain, files, dataset))
        changes.append(_autotune_change(files, options))
    changes.append(_steps_per_execution_change(files, context.model))
    if dataset is not None and chain:
        changes.append(_cache_change(chain, files, dataset.options(), context))
    return changes


def not_a_pipeline(kind: str) -> list[Change]:
    """The pipeline changes, not tried: the fit's data is not a tf.data pipeline."""
    reason = f"the fit's data is {kind}, not a tf.data pipeline"
    return [Change(id=advice, advice=advice, title=advice, label=advice, not_tried=reason)
            for advice in ("parallel", "prefetch", "autotune", "cache")]  # fmt: skip


def apply_to_dataset(
    change_id: str, chain: list[Link], dataset: Any, cache_file: Any = None
) -> Any:
    """The dataset with the change applied (rebuilt from the user's own links)."""
    import tensorflow as tf

    advice, _, index_text = change_id.partition(":")
    if advice == "prefetch":
        return dataset.prefetch(tf.data.AUTOTUNE)
    if advice == "autotune":
        return dataset.with_options(autotuned_options(dataset.options()))
    index = int(index_text)
    link = chain[index]
    upstream = chain[index - 1].node if index > 0 else None
    if advice == "parallel":
        if upstream is None:
            raise ValueError(f"{link.label} has no input")
        from trainer_agent.tune.rebuild import replayed

        keep_order = link.deterministic if link.kind.startswith("Parallel") else "true"
        deterministic = {"true": True, "false": False}.get(keep_order)
        if link.kind in ("Map", "ParallelMap"):
            changed = upstream.map(
                replayed(link.wrapper),
                num_parallel_calls=tf.data.AUTOTUNE,
                deterministic=deterministic,
            )
        else:
            changed = upstream.interleave(
                replayed(link.wrapper),
                cycle_length=_cycle_length(link),
                block_length=int(link.node._block_length),
                num_parallel_calls=tf.data.AUTOTUNE,
                deterministic=deterministic,
            )
        return rebuilt_after(chain, index, changed, cache_file)
    if advice == "cache":
        return rebuilt_after(chain, index, link.node.cache(), cache_file)
    raise ValueError(f"unknown change {change_id!r}")


def with_file_caches_redirected(chain: list[Link], cache_file: Any) -> Any | None:
    """The pipeline rebuilt from its first file cache on, every cache file the trial's own;
    None when it caches to no file."""
    from trainer_agent.tune.rebuild import file_caches

    found = file_caches(chain)
    if not found:
        return None
    first = found[0]
    upstream = chain[first.index - 1].node
    return rebuilt_after(chain, first.index, rebuild_link(first, upstream, cache_file), cache_file)


def set_steps_per_execution(model: Any, steps: int) -> None:
    """Make `model` run `steps` steps per call of its train function from its next fit."""
    configure = getattr(model, "_configure_steps_per_execution", None)
    if callable(configure):  # tf_keras
        configure(steps)
        model.train_function = None
        return
    model.steps_per_execution = steps  # Keras 3
    model.train_function = None


def time_shares(stages: list[dict[str, Any]]) -> dict[str, float]:
    """Each user function's share of the pipeline's measured processing time, from a read of
    tf.data's model (trainer_agent/capture/pipeline_model.py's stages)."""
    totals: dict[str, float] = {}
    for stage in stages:
        ms, elements = stage.get("ms_per_element"), stage.get("elements")
        if not ms or not elements:
            continue
        for name in str(stage.get("function") or "").split("+"):
            if name:
                totals[name] = totals.get(name, 0.0) + ms * elements
    whole = sum(
        (s.get("ms_per_element") or 0) * (s.get("elements") or 0)
        for s in stages
        if not str(s.get("name") or "").startswith(("stoker:", "tf.data:"))
    )
    return {name: total / whole for name, total in totals.items()} if whole > 0 else {}


def ranked_parallel(changes: list[dict[str, Any]], shares: dict[str, float]) -> None:
    """Keep the `MAX_PARALLEL` parallel changes whose functions took the most of the
    pipeline's time; the others, and those under `MIN_TIME_SHARE`, are marked not tried."""
    parallel = [c for c in changes if c["advice"] == "parallel" and not c.get("not_tried")]
    if shares:
        parallel.sort(key=lambda c: -shares.get(c.get("function") or "", 0.0))
    for rank, change in enumerate(parallel):
        share = shares.get(change.get("function") or "")
        if shares and share is not None and share < MIN_TIME_SHARE:
            change["not_tried"] = (
                f"{change['function']} took {percent_text(share * 100)} of the pipeline's time "
                "in the unchanged run: parallelizing it cannot gain much"
            )
        elif rank >= MAX_PARALLEL:
            change["not_tried"] = (
                f"Stoker tries the {MAX_PARALLEL} slowest maps and interleaves; run "
                "`--only parallel` after editing those"
            )
