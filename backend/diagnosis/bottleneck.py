"""Which stage of a tf.data pipeline starves the steps, and what to change there (issue 15).

Each stage's capacity, in steps per second, is its parallelism over its own time per element,
divided by the elements it produces per step (a stage before `batch` produces a batch's worth
per step). The demand is the rate the steps would consume when fed: one step per step time
less its input wait. The bottleneck is the stage of lowest capacity, below the demand (with
some slack), with a mostly empty buffer after it (a stage that keeps every buffer after it
full starves no one); only when the run is input-bound.
"""

import math
from statistics import median
from typing import Any

from pydantic import BaseModel

from backend.diagnosis.levels import MODERATELY_INPUT_BOUND
from backend.diagnosis.verdict import Diagnosis, Evidence

# A buffer after a starving stage is mostly empty: below this fill.
EMPTY_BUFFER_FILL = 0.5
# A stage whose capacity is this many times the demand keeps up, whatever its buffers say
# (the model's per-element times are averages, hence the slack above 1).
KEEPS_UP = 1.5


class Bottleneck(BaseModel):
    position: int
    kind: str
    name: str
    function: str | None
    reason: str
    fix: str
    capacity_steps_per_s: float
    demand_steps_per_s: float


def step_demand(durations: list[float], waits: list[float | None]) -> tuple[float, float] | None:
    """(steps per second when fed, input wait share) from recent steps, or None."""
    pairs = [(d, w) for d, w in zip(durations, waits, strict=True) if w is not None and d > 0]
    if not pairs:
        return None
    compute = median(max(d - w, 0.0) for d, w in pairs)
    share = sum(w for _, w in pairs) / sum(d for d, _ in pairs)
    return (1.0 / compute if compute > 0 else math.inf), share


# Stages whose input elements are many per output element: the count before them is theirs.
_GROUPING = ("batch", "map_and_batch", "unbatch", "window", "rebatch")


def elements_per_step(stages: list[dict[str, Any]]) -> list[float]:
    """How many elements each stage produces per step (per element of the last stage).

    An interleave's inner stages count only the files open when the model was read, so a
    stage produces at least what the next one consumes unless the next one groups elements.
    """
    consumed = (stages[-1].get("elements") or 0) if stages else 0
    if not consumed:
        return [math.nan] * len(stages)
    result = [1.0] * len(stages)
    for i in range(len(stages) - 2, -1, -1):
        own = (stages[i].get("elements") or 0) / consumed
        result[i] = own if stages[i + 1]["kind"] in _GROUPING else max(own, result[i + 1])
    return result


def capacities(stages: list[dict[str, Any]]) -> list[float]:
    """Steps per second each stage could feed (inf when it did no measured work)."""
    result = []
    for stage, per_step in zip(stages, elements_per_step(stages), strict=True):
        ms = stage.get("ms_per_element")
        if not ms or not stage.get("elements") or not per_step > 0:
            result.append(math.inf)
            continue
        result.append((stage.get("parallelism") or 1.0) * 1000.0 / ms / per_step)
    return result


def _fill_after(stages: list[dict[str, Any]], position: int) -> float | None:
    """The emptiest buffer after the stage (a starved one drains at least one of them)."""
    fills = [
        min(1.0, (s.get("buffered") or 0) / s["buffer_size"])
        for s in stages[position + 1 :]
        if s.get("buffer_size")
    ]
    return min(fills) if fills else None


def fix_for(stage: dict[str, Any], stages: list[dict[str, Any]], cpus: int | None = None) -> str:
    """The change that fits the stage's kind."""
    kind, parallelism = stage["kind"], stage.get("parallelism") or 1.0
    label = _label(stage)
    batch_after = any(
        s["kind"] in ("batch", "map_and_batch") for s in stages[stage["position"] + 1 :]
    )
    if kind == "generator":
        return (
            f"{label} is a Python generator: from_generator runs it one element at a time "
            "under the GIL, so no parallelism helps. Move the per-element work into TF ops "
            "(a map with num_parallel_calls=tf.data.AUTOTUNE), or read the files with tf.data "
            "readers (TFRecordDataset, list_files + interleave)."
        )
    after = stages[stage["position"] + 1] if stage["position"] + 1 < len(stages) else None
    feeds_interleave = after is not None and after["kind"] in ("interleave", "flat_map")
    if kind == "file_reader" or (feeds_interleave and parallelism <= 1):
        return (
            f"{label} reads one file at a time: read several at once with "
            "files.interleave(read_fn, cycle_length=8, num_parallel_calls=tf.data.AUTOTUNE, "
            "deterministic=False)."
        )
    if kind in ("interleave", "flat_map") and parallelism <= 1:
        return (
            f"{label} reads one file at a time: read several at once with "
            "files.interleave(tf.data.TFRecordDataset, cycle_length=8, "
            "num_parallel_calls=tf.data.AUTOTUNE, deterministic=False)."
        )
    if kind in ("map", "parallel_map", "map_and_batch", "filter"):
        if parallelism <= 1 or (cpus is not None and parallelism < cpus):
            how = "serially" if parallelism <= 1 else f"on {parallelism:g} threads"
            return f"{label} runs {how}: pass num_parallel_calls=tf.data.AUTOTUNE to it."
        advice = (
            f"{label} already runs on {parallelism:g} threads and is still the slowest stage. "
            "If its work is the same every epoch (decoding, resizing), put .cache() right after "
            "it (before random augmentation) so it runs once."
        )
        if batch_after:
            advice += (
                " If its ops work on whole batches, batch before the map so each call does a "
                "batch's work at once (vectorized)."
            )
        return advice + (
            " Random augmentation can run on the device instead: Keras preprocessing layers "
            "inside the model."
        )
    return f"{label} is the slowest stage: give it more parallelism or less work per element."


def _label(stage: dict[str, Any]) -> str:
    function = stage.get("function")
    name = f"{stage['kind']} '{function}'" if function else stage["kind"]
    return f"stage {stage['position']} ({name})"


def find_bottleneck(
    stages: list[dict[str, Any]],
    *,
    demand_steps_per_s: float | None,
    wait_share: float | None,
    input_bound: float = MODERATELY_INPUT_BOUND,
    cpus: int | None = None,
) -> Bottleneck | None:
    """The stage that starves the steps, or None (fed run, no figures, nothing confirmed)."""
    if not stages or wait_share is None or wait_share < input_bound or not demand_steps_per_s:
        return None
    capacity = capacities(stages)
    for position in sorted(range(len(stages)), key=capacity.__getitem__):
        if capacity[position] >= KEEPS_UP * demand_steps_per_s:
            break
        fill = _fill_after(stages, position)
        if fill is not None and fill >= EMPTY_BUFFER_FILL:
            continue  # the buffers after it stay full: it keeps up
        stage = stages[position]
        fill_text = (
            "no buffer after it"
            if fill is None
            else f"the emptiest buffer after it {fill:.0%} full"
        )
        reason = (
            f"{_label(stage)} can feed {capacity[position]:.3g} steps/s "
            f"({stage.get('ms_per_element') or 0:.3g} ms an element on "
            f"{stage.get('parallelism') or 1:g} thread(s)), the lowest of the pipeline; "
            f"the steps would take {demand_steps_per_s:.3g}/s when fed and wait for input "
            f"{wait_share:.0%} of the time; {fill_text}."
        )
        return Bottleneck(
            position=stage["position"],
            kind=stage["kind"],
            name=stage.get("name") or stage["kind"],
            function=stage.get("function"),
            reason=reason,
            fix=fix_for(stage, stages, cpus),
            capacity_steps_per_s=capacity[position],
            demand_steps_per_s=demand_steps_per_s,
        )
    return None


def add_bottleneck(diagnosis: Diagnosis, bottleneck: Bottleneck | None) -> Diagnosis:
    """`diagnosis` (not modified) with the bottleneck as evidence `bottleneck_stage` and its
    fix as the first advice."""
    if bottleneck is None:
        return diagnosis
    label = _label(bottleneck.model_dump())
    evidence = Evidence(key="bottleneck_stage", value=label, text=bottleneck.reason)
    return diagnosis.model_copy(
        update={
            "evidence": [*diagnosis.evidence, evidence],
            "advice": [bottleneck.fix, *diagnosis.advice],
        }
    )
