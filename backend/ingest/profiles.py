"""Profiler captures on the server (issue 19): their rows, their trace files, the quota.

A trace arrives in chunks (`store_chunk`) into `<data_dir>/profiles/<pid>/trace.xplane.pb.part`;
the last one renames it. Traces beyond `profile_quota_bytes` are deleted oldest first (the
row stays, `trace_evicted`). Analysis is in backend/ingest/profile_analysis.py.
"""

import shutil
from datetime import UTC
from pathlib import Path
from typing import Any

from sqlmodel import Session, col, func, select

from backend.core.errors import StokerError
from backend.core.models import Profile, ProfilePublic, ProfilesPublic, ProfileStatus, Step, utc_now

IN_PROGRESS = (ProfileStatus.requested, ProfileStatus.capturing, ProfileStatus.uploading)
# Statuses the agent may report; `ready` is the server's own, after the analysis.
AGENT_STATUSES = {ProfileStatus.capturing, ProfileStatus.uploading, ProfileStatus.failed}


class Conflict(StokerError):
    status_code = 409


class ProfileNotFound(StokerError):
    status_code = 404


def trace_path(data_dir: Path, pid: int) -> Path:
    # One directory per trace: xprof takes a directory's .xplane.pb files for the hosts of
    # one capture, so two traces side by side would be analysed as one.
    return data_dir / "profiles" / str(pid) / "trace.xplane.pb"


def public(profile: Profile, session: Session | None = None) -> ProfilePublic:
    """The profile as shown; with `session`, Stoker's input share over the analysed steps is
    filled in once those steps are stored (the agent may deliver them after the trace)."""
    shown = ProfilePublic.model_validate(profile, from_attributes=True)
    steps = profile.analysis.get("step_range") or (profile.first_step, profile.last_step)
    ready = profile.status == ProfileStatus.ready and None not in steps
    if session is not None and ready and shown.input_share_stoker is None:
        first, last = steps
        shown.input_share_stoker = stoker_input_share(
            session=session, run_id=profile.run_id, first=first, last=last
        )
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
    *, session: Session, run_id: int, steps: int, stale_after_s: float
) -> ProfilePublic:
    """A new capture, unless one is in progress for the run (409). One the agent has not
    reported on for `stale_after_s` (it went away) fails, and no longer blocks."""
    busy = session.exec(
        select(Profile).where(Profile.run_id == run_id, col(Profile.status).in_(IN_PROGRESS))
    ).first()
    if busy is not None:
        heard = busy.updated_at.replace(tzinfo=busy.updated_at.tzinfo or UTC)
        if (utc_now() - heard).total_seconds() < stale_after_s:
            raise Conflict(f"profile {busy.id} of this run is still {busy.status}: one at a time")
        busy.status = ProfileStatus.failed
        busy.error = f"profile failed: no word from the agent for {stale_after_s:.0f} s"
        session.add(busy)
    profile = Profile(run_id=run_id, steps=steps)
    session.add(profile)
    session.commit()
    session.refresh(profile)
    return public(profile)


def update_status(
    *, session: Session, run_id: int, pid: int, report: dict[str, Any]
) -> ProfilePublic:
    """What the agent reports: capturing, uploading (with the step range and overhead), failed."""
    profile = get_profile(session=session, run_id=run_id, pid=pid)
    if profile.status in (ProfileStatus.ready, ProfileStatus.failed):
        return public(profile)  # a late or repeated report changes nothing
    profile.status = ProfileStatus(report["status"])
    for name in ("first_step", "last_step", "error", "overhead"):
        if report.get(name) is not None:
            setattr(profile, name, report[name])
    if report.get("bytes") is not None:
        profile.trace_bytes = report["bytes"]
    profile.updated_at = utc_now()
    session.add(profile)
    session.commit()
    session.refresh(profile)
    return public(profile)


def fail(*, session: Session, pid: int, error: str) -> ProfilePublic | None:
    profile = session.get(Profile, pid)
    if profile is None:
        return None
    profile.status = ProfileStatus.failed
    profile.error = error[:2000]
    profile.updated_at = utc_now()
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
    offset: int,
    total: int,
    data: bytes,
    max_bytes: int,
) -> bool:
    """Write one chunk of the trace; True when the trace is complete."""
    profile = get_profile(session=session, run_id=run_id, pid=pid)
    if profile.status != ProfileStatus.uploading:
        raise Conflict(f"profile {pid} is {profile.status}, not uploading")
    if total > max_bytes:
        raise Conflict(f"trace of {total} bytes is over the server's {max_bytes}-byte cap")
    if offset > profile.received_bytes or offset + len(data) > total:
        raise Conflict(f"chunk at {offset} does not follow the {profile.received_bytes} bytes held")
    path = trace_path(data_dir, pid)
    part = path.with_suffix(".pb.part")
    part.parent.mkdir(parents=True, exist_ok=True)
    with open(part, "r+b" if part.exists() else "wb") as file:
        file.seek(offset)
        file.write(data)
    profile.received_bytes = max(profile.received_bytes, offset + len(data))
    profile.trace_bytes = total
    profile.updated_at = utc_now()
    session.add(profile)
    session.commit()
    if profile.received_bytes < total:
        return False
    part.replace(path)
    return True


def stoker_input_share(*, session: Session, run_id: int, first: int, last: int) -> float | None:
    """Stoker's measured input wait over the captured steps (rank 0), as a share of their
    time; None until all of them are stored."""
    count, waited, spent = session.exec(
        select(func.count(), func.sum(Step.wait), func.sum(Step.dur)).where(
            Step.run_id == run_id, Step.rank == 0, Step.step >= first, Step.step <= last
        )
    ).one()
    if count < last - first + 1 or waited is None or not spent:
        return None
    return waited / spent


def finish(
    *,
    session: Session,
    pid: int,
    analysis: dict[str, Any],
    profiler_share: float | None,
    steps: tuple[int, int] | None,
    data_dir: Path,
    quota_bytes: int,
) -> ProfilePublic:
    """The analysis is in: the profile is ready, with Stoker's own share beside the profiler's,
    and in the same commit the oldest traces beyond the quota are evicted.

    `steps` narrows Stoker's share to the steps the profiler analysed (it drops partial ones).
    """
    profile = session.get(Profile, pid)
    assert profile is not None
    if steps is not None:
        analysis = {**analysis, "step_range": list(steps)}
    first, last = steps or (profile.first_step, profile.last_step)
    if first is not None and last is not None:
        profile.input_share_stoker = stoker_input_share(
            session=session, run_id=profile.run_id, first=first, last=last
        )
    profile.analysis = analysis
    profile.input_share_profiler = profiler_share
    profile.status = ProfileStatus.ready
    profile.updated_at = utc_now()
    session.add(profile)
    evict_beyond_quota(session=session, data_dir=data_dir, quota_bytes=quota_bytes)
    session.refresh(profile)
    return public(profile)


def evict_beyond_quota(*, session: Session, data_dir: Path, quota_bytes: int) -> list[int]:
    """Delete the oldest stored traces until the rest fit in `quota_bytes`."""
    rows = session.exec(
        select(Profile).where(Profile.status == ProfileStatus.ready, ~col(Profile.trace_evicted))
        .order_by(col(Profile.id).desc())
    ).all()  # fmt: skip
    kept, evicted = 0, []
    for row in rows:
        kept += row.trace_bytes or 0
        if kept > quota_bytes:
            assert row.id is not None
            shutil.rmtree(trace_path(data_dir, row.id).parent, ignore_errors=True)
            row.trace_evicted = True
            session.add(row)
            evicted.append(row.id)
    session.commit()
    return evicted
