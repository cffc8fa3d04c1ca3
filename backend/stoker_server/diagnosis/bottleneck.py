"""Which stage of a tf.data pipeline starves the steps, and what to change there.

Each stage's capacity, in steps per second, is its parallelism over its own time per element,
divided by the elements it produces per step (a stage before `batch` produces a batch's worth
per step). The demand is the rate the steps would consume when fed: one step per step time
less its input wait. The bottleneck is the stage of lowest capacity, below the demand (with
some slack), with a mostly empty buffer after it (a stage that keeps every buffer after it
full starves no one); only when the run is input-bound.

The rate the run reached (the demand less the wait) checks the model's figures: every stage
fed that rate, so a capacity below it is wrong (tf.data's model reads one thread for a fused
MapAndBatch under AUTOTUNE that runs several) and is raised to it. The stage named is the
user's: never the prefetch Stoker or tf.data appends; for a stage made inside an interleave's
(flat_map's) function, the interleave. Its fix never asks for what the pipeline has.
"""

import math
from statistics import median
from typing import Any

from pydantic import BaseModel

from stoker_server.core.levels import MODERATELY_INPUT_BOUND
from stoker_server.diagnosis.advice import fix_for, singled_out, stage_label
from stoker_server.diagnosis.verdict import Diagnosis, Evidence
from trainer_agent.figures import percent_text, share_text

# A buffer after a starving stage is mostly empty: below this fill.
EMPTY_BUFFER_FILL = 0.5
# A stage whose capacity is this many times the demand keeps up, whatever its buffers say
# (the model's per-element times are averages, hence the slack above 1).
KEEPS_UP = 1.5
# A capacity below this share of the rate the run reached contradicts it: it is wrong.
CONSISTENT = 0.8
# A stage whose capacity is at most this over the rate reached is the one holding it there.
PINNED = 1.25


class Bottleneck(BaseModel):
    position: int
    kind: str
    name: str
    # The user's function(s) the stage runs ("a+b+c" when tf.data fused several), each with
    # its file and line; `focus`: the one to change when one of several can be singled out.
    function: str | None
    functions: list[dict[str, Any]] = []
    focus: str | None = None
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


_INTERLEAVES = ("interleave", "parallel_interleave", "flat_map")
# How the agent marks a stage in its `name` (trainer_agent/capture/pipeline_model.py): not the
# user's (the prefetch Stoker's wrap or tf.data appends), made inside an interleave's function
# ("<interleave>/<op>"), and a parallelism the autotuner sets.
NOT_USERS = ("stoker:", "tf.data:")
INNER_SEPARATOR = "/"
AUTOTUNE_MARK = " (autotune)"


def is_users(stage: dict[str, Any]) -> bool:
    return not str(stage.get("name") or "").startswith(NOT_USERS)


def is_inner(stage: dict[str, Any]) -> bool:
    return INNER_SEPARATOR in str(stage.get("name") or "")


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


def reached_steps_per_s(demand_steps_per_s: float, wait_share: float) -> float:
    """The rate the run reached: the rate its steps would take when fed, less the wait."""
    return demand_steps_per_s * (1.0 - min(wait_share, 1.0))


def capacities(
    stages: list[dict[str, Any]], reached_steps_per_s: float | None = None
) -> list[float]:
    """Steps per second each stage could feed (inf when it did no measured work).

    With `reached_steps_per_s`, the rate the run actually reached: a stage fed that many,
    so a capacity below it (by more than the model's noise) is wrong (a parallelism the
    autotuner changed since, or a fused node's time counted twice) and is raised to it.
    """
    result = []
    for stage, per_step in zip(stages, elements_per_step(stages), strict=True):
        ms = stage.get("ms_per_element")
        if not ms or not stage.get("elements") or not per_step > 0:
            result.append(math.inf)
            continue
        capacity = (stage.get("parallelism") or 1.0) * 1000.0 / ms / per_step
        if reached_steps_per_s and capacity < CONSISTENT * reached_steps_per_s:
            capacity = reached_steps_per_s
        result.append(capacity)
    return result


def _fill_after(stages: list[dict[str, Any]], position: int) -> float | None:
    """The emptiest buffer after the stage (a starved one drains at least one of them)."""
    fills = [
        min(1.0, (s.get("buffered") or 0) / s["buffer_size"])
        for s in stages[position + 1 :]
        if s.get("buffer_size")
    ]
    return min(fills) if fills else None


def _enclosing(stages: list[dict[str, Any]], position: int) -> dict[str, Any]:
    """The interleave (flat_map) the user wrote around a stage made inside its function, or
    the stage itself."""
    if not is_inner(stages[position]) or stages[position]["kind"] == "generator":
        return stages[position]  # from_generator is a flat_map of tf.data's own
    for stage in stages[position + 1 :]:
        if stage["kind"] in _INTERLEAVES and not is_inner(stage):
            return stage
    return stages[position]


def find_bottleneck(
    stages: list[dict[str, Any]],
    *,
    demand_steps_per_s: float | None,
    wait_share: float | None,
    input_bound: float = MODERATELY_INPUT_BOUND,
    cpus: int | None = None,
    pipeline: dict[str, Any] | None = None,
) -> Bottleneck | None:
    """The stage that starves the steps, or None (fed run, no figures, nothing confirmed).
    `pipeline`: what the agent described of the pipeline (where its elements come from).

    Stoker's and tf.data's own stages are never named; a stage made inside an interleave's
    (flat_map's) function is named by that interleave, which is where the user changes it.
    """
    if not stages or wait_share is None or wait_share < input_bound or not demand_steps_per_s:
        return None
    reached = reached_steps_per_s(demand_steps_per_s, wait_share)
    raw = capacities(stages)
    capacity = capacities(stages, reached)
    for position in sorted(range(len(stages)), key=capacity.__getitem__):
        if capacity[position] >= KEEPS_UP * demand_steps_per_s:
            break
        if not is_users(stages[position]):
            continue
        fill = _fill_after(stages, position)
        # A stage whose own figures put it at the rate the run reached works flat out: a
        # buffer after it read full at one instant does not clear it.
        pinned = CONSISTENT * reached <= raw[position] <= PINNED * reached
        if fill is not None and fill >= EMPTY_BUFFER_FILL and not pinned:
            continue  # the buffers after it stay full: it keeps up
        slow = stages[position]
        stage = _enclosing(stages, position)
        threads = (slow.get("parallelism") or 1.0) * capacity[position] / raw[position]
        fill_text = (
            "no buffer after it"
            if fill is None
            else f"the emptiest buffer after it {percent_text(fill * 100)} full"
        )
        where = "" if stage is slow else f"; the slow work is its function's {slow['kind']}"
        if raw[position] < capacity[position]:
            figure = (
                f"can feed the {capacity[position]:.3g} steps/s the run reached, no more "
                f"(tf.data's model reads {raw[position]:.3g}: its parallelism changed since)"
            )
        else:
            figure = f"can feed {capacity[position]:.3g} steps/s"
        reason = (
            f"{stage_label(stage)} {figure} ({slow.get('ms_per_element') or 0:.3g} ms an element "
            f"on {threads:.2g} thread(s)){where}, the lowest of the "
            f"pipeline; the steps would take {demand_steps_per_s:.3g}/s when fed, and waited for "
            f"input {share_text(wait_share)} of their time over the steps before this pipeline "
            f"read; {fill_text}."
        )
        focus = singled_out(stage) or (stage.get("functions") or [None])[0]
        return Bottleneck(
            position=stage["position"],
            kind=stage["kind"],
            name=stage.get("name") or stage["kind"],
            function=stage.get("function"),
            functions=list(stage.get("functions") or []),
            focus=None if focus is None else focus.get("name"),
            reason=reason,
            fix=fix_for(stage, stages, cpus, threads=threads, pipeline=pipeline),
            capacity_steps_per_s=capacity[position],
            demand_steps_per_s=demand_steps_per_s,
        )
    return None


def add_bottleneck(diagnosis: Diagnosis, bottleneck: Bottleneck | None) -> Diagnosis:
    """`diagnosis` (not modified) with the bottleneck as evidence `bottleneck_stage` and its
    fix as the first advice."""
    if bottleneck is None:
        return diagnosis
    label = stage_label(bottleneck.model_dump())
    evidence = Evidence(key="bottleneck_stage", value=label, text=bottleneck.reason)
    return diagnosis.model_copy(
        update={
            "evidence": [*diagnosis.evidence, evidence],
            "advice": [bottleneck.fix, *diagnosis.advice],
        }
    )
