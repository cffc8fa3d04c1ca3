"""The diagnosis read back from stored steps: a window rebuilt for runs not watched in
memory, and the stretches of starved steps the UI shades."""

from collections.abc import Sequence
from typing import Any, TypeVar

import numpy as np
from pydantic import BaseModel
from sqlalchemy import func
from sqlmodel import Session, col, select

from stoker_server.core.models import DeviceSample, HostSample, Run, RunStatus
from stoker_server.core.step_chunks import read_steps
from stoker_server.diagnosis.stragglers import worker_hosts
from stoker_server.diagnosis.window import RunWindow, WholeRun

# -- starvation marks ------------------------------------------------------------------------


class StarvedRange(BaseModel):
    start: int
    end: int
    t_start: float
    t_end: float
    steps: int
    wait_share: float | None


class StarvedRanges(BaseModel):
    run_id: int
    rank: int
    threshold: float
    measured_steps: int
    starved_steps: int
    ranges: list[StarvedRange]


def starved_ranges(
    *, session: Session, run_id: int, threshold: float, rank: int = 0, max_gap: int = 0
) -> StarvedRanges:
    """Stretches of consecutive steps whose input wait is at least `threshold` of step time.

    Steps without a measured wait are neither starved nor fed. Ranges separated by at most
    `max_gap` fed steps are merged, so the UI can shade a noisy stretch as one band.
    """
    steps = read_steps(session.connection(), run_id, rank=rank)
    measured_steps = steps.where(~np.isnan(steps.wait))
    measured = len(measured_steps)
    starved = measured_steps.where(
        (measured_steps.wait >= threshold * measured_steps.dur) & (measured_steps.step > 0)
    )
    rows = zip(
        starved.step.tolist(),
        starved.t.tolist(),
        starved.dur.tolist(),
        starved.wait.tolist(),
        strict=True,
    )
    ranges: list[dict[str, Any]] = []
    for step, t, dur, wait in rows:
        if ranges and step - ranges[-1]["end"] <= max_gap + 1:
            current = ranges[-1]
            current["end"] = step
            current["t_end"] = t + dur
            current["steps"] += 1
            current["_wait"] += min(wait, dur)
            current["_dur"] += dur
        else:
            ranges.append(
                {"start": step, "end": step, "t_start": t, "t_end": t + dur, "steps": 1,
                 "_wait": min(wait, dur), "_dur": dur}
            )  # fmt: skip
    for item in ranges:
        wait_s, dur_s = item.pop("_wait"), item.pop("_dur")
        item["wait_share"] = round(wait_s / dur_s, 4) if dur_s > 0 else None
    return StarvedRanges(
        run_id=run_id,
        rank=rank,
        threshold=threshold,
        measured_steps=measured,
        starved_steps=len(starved),
        ranges=[StarvedRange(**item) for item in ranges],
    )


# -- a window rebuilt from storage (runs not watched in memory) ------------------------------


def window_from_db(
    *, session: Session, run: Run, window_s: float, whole_run: bool | None = None
) -> RunWindow:
    """The run's last `window_s` seconds of steps and samples, as a window. An ended run's
    window (`whole_run`: by default when the run is not running) carries the whole run's
    input wait, which its verdict is judged on: the figure its summary shows."""
    assert run.id is not None
    running = run.status == RunStatus.running
    window = RunWindow(
        run_id=run.id,
        window_s=window_s,
        project=run.project,
        name=run.name,
        running=running,
        environment=run.environment,
    )
    if whole_run if whole_run is not None else not running:
        window.whole_run = WholeRun.of(run.stats)
    window.hosts = worker_hosts(run)
    last_t = run.stats.get("last_t")
    if last_t is not None:
        steps = read_steps(session.connection(), run.id, t_min=last_t - window_s - 1)
        for rank, of_rank in steps.by_rank():
            window.add_step_arrays(now=0.0, arrays=of_rank.window_arrays(), rank=rank)
    device = _last_window(session, DeviceSample, run_id=run.id, window_s=window_s)
    if device:
        window.add_device(
            now=0.0,
            t=[r.t for r in device],
            gpu=[r.gpu for r in device],
            util=[r.util for r in device],
            mem_used=[r.mem_used for r in device],
            mem_total=[r.mem_total for r in device],
            temp_c=[r.temp_c for r in device],
            sm_util=[r.sm_util for r in device],
            tensor_util=[r.tensor_util for r in device],
            throttle=[r.throttle for r in device],
            rank=[r.rank for r in device],
        )
    host = _last_window(session, HostSample, run_id=run.id, window_s=window_s)
    if host:
        window.add_host(
            now=0.0,
            t=[r.t for r in host],
            proc_cpu=[r.proc_cpu for r in host],
            sys_cpu=[r.sys_cpu for r in host],
        )
    return window


_Sample = TypeVar("_Sample", DeviceSample, HostSample)


def _last_window(
    session: Session, table: type[_Sample], *, run_id: int, window_s: float
) -> Sequence[_Sample]:
    """The run's rows of a sample table from `window_s` seconds before its newest one, in
    time order (none when the run has no such sample)."""
    newest = session.exec(select(func.max(table.t)).where(table.run_id == run_id)).one()
    if newest is None:
        return []
    return session.exec(
        select(table)
        .where(table.run_id == run_id, table.t >= newest - window_s)
        .order_by(col(table.t))
    ).all()
