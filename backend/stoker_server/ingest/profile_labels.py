"""A profile's tables in the words of the user's pipeline.

xprof names each tf.data iterator by its path ("Iterator::Root::Map::Zip[1]::Prefetch::
MapAndBatch") and each op by its graph name ("PyFunc"). The agent reads the same iterator tree
for the pipeline view and sends each stage's path (trainer_agent/capture/pipeline_model.py),
so an iterator row is tied to the stage the pipeline view shows (its position, kind and the
user's function); the iterators around the user's pipeline (a map over a zip with a request
counter: what `wrap` appends) are Stoker's input-wait stamp; a Python call (PyFunc) made inside
the input pipeline is tied to the user's function that makes it, when one function of the
pipeline calls Python. Pure: the analysis and the stages in, the labelled analysis out.
"""

import re
from typing import Any

# Ops through which a tf.data function calls back into Python.
PYTHON_OPS = frozenset({"PyFunc", "EagerPyFunc", "PyFuncStateless"})
# The train step's own ops run inside Keras's train function.
_MODEL_PREFIX = "StatefulPartitionedCall"
NOT_USERS = {"stoker:": "stoker", "tf.data:": "tf.data"}
_COMPONENT = re.compile(r"^(?P<name>[^\[]*)(?:\[(?P<index>[^\]]*)\])?$")


def _parts(path: str) -> list[tuple[str, str | None]]:
    """`"Iterator::Root::Zip[1]::Map"` -> [("Iterator", None), ("Root", None), ("Zip", "1"),
    ("Map", None)]."""
    parts = []
    for component in path.split("::"):
        match = _COMPONENT.match(component)
        parts.append((component, None) if match is None else
                     (match["name"], match["index"]))  # fmt: skip
    return parts


def _matches(stage: list[tuple[str, str | None]], row: list[tuple[str, str | None]]) -> bool:
    """Whether a stage's path names the profiler's iterator: the same names; an index the
    agent wrote (a zip's input) the same, one it wrote as "*" (an interleave's element) or
    did not write (a repeat's repetition) any."""
    if len(stage) != len(row):
        return False
    for (name, index), (row_name, row_index) in zip(stage, row, strict=True):
        if name != row_name or (index not in (None, "*") and index != row_index):
            return False
    return True


def _owner(stage: dict[str, Any]) -> str:
    name = str(stage.get("name") or "")
    return next((owner for prefix, owner in NOT_USERS.items() if name.startswith(prefix)), "user")


def _shown(stage: dict[str, Any]) -> dict[str, Any]:
    """What a row shows of its stage (the pipeline view's words come from these)."""
    return {
        "position": stage.get("position"),
        "kind": stage.get("kind"),
        "name": stage.get("name"),
        "function": stage.get("function"),
        "owner": _owner(stage),
    }


def _nobody(owner: str) -> dict[str, Any]:
    return {"position": None, "kind": None, "name": None, "function": None, "owner": owner}


class _Stages:
    def __init__(self, stages: list[dict[str, Any]]) -> None:
        self.stages = [(_parts(s["path"]), s) for s in stages if s.get("path")]
        # The pipeline's end (the stage the consumer reads); around it, Stoker's stamp.
        self.root = _parts(str(stages[-1].get("path") or "")) if stages else []
        self.stamped = len(self.root) > 3  # deeper than Iterator::Root::<the pipeline's end>

    def of(self, path: str) -> dict[str, Any] | None:
        row = _parts(path)
        for parts, stage in self.stages:
            if _matches(parts, row):
                return _shown(stage)
        if row == [("Iterator", None), ("Root", None)]:
            return _nobody("tf.data")  # the iterator tf.data puts at the root of every pipeline
        inside = len(row) > len(self.root) and _matches(self.root, row[: len(self.root)])
        if self.stamped and not inside and path.startswith("Iterator::Root"):
            return _nobody("stoker")
        return None


def _python_functions(stages: list[dict[str, Any]]) -> list[tuple[str, dict[str, Any]]]:
    """The user's functions of the pipeline that call Python, each with its stage."""
    found: dict[str, dict[str, Any]] = {}
    for stage in stages:
        if _owner(stage) != "user":
            continue
        for function in stage.get("functions") or []:
            if function.get("calls_python") and function.get("name"):
                found.setdefault(str(function["name"]), stage)
    return list(found.items())


_SUMMED = ("count", "ms", "self_ms")


def _per_stage(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Rows of one stage summed into one (the profiler keeps an iterator per repetition of a
    repeat and per open element of an interleave), the largest self time first."""
    merged: list[dict[str, Any]] = []
    by_stage: dict[tuple[Any, int], dict[str, Any]] = {}
    for row in rows:
        stage = row.get("stage")
        position = None if stage is None else stage.get("position")
        if position is None or row.get("type", "Dataset") != "Dataset":
            merged.append(row)
            continue
        held = by_stage.get((row.get("type"), position))
        if held is None:
            by_stage[(row.get("type"), position)] = row = dict(row)
            merged.append(row)
            continue
        for key in _SUMMED:
            if isinstance(row.get(key), int | float):
                held[key] = (held.get(key) or 0) + row[key]
    return sorted(merged, key=lambda row: -(row.get("self_ms") or 0))


def label_analysis(analysis: dict[str, Any], stages: list[dict[str, Any]]) -> dict[str, Any]:
    """`analysis` with each iterator row's `stage` (its position, kind, function and owner:
    "user", "stoker" or "tf.data"; null when unknown; one row per stage), each Dataset op
    row's too, and each
    Python call of the input pipeline's `function`: the user's function that makes it (with
    its `stage`), or null when none or several of the pipeline's functions call Python."""
    if not stages or not analysis.get("available"):
        return analysis
    known = _Stages(stages)
    python = _python_functions(stages)
    iterators = _per_stage(
        [
            {**row, "stage": known.of(str(row.get("name") or ""))}
            for row in analysis.get("iterators") or []
        ]
    )
    ops = []
    for row in analysis.get("top_ops") or []:
        name, kind = str(row.get("name") or ""), row.get("type")
        labelled = dict(row)
        if kind == "Dataset":
            labelled["stage"] = known.of(name)
        elif kind in PYTHON_OPS and not name.startswith(_MODEL_PREFIX):
            function, stage = python[0] if len(python) == 1 else (None, None)
            labelled["function"] = function
            labelled["stage"] = None if stage is None else _shown(stage)
            if len(python) > 1:
                labelled["functions"] = [name for name, _ in python]
        ops.append(labelled)
    return {**analysis, "iterators": iterators, "top_ops": _per_stage(ops)}
