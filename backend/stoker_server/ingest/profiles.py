"""Profiler captures on the server: their rows, their trace files, the quota.

A capture asks every connected agent (worker) of the run; each is one entry of the profile's
`workers`, by rank, and uploads its own trace. A trace arrives in chunks (`store_chunk`) into
`<data_dir>/profiles/<pid>/<name>.xplane.pb.part` (rank 0: `trace`, rank r: `worker<r>`); the
last one renames it. The profile's own status, steps and overhead follow its workers (its
steps and overhead are its lowest rank's): it is ready once every asked worker uploaded its
trace or failed, and at least one trace is in and analysed. Traces beyond
`profile_quota_bytes` (every profile's stored bytes count, whatever its status) are deleted
oldest first (the row stays, `trace_evicted`; a capture in progress is not evicted). Analysis is
in backend/stoker_server/ingest/profile_analysis.py; its rows are tied to the run's pipeline
stages (profile_labels.py) as it is stored.

A worker the server presumed gone (`lost`: no word from it for the capture's max duration and
a grace, when a new capture is asked) may still deliver: an agent spools its trace and sends
it when it, or the next agent on its machine, reaches the server again. Its late report
revives the profile (uploading, then ready with its trace). A failure the agent itself
reported, or a trace refused for its size, stays failed.
"""

import shutil
from datetime import UTC
from pathlib import Path
from typing import Any

import numpy as np
from sqlmodel import Session, col, select

from stoker_server.core.errors import Conflict, StokerError
from stoker_server.core.models import (
    Profile,
    ProfilePublic,
    ProfilesPublic,
    ProfileStatus,
    utc_now,
)
from stoker_server.core.step_chunks import read_steps
from stoker_server.ingest.pipeline_store import pipeline_read
from stoker_server.ingest.profile_labels import label_analysis

IN_PROGRESS = (ProfileStatus.requested, ProfileStatus.capturing, ProfileStatus.uploading)
# Statuses the agent may report; `ready` is the server's own, after the analysis.
AGENT_STATUSES = {ProfileStatus.capturing, ProfileStatus.uploading, ProfileStatus.failed}


class ProfileNotFound(StokerError):
    status_code = 404


def trace_path(data_dir: Path, pid: int, rank: int = 0) -> Path:
    # One directory per capture: xprof takes a directory's .xplane.pb files as the hosts of
    # one capture, so the workers' traces sit side by side, and nothing else does.
    name = "trace" if rank == 0 else f"worker{rank}"
    return data_dir / "profiles" / str(pid) / f"{name}.xplane.pb"


def trace_paths(data_dir: Path, profile: Profile) -> dict[int, Path]:
    """The stored traces of the profile's workers, by rank."""
    paths = {rank: trace_path(data_dir, profile.id or 0, rank) for rank in workers_of(profile)}
    return {rank: path for rank, path in sorted(paths.items()) if path.exists()}


def stored_traces(*, session: Session, pid: int, data_dir: Path) -> dict[int, Path]:
    profile = session.get(Profile, pid)
    return {} if profile is None else trace_paths(data_dir, profile)


STEPS_PER_EXECUTION_NOTE = (
    "with steps_per_execution > 1 Keras runs each execution's steps in a tf.while_loop; xprof "
    "then takes the loop's iterations for steps and ignores the step markers, so it measures "
    "no step time (docs/agent.md, 'Profiler captures from the browser')"
)
# What a worker's own analysis keeps (the profile's own analysis has the tables).
WORKER_ANALYSIS = ("available", "conclusion", "step_ms_average", "breakdown_ms", "message")
Analysed = tuple[dict[str, Any], float | None, tuple[int, int] | None]

TERMINAL = {ProfileStatus.ready, ProfileStatus.failed}


def workers_of(profile: Profile) -> dict[int, dict[str, Any]]:
    """The profile's workers by rank (a profile stored before workers were kept: rank 0)."""
    if not profile.workers:
        status = profile.status if profile.status != ProfileStatus.ready else "ready"
        return {0: {"rank": 0, "status": status, "error": profile.error}}
    return {int(rank): dict(worker) for rank, worker in profile.workers.items()}


def _set_workers(profile: Profile, workers: dict[int, dict[str, Any]]) -> None:
    """Store the workers and derive the profile's own fields from them (not `ready`: that
    waits for the analysis)."""
    profile.workers = {str(rank): worker for rank, worker in sorted(workers.items())}
    statuses = [ProfileStatus(worker["status"]) for worker in workers.values()]
    if all(status in TERMINAL for status in statuses):
        if ProfileStatus.ready not in statuses:
            profile.status = ProfileStatus.failed
        elif profile.status != ProfileStatus.ready:
            profile.status = ProfileStatus.uploading  # until the analysis is in
    elif all(status == ProfileStatus.requested for status in statuses if status not in TERMINAL):
        profile.status = ProfileStatus.requested  # (a worker missed at request time is failed)
    elif any(status in (ProfileStatus.requested, ProfileStatus.capturing) for status in statuses):
        profile.status = ProfileStatus.capturing
    else:
        profile.status = ProfileStatus.uploading
    ordered = [workers[rank] for rank in sorted(workers)]
    for name in ("first_step", "last_step", "overhead"):
        value = next((w[name] for w in ordered if w.get(name) not in (None, {})), None)
        if value is not None:
            setattr(profile, name, value)
    sizes = [w["trace_bytes"] for w in ordered if w.get("trace_bytes") is not None]
    profile.trace_bytes = sum(sizes) if sizes else None
    profile.received_bytes = sum(w.get("received_bytes", 0) for w in ordered)
    failed = [w for w in ordered if w["status"] == ProfileStatus.failed and w.get("error")]
    errors = [(w["rank"], w["error"]) for w in failed]
    if profile.status != ProfileStatus.failed:
        profile.error = None
    elif len({error for _, error in errors}) == 1:
        profile.error = errors[0][1]
    else:
        profile.error = "; ".join(f"rank {rank}: {error}" for rank, error in errors)[:2000]
    profile.updated_at = utc_now()


def ready_to_analyse(profile: Profile) -> bool:
    """Every asked worker delivered its trace or failed, and at least one trace is in."""
    statuses = {ProfileStatus(w["status"]) for w in workers_of(profile).values()}
    return statuses <= TERMINAL and ProfileStatus.ready in statuses


def _analysed_steps(
    analysis: dict[str, Any], first: int | None, last: int | None
) -> tuple[int, int] | None:
    """[first, last] of the analysed steps: the trace's own range, else the capture's; None
    while either end is unknown."""
    first, last = analysis.get("step_range") or (first, last)
    return None if first is None or last is None else (first, last)


def public(profile: Profile, session: Session | None = None) -> ProfilePublic:
    """The profile as shown; with `session`, Stoker's input shares over the analysed steps
    are filled in once those steps are stored (the agent may deliver them after the trace)."""
    shown = ProfilePublic.model_validate(
        {**profile.model_dump(), "workers": list(workers_of(profile).values())}
    )
    if session is None or profile.status != ProfileStatus.ready:
        return shown
    steps = _analysed_steps(profile.analysis, profile.first_step, profile.last_step)
    lowest = min((w.rank for w in shown.workers), default=0)
    if shown.input_share_stoker is None and steps is not None:
        shown.input_share_stoker = stoker_input_share(
            session=session, run_id=profile.run_id, first=steps[0], last=steps[1], rank=lowest
        )
    for worker in shown.workers:
        own = _analysed_steps(worker.analysis, worker.first_step, worker.last_step)
        if worker.input_share_stoker is None and worker.status == "ready" and own is not None:
            worker.input_share_stoker = stoker_input_share(
                session=session, run_id=profile.run_id, first=own[0], last=own[1],
                rank=worker.rank,
            )  # fmt: skip
    return shown


def get_profile(*, session: Session, run_id: int, pid: int) -> Profile:
    profile = session.get(Profile, pid)
    if profile is None or profile.run_id != run_id:
        raise ProfileNotFound(f"profile {pid} of run {run_id} not found")
    return profile


def list_profiles(*, session: Session, run_id: int) -> ProfilesPublic:
    rows = session.exec(
        select(Profile).where(Profile.run_id == run_id).order_by(col(Profile.id).desc())
    ).all()
    return ProfilesPublic(data=[public(row, session) for row in rows], count=len(rows))


def create_profile(
    *,
    session: Session,
    run_id: int,
    steps: int,
    stale_after_s: float,
    ranks: list[int],
    alert_id: int | None = None,
) -> ProfilePublic:
    """A new capture of the workers `ranks`, unless one is in progress for the run (409).
    One no agent has reported on for `stale_after_s` (they went away) no longer blocks: its
    silent workers are `lost` (they may still deliver later), and it fails when no trace is in,
    else waits for the analysis of the traces that are (`awaiting_analysis`)."""
    busy = session.exec(
        select(Profile).where(Profile.run_id == run_id, col(Profile.status).in_(IN_PROGRESS))
    ).all()
    for row in busy:
        heard = row.updated_at.replace(tzinfo=row.updated_at.tzinfo or UTC)
        if (utc_now() - heard).total_seconds() < stale_after_s:
            raise Conflict(f"profile {row.id} of this run is still {row.status}: one at a time")
    error = f"profile failed: no word from the agent for {stale_after_s:.0f} s"
    for row in busy:
        workers = workers_of(row)
        for worker in workers.values():
            if ProfileStatus(worker["status"]) not in TERMINAL:
                worker.update(status="failed", error=error, lost=True)
        # Failed when no trace is in; else `uploading` until the traces that are in are
        # analysed (`awaiting_analysis`), then ready with its lost workers marked.
        _set_workers(row, workers)
        session.add(row)
    profile = Profile(run_id=run_id, steps=steps, alert_id=alert_id)
    _set_workers(profile, {rank: {"rank": rank, "status": "requested"} for rank in ranks})
    session.add(profile)
    session.commit()
    session.refresh(profile)
    return public(profile)


ENDED_BEFORE_START = "profile failed: the run ended before its capture started"


def settle_at_run_end(*, session: Session, run_id: int, rank: int | None) -> int:
    """Worker `rank` of the run ended (every worker when None): its part of the run's
    captures that never started can no longer start. They fail, marked `lost`: a report
    still on its way (the capture started in the last steps after all) revives them. Adds
    to the caller's transaction; returns how many profiles changed."""
    rows = session.exec(
        select(Profile).where(Profile.run_id == run_id, col(Profile.status).in_(IN_PROGRESS))
    ).all()
    changed = 0
    for row in rows:
        workers = workers_of(row)
        unstarted = [
            worker
            for number, worker in workers.items()
            if (rank is None or number == rank) and worker["status"] == ProfileStatus.requested
        ]
        for worker in unstarted:
            worker.update(status="failed", error=ENDED_BEFORE_START, lost=True)
        if unstarted:
            _set_workers(row, workers)
            session.add(row)
            changed += 1
    return changed


def awaiting_analysis(*, session: Session, run_id: int) -> list[int]:
    """The run's profiles whose workers all settled with a trace in, not analysed yet (e.g. a
    stale one whose lost workers were given up on, or one whose analysis a restart cut)."""
    rows = session.exec(
        select(Profile).where(Profile.run_id == run_id, Profile.status == ProfileStatus.uploading)
    ).all()
    return [row.id for row in rows if row.id is not None and ready_to_analyse(row)]


def update_status(
    *, session: Session, run_id: int, pid: int, rank: int, report: dict[str, Any]
) -> tuple[ProfilePublic, bool]:
    """What worker `rank`'s agent reports: capturing, uploading (with the step range,
    overhead and trace size), failed. Returns the profile and whether it is now ready to be
    analysed (this was its last worker to settle)."""
    profile = get_profile(session=session, run_id=run_id, pid=pid)
    workers = workers_of(profile)
    worker = workers.get(rank)
    if worker is None:
        raise ProfileNotFound(f"profile {pid} did not ask rank {rank}")
    status = ProfileStatus(worker["status"])
    if status == ProfileStatus.ready or (status == ProfileStatus.failed and not worker.get("lost")):
        return public(profile), False  # a late or repeated report changes nothing
    if profile.trace_evicted:  # the others' traces are gone: a lost worker's comes too late
        return public(profile), False
    worker.update(status=report["status"], lost=False, error=report.get("error"))  # revived
    for name in ("first_step", "last_step", "overhead"):
        if report.get(name) is not None:
            worker[name] = report[name]
    if report.get("bytes") is not None:
        worker["trace_bytes"] = report["bytes"]
    _set_workers(profile, workers)
    session.add(profile)
    session.commit()
    session.refresh(profile)
    return public(profile), ready_to_analyse(profile)


def fail(
    *, session: Session, pid: int, error: str, ranks: list[int] | None = None
) -> ProfilePublic | None:
    """Fail the workers `ranks` (all of them by default) with `error`."""
    profile = session.get(Profile, pid)
    if profile is None:
        return None
    workers = workers_of(profile)
    for rank in workers if ranks is None else ranks:
        if rank in workers:
            workers[rank].update(status="failed", error=error[:2000], lost=False)
    _set_workers(profile, workers)
    if ranks is None:  # the whole profile (e.g. its analysis), whatever its workers did
        profile.status = ProfileStatus.failed
        profile.error = error[:2000]
    session.add(profile)
    session.commit()
    session.refresh(profile)
    return public(profile)


def store_chunk(
    *,
    session: Session,
    data_dir: Path,
    run_id: int,
    pid: int,
    rank: int,
    offset: int,
    total: int,
    data: bytes,
    max_bytes: int,
) -> tuple[bool, bool]:
    """Write one chunk of worker `rank`'s trace. Returns (its trace is complete, the profile
    is ready to be analysed)."""
    profile = get_profile(session=session, run_id=run_id, pid=pid)
    workers = workers_of(profile)
    worker = workers.get(rank)
    if worker is None:
        raise ProfileNotFound(f"profile {pid} did not ask rank {rank}")
    if worker["status"] != ProfileStatus.uploading:
        raise Conflict(f"profile {pid} rank {rank} is {worker['status']}, not uploading")
    if total > max_bytes:
        raise Conflict(f"trace of {total} bytes is over the server's {max_bytes}-byte cap")
    if profile.trace_evicted:  # its other traces are gone: nothing to add one to
        raise Conflict(f"profile {pid}'s traces were evicted (over the server's quota)")
    path = trace_path(data_dir, pid, rank)
    part = path.with_suffix(".pb.part")
    # The bytes held are on disk: without the part file (gone with the data directory) the
    # upload starts again at 0, never as a zero-filled sparse file under what arrives.
    held = worker.get("received_bytes", 0) if part.exists() else 0
    if offset > held or offset + len(data) > total:
        raise Conflict(f"chunk at {offset} does not follow the {held} bytes held")
    part.parent.mkdir(parents=True, exist_ok=True)
    with open(part, "r+b" if part.exists() else "wb") as file:
        file.seek(offset)
        file.write(data)
        if offset + len(data) >= total:
            file.truncate(total)  # nothing of an earlier, longer attempt stays behind it
    worker["received_bytes"] = max(held, offset + len(data))
    worker["trace_bytes"] = total
    complete = worker["received_bytes"] >= total
    if complete:
        worker["status"] = ProfileStatus.ready.value
    _set_workers(profile, workers)
    session.add(profile)
    # The rename follows the commit: a commit that fails leaves the part file where the
    # worker's row (still uploading, the bytes held before) says it is, and the resent chunk
    # completes it. (Ended between the two, the row is ready and the trace still a part file:
    # `trace_paths` does not list it, so it is analysed without that trace.)
    session.commit()
    if complete:
        part.replace(path)
    return complete, complete and ready_to_analyse(profile)


def stoker_input_share(
    *, session: Session, run_id: int, first: int, last: int, rank: int = 0
) -> float | None:
    """Stoker's measured input wait over the captured steps of worker `rank`, as a share of
    their time; None until all of them are stored."""
    steps = read_steps(session.connection(), run_id, rank=rank, first_step=first, last_step=last)
    measured = ~np.isnan(steps.wait)
    spent = float(steps.dur.sum())
    if len(steps) < last - first + 1 or not measured.any() or not spent:
        return None
    return float(steps.wait[measured].sum()) / spent


def _stored(*, session: Session, run_id: int, first: int, last: int, rank: int) -> bool:
    """Whether every step of worker `rank` from `first` to `last` is stored."""
    steps = read_steps(session.connection(), run_id, rank=rank, first_step=first, last_step=last)
    return len(steps) >= last - first + 1


StepRange = tuple[int, int]


def _share_ranges(
    profile: Profile,
    workers: dict[int, dict[str, Any]],
    steps: StepRange | None,
    worker_steps: dict[int, StepRange | None],
) -> tuple[tuple[int, int, int] | None, dict[int, StepRange]]:
    """The steps Stoker's shares are taken over: the profile's (rank, first, last), the
    lowest rank with a trace, over `steps` (the profiler's analysed range) or else the steps
    the workers reported; and each analysed worker's (`worker_steps`: its own trace's range)."""
    own: dict[int, StepRange] = {}
    for rank, alone_steps in worker_steps.items():
        worker = workers.get(rank)
        if worker is None:
            continue
        begin, end = alone_steps or (worker.get("first_step"), worker.get("last_step"))
        if begin is not None and end is not None:
            own[rank] = (begin, end)
    first, last = steps or (profile.first_step, profile.last_step)
    lowest = next(
        (w for _, w in sorted(workers.items()) if w["status"] == ProfileStatus.ready), None
    )
    whole = None
    if first is not None and last is not None:
        whole = (lowest["rank"] if lowest else 0, first, last)
    return whole, own


def steps_awaited(
    *,
    session: Session,
    pid: int,
    steps: StepRange | None,
    worker_steps: dict[int, StepRange | None],
) -> tuple[int, set[int]]:
    """(the profile's run, the ranks some of whose captured steps are not stored yet): what
    `finish` would take Stoker's shares over, with the same arguments. An agent sends a
    step a moment after it ran, so the steps of a capture may arrive after its trace."""
    profile = session.get(Profile, pid)
    assert profile is not None
    whole, own = _share_ranges(profile, workers_of(profile), steps, worker_steps)
    ranges = [(rank, first, last) for rank, (first, last) in own.items()]
    ranges += [whole] if whole is not None else []
    missing = {
        rank
        for rank, first, last in ranges
        if not _stored(session=session, run_id=profile.run_id, first=first, last=last, rank=rank)
    }
    return profile.run_id, missing


def finish(
    *,
    session: Session,
    pid: int,
    analysis: dict[str, Any],
    profiler_share: float | None,
    steps: StepRange | None,
    data_dir: Path,
    quota_bytes: int,
    per_worker: dict[int, Analysed] | None = None,
) -> ProfilePublic:
    """The analysis is in: the profile is ready, with Stoker's own share beside the profiler's
    (the lowest rank's), each worker's beside its own trace's (`per_worker`: each trace
    analysed alone), and in the same commit the oldest traces beyond the quota are evicted.
    The caller waits for the captured steps first (`steps_awaited`): a share over steps not
    yet stored is null.

    `steps` narrows Stoker's share to the steps the profiler analysed (it drops partial ones).
    """
    profile = session.get(Profile, pid)
    assert profile is not None
    if steps is not None:
        analysis = {**analysis, "step_range": list(steps)}
    read = pipeline_read(session.connection(), profile.run_id, None)
    analysis = label_analysis(analysis, (read or {}).get("stages") or [])
    executions = (profile.overhead or {}).get("steps_per_execution") or 1
    if analysis.get("available") and not analysis.get("steps") and executions > 1:
        analysis = {**analysis, "note": STEPS_PER_EXECUTION_NOTE}
    workers = workers_of(profile)
    per_worker = per_worker or {}
    whole, own = _share_ranges(
        profile, workers, steps, {rank: alone[2] for rank, alone in per_worker.items()}
    )
    for rank, (alone, share, alone_steps) in per_worker.items():
        worker = workers.get(rank)
        if worker is None:
            continue
        summary = {key: alone.get(key) for key in WORKER_ANALYSIS if key in alone}
        worker.update(analysis=summary, input_share_profiler=share)
        if alone_steps is not None:
            worker["analysis"]["step_range"] = list(alone_steps)
        if rank in own:
            begin, end = own[rank]
            worker["input_share_stoker"] = stoker_input_share(
                session=session, run_id=profile.run_id, first=begin, last=end, rank=rank
            )
    if profile.workers:
        _set_workers(profile, workers)
    if whole is not None:
        rank, first, last = whole
        profile.input_share_stoker = stoker_input_share(
            session=session, run_id=profile.run_id, first=first, last=last, rank=rank
        )
    profile.analysis = analysis
    profile.input_share_profiler = profiler_share
    profile.status = ProfileStatus.ready
    profile.updated_at = utc_now()
    session.add(profile)
    evict_beyond_quota(session=session, data_dir=data_dir, quota_bytes=quota_bytes)
    session.refresh(profile)
    return public(profile)


def make_room(*, session: Session, pid: int, data_dir: Path, quota_bytes: int) -> str | None:
    """Before a profile is analysed: None when its traces fit in `quota_bytes`, the oldest
    other traces evicted as needed; else why not, its own traces then deleted (a trace the
    quota cannot hold is not worth analysing)."""
    profile = session.get(Profile, pid)
    if profile is None:
        return None
    own = stored_bytes(profile)
    if own > quota_bytes:
        shutil.rmtree(trace_path(data_dir, pid).parent, ignore_errors=True)
        profile.trace_evicted = True
        session.add(profile)
        session.commit()
        return (
            f"its traces ({own} bytes) are over the server's profile quota ({quota_bytes} "
            "bytes, STOKER_PROFILE_QUOTA_BYTES): deleted, not analysed"
        )
    evict_beyond_quota(session=session, data_dir=data_dir, quota_bytes=quota_bytes)
    return None


def stored_bytes(profile: Profile) -> int:
    """What the profile's traces take on disk: each worker's bytes received (its finished
    trace, or the part of one being or given up being uploaded)."""
    if not profile.workers:  # stored before workers were kept
        return profile.received_bytes or profile.trace_bytes or 0
    return sum(worker.get("received_bytes", 0) for worker in profile.workers.values())


def evict_beyond_quota(*, session: Session, data_dir: Path, quota_bytes: int) -> list[int]:
    """Delete the oldest stored traces until the rest fit in `quota_bytes`. Every profile's
    stored bytes count, whatever its status (a failed one may hold traces or parts of
    them); a capture in progress is counted but not evicted."""
    rows = session.exec(
        select(Profile).where(~col(Profile.trace_evicted)).order_by(col(Profile.id).desc())
    ).all()
    kept, evicted = 0, []
    for row in rows:
        kept += stored_bytes(row)
        if kept > quota_bytes and row.status in TERMINAL:
            assert row.id is not None
            shutil.rmtree(trace_path(data_dir, row.id).parent, ignore_errors=True)
            row.trace_evicted = True
            session.add(row)
            evicted.append(row.id)
    session.commit()
    return evicted
