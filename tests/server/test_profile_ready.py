"""A profile is `ready` only once everything shown with it is computed: its analysis and
Stoker's own input share over the same steps, although the agent's steps arrive after its
trace."""

import asyncio
import threading
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from sqlmodel import Session

from stoker_server.api import profile_captures as captures
from stoker_server.api import profiles as api
from stoker_server.ingest import profiles as store
from stoker_server.ingest.group_rows import GroupRows
from stoker_server.live.agents import ConnectedAgents
from tests.harness.support import run_coroutine
from tests.server.test_profile_commands import GUARD_S, _Agent, _run, _state

FIRST, LAST = 3, 7  # the captured steps


@pytest.mark.parametrize("database", ["sqlite"], indirect=True)
def test_profile_is_ready_only_with_stokers_share_over_steps_stored_after_the_trace(
    tmp_path: Path, database: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    analysed = threading.Event()

    def analyse(
        paths: list[Path], limits: object = None
    ) -> tuple[dict[str, Any], float, tuple[int, int]]:
        analysed.set()
        return {"available": True, "steps": []}, 0.25, (FIRST, LAST)

    monkeypatch.setattr(captures, "analyse", analyse)

    async def main() -> None:
        agents = ConnectedAgents()
        state = _state(tmp_path, database, agents)
        announced = state.announced
        run_id = _run(state)
        agents.attach(run_id, _Agent(0).link)  # the worker is still connected
        writer = state.writer
        pid = (
            await writer.run(
                store.create_profile, run_id=run_id, steps=5, stale_after_s=600, ranks=[0]
            )
        ).id
        data = b"trace"
        report = {"status": "uploading", "bytes": len(data), "first_step": FIRST,
                  "last_step": LAST}  # fmt: skip
        await writer.run(store.update_status, run_id=run_id, pid=pid, rank=0, report=report)
        _, settled = await writer.run(
            store.store_chunk, data_dir=tmp_path, run_id=run_id, pid=pid, rank=0,
            offset=0, total=len(data), data=data, max_bytes=2**20,
        )  # fmt: skip
        assert settled
        state.profiles.start_analysis(pid)
        assert await asyncio.to_thread(analysed.wait, GUARD_S)

        def read() -> Any:
            with Session(state.engine) as session:
                return api.read_profile(run_id, pid, session)

        # The analysis is in, the steps are not: a client reading now must not see `ready`
        # (before, it saw ready with input_share_stoker null). Some turns of the loop give
        # the analysis the time to finish if it does not wait.
        for _ in range(20):
            await asyncio.sleep(0.01)
        assert read().status != "ready"
        assert not any(m["profile"]["status"] == "ready" for m in announced)

        # The agent's steps arrive: 10 ms of wait in each 40 ms step.
        with Session(state.engine) as session:
            step = np.arange(FIRST, LAST + 1)
            rows = GroupRows(session.connection())
            rows.insert_steps(
                run_id=run_id, rank=0, step=step, t=1.7e9 + step, dur=np.full(len(step), 0.04),
                wait=np.full(len(step), 0.01), batch_size=None,
            )  # fmt: skip
            rows.finish()
            session.commit()

        async def settled() -> None:
            while state.profiles.analyses.running(pid):
                await asyncio.sleep(0.01)

        await asyncio.wait_for(settled(), GUARD_S)
        ready = [m["profile"] for m in announced if m["profile"]["status"] == "ready"]
        assert ready and all(p["input_share_stoker"] == pytest.approx(0.25) for p in ready)
        profile = read()
        assert profile.status == "ready" and profile.input_share_stoker == pytest.approx(0.25)
        assert profile.workers[0].input_share_stoker == pytest.approx(0.25)

    run_coroutine(main())


@pytest.mark.parametrize("database", ["sqlite"], indirect=True)
def test_a_worker_that_left_is_not_waited_for(
    tmp_path: Path, database: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    analysed = ({"available": True}, 0.25, (FIRST, LAST))
    monkeypatch.setattr(captures, "analyse", lambda paths, limits=None: analysed)
    monkeypatch.setattr(captures, "STEPS_GRACE_S", 100 * GUARD_S)  # waited for, the test hangs

    async def main() -> None:
        state = _state(tmp_path, database, ConnectedAgents())  # no agent connected
        run_id = _run(state)
        writer = state.writer
        pid = (
            await writer.run(
                store.create_profile, run_id=run_id, steps=5, stale_after_s=600, ranks=[0]
            )
        ).id
        data = b"trace"
        report = {"status": "uploading", "bytes": len(data), "first_step": FIRST}
        await writer.run(store.update_status, run_id=run_id, pid=pid, rank=0, report=report)
        await writer.run(
            store.store_chunk, data_dir=tmp_path, run_id=run_id, pid=pid, rank=0,
            offset=0, total=len(data), data=data, max_bytes=2**20,
        )  # fmt: skip
        state.profiles.start_analysis(pid)

        async def settled() -> None:
            while state.profiles.analyses.running(pid):
                await asyncio.sleep(0.01)

        # Nothing is waited for from a worker that is gone (its steps never come).
        await asyncio.wait_for(settled(), GUARD_S)
        with Session(state.engine) as session:
            profile = api.read_profile(run_id, pid, session)
        assert profile.status == "ready" and profile.input_share_stoker is None

    run_coroutine(main())
