"""Issue 19's profile of several workers, in the store: a profile follows its workers, and a
worker the server presumed gone may still deliver its (spooled) trace later."""

from pathlib import Path

import pytest
from sqlmodel import Session

from backend.core.db import make_engine
from backend.core.models import ProfileStatus
from backend.core.settings import Settings
from backend.ingest import profiles as store
from backend.ingest.protocol import Hello
from backend.ingest.store import open_run

pytestmark = pytest.mark.parametrize("database", ["sqlite"], indirect=True)


@pytest.fixture
def session(tmp_path: Path, database: str) -> Session:
    engine = make_engine(Settings(data_dir=tmp_path, database_url=database))
    with Session(engine, expire_on_commit=False) as session:
        yield session


def _run(session: Session) -> int:
    hello = Hello(type="hello", protocol=1, run_key="profile-workers-run", host="h")
    run, _ = open_run(session=session, hello=hello)
    assert run.id is not None
    return run.id


def _report(session: Session, run_id: int, pid: int, rank: int, **report: object):
    return store.update_status(session=session, run_id=run_id, pid=pid, rank=rank, report=report)


def _upload(session: Session, tmp_path: Path, run_id: int, pid: int, rank: int) -> bool:
    data = b"trace of rank %d" % rank
    _report(session, run_id, pid, rank, status="uploading", bytes=len(data), first_step=10)
    complete, settled = store.store_chunk(
        session=session, data_dir=tmp_path, run_id=run_id, pid=pid, rank=rank,
        offset=0, total=len(data), data=data, max_bytes=2**20,
    )  # fmt: skip
    assert complete
    return settled


def test_profile_of_two_workers_settles_once_both_reported(
    session: Session, tmp_path: Path
) -> None:
    run_id = _run(session)
    profile = store.create_profile(
        session=session, run_id=run_id, steps=5, stale_after_s=600, ranks=[0, 1]
    )
    assert profile.status == "requested" and [w.rank for w in profile.workers] == [0, 1]
    shown, _ = _report(session, run_id, profile.id, 1, status="capturing", first_step=12)
    assert shown.status == "capturing" and shown.first_step == 12  # rank 0 has none yet
    assert not _upload(session, tmp_path, run_id, profile.id, 0)  # rank 1 still capturing
    shown, settled = _report(
        session, run_id, profile.id, 1, status="failed", error="profile failed: no profiler"
    )
    assert settled and shown.status == "uploading"  # analysed next, with rank 0's trace
    assert shown.first_step == 10 and shown.error is None
    assert [w.status for w in shown.workers] == ["ready", "failed"]
    assert set(store.stored_traces(session=session, pid=profile.id, data_dir=tmp_path)) == {0}


def test_worker_presumed_gone_delivers_its_trace_later_and_the_profile_becomes_ready(
    session: Session, tmp_path: Path
) -> None:
    run_id = _run(session)
    first = store.create_profile(
        session=session, run_id=run_id, steps=5, stale_after_s=600, ranks=[0]
    )
    _report(session, run_id, first.id, 0, status="capturing", first_step=3)
    # A new request once the capture is stale (its agent went away with the server):
    second = store.create_profile(
        session=session, run_id=run_id, steps=5, stale_after_s=0, ranks=[0]
    )
    stale = store.public(store.get_profile(session=session, run_id=run_id, pid=first.id))
    assert stale.status == "failed" and stale.workers[0].lost
    assert "no word from the agent" in (stale.error or "")
    # Its trace arrives from the spool much later, while the new capture is in progress.
    assert _upload(session, tmp_path, run_id, first.id, 0)
    late = store.public(store.get_profile(session=session, run_id=run_id, pid=first.id))
    assert late.status == "uploading" and not late.workers[0].lost and late.error is None
    assert late.workers[0].status == ProfileStatus.ready
    assert store.get_profile(session=session, run_id=run_id, pid=second.id).status == "requested"


def test_failure_the_agent_reported_stays_failed(session: Session, tmp_path: Path) -> None:
    run_id = _run(session)
    profile = store.create_profile(
        session=session, run_id=run_id, steps=5, stale_after_s=600, ranks=[0]
    )
    shown, _ = _report(session, run_id, profile.id, 0, status="failed", error="profile failed: x")
    assert shown.status == "failed" and shown.error == "profile failed: x"
    again, settled = _report(session, run_id, profile.id, 0, status="uploading", bytes=3)
    assert again.status == "failed" and not settled
    with pytest.raises(store.Conflict):
        store.store_chunk(
            session=session, data_dir=tmp_path, run_id=run_id, pid=profile.id, rank=0,
            offset=0, total=3, data=b"abc", max_bytes=2**20,
        )  # fmt: skip
    with pytest.raises(store.ProfileNotFound):  # a rank the profile did not ask
        _report(session, run_id, profile.id, 7, status="capturing")
