"""A profile of several workers, in the store: a profile follows its workers, and a
worker the server presumed gone may still deliver its (spooled) trace later."""

from pathlib import Path

import pytest
from sqlmodel import Session

from stoker_server.core.db import make_engine
from stoker_server.core.models import ProfileStatus
from stoker_server.core.settings import Settings
from stoker_server.ingest import profiles as store
from stoker_server.ingest.agent_writes import open_run
from stoker_server.ingest.protocol import Hello

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


def test_worker_missed_at_request_time_leaves_the_others_requested(session: Session) -> None:
    run_id = _run(session)
    profile = store.create_profile(
        session=session, run_id=run_id, steps=5, stale_after_s=600, ranks=[0, 1, 2]
    )
    missed = store.fail(session=session, pid=profile.id, error="went away", ranks=[1])
    assert missed is not None and missed.status == "requested"  # not capturing
    assert [w.status for w in missed.workers] == ["requested", "failed", "requested"]
    shown, _ = _report(session, run_id, profile.id, 0, status="capturing")
    assert shown.status == "capturing"


def test_stale_profile_with_traces_in_is_analysed_with_its_lost_workers_marked(
    session: Session, tmp_path: Path
) -> None:
    run_id = _run(session)
    first = store.create_profile(
        session=session, run_id=run_id, steps=5, stale_after_s=600, ranks=[0, 1]
    )
    assert not _upload(session, tmp_path, run_id, first.id, 0)
    _report(session, run_id, first.id, 1, status="capturing")  # then never heard of again
    store.create_profile(session=session, run_id=run_id, steps=5, stale_after_s=0, ranks=[0])
    stale = store.public(store.get_profile(session=session, run_id=run_id, pid=first.id))
    assert stale.status == "uploading" and stale.error is None  # not failed: rank 0's is in
    assert [(w.status, w.lost) for w in stale.workers] == [("ready", False), ("failed", True)]
    assert store.awaiting_analysis(session=session, run_id=run_id) == [first.id]
    paths = store.stored_traces(session=session, pid=first.id, data_dir=tmp_path)
    assert set(paths) == {0}
    analysed = ({"available": False, "message": "no xprof"}, None, None)
    ready = store.finish(
        session=session, pid=first.id, analysis=analysed[0], profiler_share=None, steps=None,
        data_dir=tmp_path, quota_bytes=2**30, per_worker={0: analysed},
    )  # fmt: skip
    assert ready.status == "ready" and ready.workers[1].lost
    assert store.awaiting_analysis(session=session, run_id=run_id) == []


def test_quota_counts_every_profile_with_stored_traces(session: Session, tmp_path: Path) -> None:
    run_id = _run(session)
    analysed = ({"available": False, "message": "no xprof"}, None, None)

    def new() -> int:
        return store.create_profile(
            session=session, run_id=run_id, steps=5, stale_after_s=600, ranks=[0]
        ).id

    failed = new()  # its trace is in, its analysis failed: the trace stays on disk
    assert _upload(session, tmp_path, run_id, failed, 0)
    store.fail(session=session, pid=failed, error="profile failed: analysis: boom")
    ready = new()
    assert _upload(session, tmp_path, run_id, ready, 0)
    store.finish(
        session=session, pid=ready, analysis=analysed[0], profiler_share=None, steps=None,
        data_dir=tmp_path, quota_bytes=2**30, per_worker={0: analysed},
    )  # fmt: skip
    uploading = new()  # newest, in progress: counted, never evicted
    _report(session, run_id, uploading, 0, status="uploading", bytes=64)
    store.store_chunk(
        session=session, data_dir=tmp_path, run_id=run_id, pid=uploading, rank=0,
        offset=0, total=64, data=b"x" * 32, max_bytes=2**20,
    )  # fmt: skip
    size = len(b"trace of rank 0")
    evicted = store.evict_beyond_quota(session=session, data_dir=tmp_path, quota_bytes=32 + size)
    assert evicted == [failed]  # the ready one still fits beside the upload in progress
    assert not store.trace_path(tmp_path, failed).parent.exists()
    assert store.trace_path(tmp_path, ready).exists()
    assert store.evict_beyond_quota(session=session, data_dir=tmp_path, quota_bytes=1) == [ready]
    assert store.trace_path(tmp_path, uploading).with_suffix(".pb.part").exists()
    assert not store.get_profile(session=session, run_id=run_id, pid=uploading).trace_evicted


def test_trace_whose_last_commit_failed_is_completed_by_the_resent_chunk(
    session: Session, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    run_id = _run(session)
    pid = store.create_profile(
        session=session, run_id=run_id, steps=5, stale_after_s=600, ranks=[0]
    ).id
    data = bytes(range(1, 201))
    _report(session, run_id, pid, 0, status="uploading", bytes=len(data))

    def chunk(offset: int, part: bytes) -> tuple[bool, bool]:
        return store.store_chunk(
            session=session, data_dir=tmp_path, run_id=run_id, pid=pid, rank=0,
            offset=offset, total=len(data), data=part, max_bytes=2**20,
        )  # fmt: skip

    assert chunk(0, data[:120]) == (False, False)
    commit = session.commit

    def failing() -> None:
        monkeypatch.setattr(session, "commit", commit)
        raise RuntimeError("database went away")

    monkeypatch.setattr(session, "commit", failing)
    with pytest.raises(RuntimeError):
        chunk(120, data[120:])
    session.rollback()
    worker = store.workers_of(store.get_profile(session=session, run_id=run_id, pid=pid))[0]
    assert worker["status"] == "uploading" and worker["received_bytes"] == 120
    assert not store.trace_path(tmp_path, pid).exists()  # not renamed without its row
    assert chunk(120, data[120:]) == (True, True)  # the agent sends it again
    assert store.trace_path(tmp_path, pid).read_bytes() == data  # not zeros under the tail


def test_lost_worker_of_an_evicted_profile_is_not_revived(session: Session, tmp_path: Path) -> None:
    run_id = _run(session)
    pid = store.create_profile(
        session=session, run_id=run_id, steps=5, stale_after_s=600, ranks=[0, 1]
    ).id
    assert not _upload(session, tmp_path, run_id, pid, 0)
    store.create_profile(session=session, run_id=run_id, steps=5, stale_after_s=0, ranks=[0])
    analysed = ({"available": False, "message": "no xprof"}, None, None)
    evicted = store.finish(
        session=session, pid=pid, analysis=analysed[0], profiler_share=None, steps=None,
        data_dir=tmp_path, quota_bytes=1, per_worker={0: analysed},
    )  # fmt: skip
    assert evicted.status == "ready" and evicted.trace_evicted
    late, settled = _report(session, run_id, pid, 1, status="uploading", bytes=3)
    assert not settled and late.workers[1].status == "failed" and late.workers[1].lost
    with pytest.raises(store.Conflict):  # refused for good: the agent drops it
        store.store_chunk(
            session=session, data_dir=tmp_path, run_id=run_id, pid=pid, rank=1,
            offset=0, total=3, data=b"abc", max_bytes=2**20,
        )  # fmt: skip
    assert not store.trace_path(tmp_path, pid, 1).parent.exists()


def test_a_capture_its_worker_never_started_fails_when_that_worker_ends(
    session: Session, tmp_path: Path
) -> None:
    """Issue 38: a command that reached a run's agent as its training ended (the process went
    on to its next run) left the profile `requested` for good. The worker's end settles it."""
    from stoker_server.core.models import RunStatus
    from stoker_server.ingest.agent_writes import end_run

    run_id = _run(session)
    profile = store.create_profile(
        session=session, run_id=run_id, steps=5, stale_after_s=600, ranks=[0, 1]
    )
    _report(session, run_id, profile.id, 1, status="capturing", first_step=7)
    end_run(session=session, run_id=run_id, status=RunStatus.finished, rank=0)
    shown = store.public(store.get_profile(session=session, run_id=run_id, pid=profile.id))
    assert [(w.rank, w.status) for w in shown.workers] == [(0, "failed"), (1, "capturing")]
    assert shown.workers[0].error == store.ENDED_BEFORE_START and shown.workers[0].lost
    assert shown.status == "capturing"  # rank 1 still captures; it ends with its own trace
    # Rank 0's "capturing" report was on its way after all: it revives the worker.
    revived, _ = _report(session, run_id, profile.id, 0, status="capturing", first_step=9)
    assert revived.workers[0].status == "capturing" and not revived.workers[0].lost
    assert _upload(session, tmp_path, run_id, profile.id, 0) is False
    assert _upload(session, tmp_path, run_id, profile.id, 1) is True  # both in: analysed next


def test_a_run_that_ends_with_its_capture_unstarted_fails_it_with_the_reason(
    session: Session,
) -> None:
    from stoker_server.core.models import RunStatus
    from stoker_server.ingest.agent_writes import end_run

    run_id = _run(session)
    profile = store.create_profile(
        session=session, run_id=run_id, steps=5, stale_after_s=600, ranks=[0]
    )
    end_run(session=session, run_id=run_id, status=RunStatus.finished, rank=0)
    shown = store.public(store.get_profile(session=session, run_id=run_id, pid=profile.id))
    assert shown.status == "failed" and shown.error == store.ENDED_BEFORE_START
