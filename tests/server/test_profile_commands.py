"""Profiler captures on the server's side of the agents: a profile command reaches every connected
agent at once, an agent whose socket stalls is not waited for, and a profile whose analysis
is asked for again while it runs (a lost worker's trace came in) is analysed once more."""

import asyncio
import threading
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from sqlmodel import Session

from stoker_server.api import profile_captures as captures
from stoker_server.api import profiles as api
from stoker_server.api.profile_captures import ProfileCaptures
from stoker_server.core.db import make_engine
from stoker_server.core.models import ProfileStatus, Run
from stoker_server.core.settings import Settings
from stoker_server.ingest import profiles as store
from stoker_server.ingest.agent_writes import open_run
from stoker_server.ingest.protocol import Hello
from stoker_server.live.agents import AgentLink, ConnectedAgents
from tests.harness.support import run_coroutine

SQLITE = pytest.mark.parametrize("database", ["sqlite"], indirect=True)
GUARD_S = 60.0  # only against a hang: the tests wait on events, not on time


class _Writer:
    """The writer's `run`, on the event loop's thread (enough for one test at a time)."""

    def __init__(self, engine: Any) -> None:
        self.engine = engine

    async def run(self, fn: Any, /, **kwargs: Any) -> Any:
        with Session(self.engine, expire_on_commit=False) as session:
            return fn(session=session, **kwargs)


def _state(tmp_path: Path, database: str, agents: ConnectedAgents) -> SimpleNamespace:
    """The parts of the app state the profile routes use; what the captures tell browsers
    lands in `announced`."""
    settings = Settings(data_dir=tmp_path, database_url=database)
    engine = make_engine(settings)
    announced: list[dict[str, Any]] = []
    hub = SimpleNamespace(broadcast_here=announced.append)
    writer = _Writer(engine)
    profiles = ProfileCaptures(
        settings=settings,
        engine=engine,
        writer=writer,
        hub=hub,
        agents=agents,  # type: ignore[arg-type]
    )
    return SimpleNamespace(
        settings=settings, engine=engine, writer=writer, agents=agents, profiles=profiles,
        announced=announced,
    )  # fmt: skip


def _run(state: SimpleNamespace) -> int:
    hello = Hello(type="hello", protocol=1, run_key="profile-commands-run", host="h")
    with Session(state.engine, expire_on_commit=False) as session:
        run, _ = open_run(session=session, hello=hello)
    assert run.id is not None
    return run.id


class _Agent:
    """An agent link whose socket takes messages, or stalls (never takes one)."""

    def __init__(self, rank: int, stalls: bool = False) -> None:
        self.stalls = stalls
        self.got: list[dict[str, Any]] = []
        self.link = AgentLink(rank=rank, send=self.send, run_key="k")

    async def send(self, message: dict[str, Any]) -> None:
        if self.stalls:
            await asyncio.Event().wait()
        self.got.append(message)


@SQLITE
def test_a_stalled_agent_holds_up_neither_the_request_nor_the_others(
    tmp_path: Path, database: str
) -> None:
    async def main() -> None:
        agents = ConnectedAgents(send_timeout_s=0.05)
        state = _state(tmp_path, database, agents)
        run_id = _run(state)
        stalled, fine = _Agent(0, stalls=True), _Agent(1)
        agents.attach(run_id, stalled.link)  # first: sent one after the other, it blocks all
        agents.attach(run_id, fine.link)
        with Session(state.engine, expire_on_commit=False) as session:
            run = session.get(Run, run_id)
            assert run is not None
        profile = await asyncio.wait_for(
            api.request_profile(run_id, run, api.ProfileRequest(steps=5), state), GUARD_S
        )
        assert [m["name"] for m in fine.got] == ["profile"] and fine.got[0]["rank"] == 1
        assert [(w.rank, w.status) for w in profile.workers] == [(0, "failed"), (1, "requested")]
        assert "went away" in (profile.workers[0].error or "")
        assert profile.status == "requested"  # the missed worker does not make it capturing

    run_coroutine(main())


def test_watch_command_to_a_stalled_agent_is_given_up(tmp_path: Path) -> None:
    async def main() -> None:
        agents = ConnectedAgents(send_timeout_s=0.05)
        stalled, fine = _Agent(0, stalls=True), _Agent(1)
        agents.attach(7, stalled.link)
        agents.attach(7, fine.link)
        agents.set_watched(7, True)
        telling = list(agents._telling)
        done = await asyncio.wait_for(asyncio.gather(*telling), GUARD_S)
        assert sorted(done) == [False, True]
        assert fine.got == [{"type": "command", "name": "watch", "watched": True}]

    run_coroutine(main())


@SQLITE
def test_trace_that_comes_in_during_the_analysis_is_analysed_after_it(
    tmp_path: Path, database: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    entered, release = threading.Event(), threading.Event()
    analysed: list[list[str]] = []

    def analyse(paths: list[Path], limits: object = None) -> tuple[dict[str, Any], None, None]:
        analysed.append([path.name for path in paths])
        if len(analysed) == 1:
            entered.set()
            assert release.wait(GUARD_S)
        return {"available": False, "message": "no xprof"}, None, None

    monkeypatch.setattr(captures, "analyse", analyse)

    async def main() -> None:
        state = _state(tmp_path, database, ConnectedAgents())
        run_id = _run(state)
        writer = state.writer

        async def upload(pid: int, rank: int) -> bool:
            data = b"trace of rank %d" % rank
            report = {"status": "uploading", "bytes": len(data), "first_step": 3}
            await writer.run(store.update_status, run_id=run_id, pid=pid, rank=rank, report=report)
            _, settled = await writer.run(
                store.store_chunk, data_dir=tmp_path, run_id=run_id, pid=pid, rank=rank,
                offset=0, total=len(data), data=data, max_bytes=2**20,
            )  # fmt: skip
            return settled

        pid = (
            await writer.run(
                store.create_profile, run_id=run_id, steps=5, stale_after_s=600, ranks=[0, 1]
            )
        ).id
        assert not await upload(pid, 0)
        # Rank 1 goes silent; a new capture gives it up (lost) and analyses rank 0's trace.
        await writer.run(store.create_profile, run_id=run_id, steps=5, stale_after_s=0, ranks=[0])
        assert await writer.run(store.awaiting_analysis, run_id=run_id) == [pid]
        state.profiles.start_analysis(pid)
        assert await asyncio.to_thread(entered.wait, GUARD_S)
        # Rank 1's spooled trace arrives while that analysis runs.
        assert await upload(pid, 1)
        state.profiles.start_analysis(pid)
        release.set()

        async def settled() -> None:
            while state.profiles.analyses.running(pid):
                await asyncio.sleep(0.01)

        await asyncio.wait_for(settled(), GUARD_S)
        merged, alone = ["trace.xplane.pb", "worker1.xplane.pb"], [["trace.xplane.pb"]]
        assert analysed == [["trace.xplane.pb"], merged, *alone, ["worker1.xplane.pb"]]
        with Session(state.engine) as session:
            profile = store.public(store.get_profile(session=session, run_id=run_id, pid=pid))
        assert profile.status == ProfileStatus.ready
        assert [(w.status, w.lost, w.analysis.get("message")) for w in profile.workers] == [
            ("ready", False, "no xprof"),
            ("ready", False, "no xprof"),
        ]

    run_coroutine(main())
