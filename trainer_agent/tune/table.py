"""The tune table: each change's measured figures against the unchanged run, and its verdict.

Pure: trial results in, rows out; `render` writes them for a terminal.

Noise is defined from the repeated trials: the best change runs twice, and the two runs'
steps/s differ by some share; the noise is that share, or `NOISE_FLOOR` if it is smaller (two
runs agreeing by chance do not make 1 % gains real). A change is a speed-up only when its
steps/s exceed the unchanged run's by more than the noise (the best change: both of its runs
do), slower when they fall short by more, and "no measurable gain" in between. A trial whose
steps consumed other elements than the unchanged run's is no comparison at all.
"""

from dataclasses import asdict, dataclass, field
from typing import Any

from trainer_agent.figures import ms_text, share_text
from trainer_agent.tune.trial import UNCHANGED, TrialResult

NOISE_FLOOR = 0.05
# A Python map's parallel trial that gained, but whose steps' own time (not waiting for input)
# grew this much: the training thread waited for the GIL the map's calls held.
GIL_STEP_GROWTH = 1.5

SPEED_UP = "speed-up"
NO_GAIN = "no measurable gain"
SLOWER = "slower"
NOT_TRIED = "not tried"
NOT_ASKED = "not asked"
FAILED = "failed"
ELEMENTS_DIFFER = "elements differ"
UNCHANGED_VERDICT = "unchanged"

GIL_ALTERNATIVES = (
    "move its work into TF ops (tf.image, tf.strings, ...), run it in more processes "
    "(preprocess offline, or a multiprocessing pool feeding a generator), or spread the input "
    "over the tf.data service's workers"
)


@dataclass
class Row:
    """One line of the table."""

    id: str
    advice: str
    label: str
    title: str
    verdict: str
    note: str = ""
    steps_per_s: float | None = None
    input_wait_share: float | None = None
    speedup: float | None = None
    # The best change ran twice: its second run.
    repeat_steps_per_s: float | None = None
    repeat_speedup: float | None = None
    batches: int | None = None
    examples: int | None = None
    cpu_cores: float | None = None
    function: str | None = None
    defined_at: str | None = None
    edit: dict[str, Any] | None = None
    keeps: str = ""
    run_key: str | None = None
    repeat_run_key: str | None = None


@dataclass
class Table:
    rows: list[Row]
    steps: int
    noise: float | None = None
    noise_text: str = ""
    best: str | None = None
    conclusion: str = ""
    elements_text: str = ""
    warnings: list[str] = field(default_factory=list)

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def _same_elements(trial: TrialResult, baseline: TrialResult) -> bool:
    if trial.batches != baseline.batches:
        return False
    if trial.examples is None or baseline.examples is None:
        return True
    return trial.examples == baseline.examples


def noise_of(best: TrialResult | None, repeat: TrialResult | None) -> tuple[float | None, str]:
    """The noise band (a share of steps/s) from the best change's two runs, and how it was
    found."""
    if best is None:
        return None, ""
    first, second = best.steps_per_s, repeat.steps_per_s if repeat is not None else None
    if not first or not second:
        why = "has not run a second time" if repeat is None else "gave no figures a second time"
        return NOISE_FLOOR, f"the best change {why}: the noise is taken as {NOISE_FLOOR:.0%}"
    spread = abs(first - second) / min(first, second)
    noise = max(NOISE_FLOOR, spread)
    floor = f", under the {NOISE_FLOOR:.0%} floor" if spread < NOISE_FLOOR else ""
    return noise, (
        f"the best change's two runs differ by {spread:.1%}{floor}: a change within "
        f'{noise:.1%} of the unchanged run\'s steps/s is "{NO_GAIN}"'
    )


def _verdict(gain: float, noise: float) -> str:
    if gain > noise:
        return SPEED_UP
    if gain < -noise:
        return SLOWER
    return NO_GAIN


def _gil_note(change: dict[str, Any]) -> str:
    function = change.get("function") or "its function"
    return (
        f"{function} runs Python (numpy_function/py_function): its threads take turns on "
        "Python's GIL, so more of them cannot run it faster. Instead, " + GIL_ALTERNATIVES + "."
    )


def _gil_bound_gain(trial: TrialResult, baseline: TrialResult) -> bool:
    """More calls of a Python function at once kept the input up better, but each step's own
    time grew with it: the calls' GIL held the training thread up, and took part of the gain."""
    grown, was = trial.compute_ms_median, baseline.compute_ms_median
    return grown is not None and was is not None and was > 0 and grown >= GIL_STEP_GROWTH * was


def _gil_gain_note(change: dict[str, Any], trial: TrialResult, baseline: TrialResult) -> str:
    function = change.get("function") or "its function"
    waits = ""
    if trial.input_wait_share is not None and baseline.input_wait_share is not None:
        waits = (
            f" (input wait {share_text(baseline.input_wait_share)} -> "
            f"{share_text(trial.input_wait_share)})"
        )
    return (
        f"{function} runs Python (numpy_function/py_function): with more calls at once the "
        f"input kept up better{waits}, but each step's own time grew from "
        f"{ms_text((baseline.compute_ms_median or 0) / 1000)} to "
        f"{ms_text((trial.compute_ms_median or 0) / 1000)}: the training thread waited for "
        "Python's GIL, which the calls take in turn, so more threads gain little beyond this. "
        "To gain more, " + GIL_ALTERNATIVES + "."
    )


def _row(change: dict[str, Any], verdict: str, note: str = "") -> Row:
    return Row(
        id=change["id"],
        advice=change.get("advice", ""),
        label=change.get("label") or change.get("title") or change["id"],
        title=change.get("title") or change["id"],
        verdict=verdict,
        note=note,
        function=change.get("function"),
        defined_at=change.get("defined_at"),
        edit=change.get("edit"),
        keeps=change.get("keeps", ""),
    )


def _measured(row: Row, trial: TrialResult, baseline: TrialResult) -> None:
    row.steps_per_s = trial.steps_per_s
    row.input_wait_share = trial.input_wait_share
    row.batches = trial.batches
    row.examples = trial.examples
    row.cpu_cores = trial.cpu_cores
    if trial.steps_per_s and baseline.steps_per_s:
        row.speedup = trial.steps_per_s / baseline.steps_per_s


def judge(
    baseline: TrialResult,
    changes: list[dict[str, Any]],
    trials: dict[str, TrialResult],
    repeat: TrialResult | None,
    *,
    steps: int,
    asked: set[str] | None = None,
    run_keys: dict[str, str] | None = None,
) -> Table:
    """The table from the unchanged run, the changes it listed (with why some are not
    tried), each tried change's result by id, and the best change's second run."""
    run_keys = run_keys or {}
    base = _row({"id": UNCHANGED, "advice": "", "label": "unchanged", "title": "unchanged"},
                UNCHANGED_VERDICT)  # fmt: skip
    _measured(base, baseline, baseline)
    base.run_key = run_keys.get(UNCHANGED)
    rows = [base]
    comparable: dict[str, TrialResult] = {}
    for change in changes:
        trial = trials.get(change["id"])
        if change.get("not_tried"):
            rows.append(_row(change, NOT_TRIED, change["not_tried"]))
            continue
        if asked is not None and change.get("advice") not in asked and trial is None:
            rows.append(_row(change, NOT_ASKED, "not in --only"))
            continue
        if trial is None:
            rows.append(_row(change, NOT_TRIED, "not run"))
            continue
        row = _row(change, FAILED)
        row.run_key = run_keys.get(change["id"])
        rows.append(row)
        if trial.status != "ok" or not trial.steps_per_s:
            row.verdict = NOT_TRIED if trial.status == "not_applied" else FAILED
            row.note = (trial.error or "no steps measured").strip().splitlines()[0][:500]
            continue
        _measured(row, trial, baseline)
        if not _same_elements(trial, baseline):
            row.verdict = ELEMENTS_DIFFER
            row.note = (
                f"its {trial.batches} steps took {trial.examples} examples, the unchanged run's "
                f"{baseline.batches} took {baseline.examples}: not compared"
            )
            continue
        comparable[change["id"]] = trial
    best_id = max(comparable, key=lambda i: comparable[i].steps_per_s or 0.0, default=None)
    noise, noise_text = noise_of(comparable.get(best_id) if best_id else None, repeat)
    table = Table(rows=rows, steps=steps, noise=noise, noise_text=noise_text)
    for row in rows:
        trial = comparable.get(row.id)
        if trial is None or noise is None or not baseline.steps_per_s:
            continue
        rates = [trial.steps_per_s or 0.0]
        if row.id == best_id and repeat is not None and repeat.steps_per_s:
            row.repeat_steps_per_s = repeat.steps_per_s
            row.repeat_speedup = repeat.steps_per_s / baseline.steps_per_s
            row.repeat_run_key = run_keys.get("repeat")
            rates.append(repeat.steps_per_s)
        row.verdict = _verdict(min(rates) / baseline.steps_per_s - 1.0, noise)
        change = next(c for c in changes if c["id"] == row.id)
        row.note = change.get("why") or ""
        if change.get("python") and change.get("advice") == "parallel":
            if row.verdict != SPEED_UP:
                row.note = _gil_note(change)
            elif _gil_bound_gain(trial, baseline):
                row.note = _gil_gain_note(change, trial, baseline)
    table.best = _best(rows)
    table.conclusion = _conclusion(table, baseline)
    table.elements_text = _elements_text(baseline, comparable, steps)
    if baseline.steps < steps:
        table.warnings.append(
            f"the fit ended after {baseline.steps} steps, before the {steps} asked: every "
            "trial measures those"
        )
    return table


def _best(rows: list[Row]) -> str | None:
    gains = [r for r in rows if r.verdict == SPEED_UP]
    if not gains:
        return None
    return max(gains, key=lambda r: min(r.speedup or 0, r.repeat_speedup or r.speedup or 0)).id


def _conclusion(table: Table, baseline: TrialResult) -> str:
    rows = {row.id: row for row in table.rows}
    if table.best is not None:
        row = rows[table.best]
        again = f", {row.repeat_speedup:.2f}x again" if row.repeat_speedup else ""
        best = (
            f"Best: {row.title}: {row.speedup:.2f}x the unchanged run's steps/s{again} "
            f"({_rate(baseline.steps_per_s)} -> {_rate(row.steps_per_s)} steps/s)."
        )
        if "GIL" in row.note:
            best += f" {row.function or 'The slow function'} is held back by the GIL: " + (
                GIL_ALTERNATIVES + " to gain more."
            )
        return best
    tried = [r for r in table.rows if r.verdict in (NO_GAIN, SLOWER)]
    if tried:
        gil = [r for r in tried if "GIL" in r.note]
        text = (
            f"No change Stoker tried gains more than the noise ({table.noise:.1%} of steps/s)."
            if table.noise is not None
            else ""
        )
        if gil:
            text += (
                f" {gil[0].function or 'The slow function'} is Python bound by the GIL: "
                + GIL_ALTERNATIVES
                + "."
            )
        return text
    if any(r.verdict == FAILED for r in table.rows):
        return "No change could be measured: see the failures above."
    if any(r.verdict == NOT_ASKED for r in table.rows):
        return (
            "Nothing to try of what --only asked for: each such change is in effect already or "
            "cannot be applied here (the reasons are above); the others were not asked."
        )
    return (
        "Nothing to try: each change Stoker advises is in effect already or cannot be applied "
        "here (the reasons are above)."
    )


def _elements_text(baseline: TrialResult, comparable: dict[str, TrialResult], steps: int) -> str:
    if baseline.examples is None:
        what = f"{baseline.batches} batches"
    else:
        what = f"{baseline.batches} batches, {baseline.examples:,} examples"
    if not comparable:
        return f"The unchanged run's {min(steps, baseline.steps)} steps took {what}."
    return (
        f"Every trial compared took the same elements in its {min(steps, baseline.steps)} "
        f"steps as the unchanged run: {what}."
    )


def _rate(value: float | None) -> str:
    return "-" if value is None else f"{value:.3g}"


def _share(value: float | None) -> str:
    return "-" if value is None else share_text(value)


def _speed(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f}x"


def render(table: Table, *, header: str = "") -> str:
    """The table for a terminal: a line per change, its line to edit under it."""
    lines = [header] if header else []
    width = max(24, min(44, max(len(r.label) for r in table.rows)))
    lines.append(
        f"  {'change':<{width}}  {'steps/s':>8}  {'input wait':>10}  {'speed-up':>8}  verdict"
    )
    for row in table.rows:
        verdict = row.verdict if row.verdict != UNCHANGED_VERDICT else ""
        if row.repeat_speedup is not None:
            verdict += f" ({_speed(row.repeat_speedup)} on its second run)"
        if row.verdict in (NOT_TRIED, FAILED, ELEMENTS_DIFFER, NOT_ASKED) and row.note:
            verdict += f": {row.note}"
        speedup = "1.00x" if row.id == UNCHANGED else _speed(row.speedup)
        lines.append(
            f"  {row.label[:width]:<{width}}  {_rate(row.steps_per_s):>8}  "
            f"{_share(row.input_wait_share):>10}  {speedup:>8}  {verdict}".rstrip()
        )
        if row.note and row.verdict in (NO_GAIN, SLOWER, SPEED_UP):
            lines.append(f"      {row.note}")
        if row.edit and row.verdict == SPEED_UP:
            edit = row.edit
            lines.append(f"      {edit['where']}  {edit['before']}")
            lines.append(f"      {' ' * len(edit['where'])}  -> {edit['after']}")
    lines.append("")
    if table.noise_text:
        lines.append(f"  Noise: {table.noise_text}.")
    if table.elements_text:
        lines.append(f"  Elements: {table.elements_text}")
    for warning in table.warnings:
        lines.append(f"  Note: {warning}.")
    lines.append(f"  {table.conclusion}")
    if table.best is not None:
        row = next(r for r in table.rows if r.id == table.best)
        if row.edit:
            lines.append(f"  Edit {row.edit['where']}: {row.edit['before']}")
            lines.append(f"    -> {row.edit['after']}")
    return "\n".join(lines)
