"""GET /runs/{id}/energy: the run's GPU energy, split by what its steps were doing.

The split reads every step and energy row of the run. The runs list asks for it for every
run it shows, so an ended run's answer is kept (in this process, for the last
`CACHE_RUNS` runs asked) until anything stored about the run changes: its summary, which
every ingested batch updates (a spool uploaded after the run ended included).
"""

import json
import threading
from collections import OrderedDict
from typing import Any

from fastapi import APIRouter
from pydantic import BaseModel, Field
from sqlmodel import Session, col

from stoker_server.api.deps import RunDep, RunId, SessionDep, SettingsDep
from stoker_server.core.auth import ViewerAuth
from stoker_server.core.db import select_columns
from stoker_server.core.models import DeviceSample, Run, RunStatus
from stoker_server.core.step_chunks import read_steps
from stoker_server.diagnosis.energy import split_energy

router = APIRouter(prefix="/api/v1", tags=["energy"], dependencies=[ViewerAuth])

JOULES_PER_KWH = 3.6e6
CACHE_RUNS = 1000

_cache: "OrderedDict[tuple[Any, ...], RunEnergy]" = OrderedDict()
_cache_lock = threading.Lock()


class GpuEnergy(BaseModel):
    rank: int
    gpu: int
    total_j: float
    starved_j: float
    computing_j: float
    other_j: float
    integrated: bool = Field(description="integrated from power: the driver has no counter")


class RunEnergy(BaseModel):
    """Joules the run's GPUs drew (null when none reported energy), split into the time steps
    waited for input (`starved_j`), computed (`computing_j`), and the rest (no step running,
    or a step whose wait is unknown: `other_j`). Money where the server sets
    `STOKER_ENERGY_PRICE_KWH` (in `currency`)."""

    run_id: int
    total_j: float | None
    starved_j: float | None
    computing_j: float | None
    other_j: float | None
    total_kwh: float | None
    starved_kwh: float | None
    integrated: bool
    price_per_kwh: float | None
    currency: str
    total_cost: float | None
    starved_cost: float | None
    gpus: list[GpuEnergy]


def run_energy(
    *, session: Session, run_id: int, price_per_kwh: float | None, currency: str
) -> RunEnergy:
    device = session.exec(
        select_columns(
            DeviceSample.rank,
            DeviceSample.gpu,
            DeviceSample.t,
            DeviceSample.energy_j,
            DeviceSample.energy_integrated,
        ).where(DeviceSample.run_id == run_id, col(DeviceSample.energy_j).is_not(None))
    ).all()
    # Positional: a Row's `.t` is its tuple, not the `t` column.
    integrated = {(rank, gpu) for rank, gpu, _, _, flag in device if flag}
    steps: dict[int, tuple[list[float], list[float], list[float | None]]] = {}
    if device:
        for rank, of_rank in read_steps(session.connection(), run_id).by_rank():
            steps[rank] = (of_rank.t.tolist(), of_rank.dur.tolist(), of_rank.wait_or_none())
    split = split_energy(
        [(rank, gpu, t, float(joules)) for rank, gpu, t, joules, _ in device], steps
    )
    known = bool(device)

    def kwh(joules: float) -> float | None:
        return joules / JOULES_PER_KWH if known else None

    def cost(joules: float) -> float | None:
        if price_per_kwh is None or not known:
            return None
        return joules / JOULES_PER_KWH * price_per_kwh

    return RunEnergy(
        run_id=run_id,
        total_j=split.total_j if known else None,
        starved_j=split.starved_j if known else None,
        computing_j=split.computing_j if known else None,
        other_j=split.other_j if known else None,
        total_kwh=kwh(split.total_j),
        starved_kwh=kwh(split.starved_j),
        integrated=bool(integrated),
        price_per_kwh=price_per_kwh,
        currency=currency,
        total_cost=cost(split.total_j),
        starved_cost=cost(split.starved_j),
        gpus=[
            GpuEnergy(
                rank=rank,
                gpu=gpu,
                total_j=v[0],
                starved_j=v[1],
                computing_j=v[2],
                other_j=v[3],
                integrated=(rank, gpu) in integrated,
            )
            for (rank, gpu), v in sorted(split.per_gpu.items())
        ],
    )


@router.get("/runs/{run_id}/energy")
def read_energy(
    run_id: RunId, run: RunDep, session: SessionDep, settings: SettingsDep
) -> RunEnergy:
    """The run's GPU energy, and how much of it was burned while steps waited for input."""
    key = _cache_key(run, settings.energy_price_kwh, settings.currency)
    if key is not None:
        with _cache_lock:
            cached = _cache.get(key)
            if cached is not None:
                _cache.move_to_end(key)
                return cached
    energy = run_energy(
        session=session,
        run_id=run_id,
        price_per_kwh=settings.energy_price_kwh,
        currency=settings.currency,
    )
    if key is not None:
        with _cache_lock:
            _cache[key] = energy
            while len(_cache) > CACHE_RUNS:
                _cache.popitem(last=False)
    return energy


def _cache_key(run: Run, price: float | None, currency: str) -> tuple[Any, ...] | None:
    """What an ended run's split depends on; None for a running run (read afresh)."""
    if run.status == RunStatus.running:
        return None
    summary = json.dumps(run.summary, sort_keys=True, default=str)
    return (run.id, str(run.started_at), str(run.status), summary, price, currency)
