"""Diagnosis against a real `stoker serve`: verdicts from measured waits sent over the real
agent WebSocket, live pushes, stored events, starvation marks, stall detection."""

import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from stoker_server.diagnosis.verdict import LOW_UTIL_PCT
from tests.conftest import DATABASES
from tests.harness.detect_support import FAST_DETECTORS, LiveListener, ScriptedAgent
from tests.harness.support import ServerProcess, wait_for

pytestmark = pytest.mark.parametrize("database", DATABASES, indirect=True)


@pytest.fixture
def fast_server(tmp_path: Path, database: str) -> Iterator[ServerProcess]:
    env = {**FAST_DETECTORS, "STOKER_STALL_MIN_S": "1", "STOKER_STALL_STEP_FACTOR": "20",
           "STOKER_DATABASE_URL": database}  # fmt: skip
    process = ServerProcess(data_dir=tmp_path / "server", env=env).start()
    yield process
    process.stop()


def _verdict(server: ServerProcess, run_id: int) -> str:
    return server.get(f"/api/v1/runs/{run_id}/diagnosis")["verdict"]


def test_measured_wait_verdict_is_pushed_live_stored_and_follows_the_window(
    fast_server: ServerProcess,
) -> None:
    live = LiveListener(fast_server)
    agent = ScriptedAgent(fast_server)
    try:
        agent.steps(40, dur=0.05, wait=0.02)  # 40 % of every step waits for input
        starved = wait_for(
            lambda: live.of_type(
                "verdict",
                lambda m: (
                    m["run_id"] == agent.run_id
                    and m["diagnosis"]["verdict"] == "highly_input_bound"
                ),
            ),
            what="a live highly_input_bound verdict",
        )[0]["diagnosis"]
        assert starved["source"] == "measured"
        assert starved["input_wait_share"] == pytest.approx(0.4, rel=1e-3)
        assert starved["window_s"] == 30
        assert any("40.0 %" in e["text"] for e in starved["evidence"])
        assert starved["advice"]

        rest = fast_server.get(f"/api/v1/runs/{agent.run_id}/diagnosis")
        assert rest["verdict"] == "highly_input_bound"

        # 40 s of fed steps (agent clock) push the starved ones out of the 30 s window.
        agent.steps(800, dur=0.05, wait=0.0005)
        wait_for(
            lambda: _verdict(fast_server, agent.run_id) == "not_input_bound",
            what="the verdict to follow the window",
        )

        def stored_change() -> list[dict] | None:
            """The verdict events once the last is the fed verdict: the REST verdict is judged
            at the request, and the tick stores the change a moment later."""
            path = f"/api/v1/runs/{agent.run_id}/events"
            events = fast_server.get(path, kind="verdict")["data"]
            return events if events and events[-1]["data"]["verdict"] == "not_input_bound" else None

        events = wait_for(stored_change, what="the change stored as an event")
        verdicts = [e["data"]["verdict"] for e in events]
        # A tick may catch the window mid-slide (moderately): first and last are what count.
        assert verdicts[0] == "highly_input_bound" and verdicts[-1] == "not_input_bound"
        # The first change may come from the run's opening verdict ("verdict not enough
        # data → highly input-bound (…)") when a tick fell before the first window filled.
        assert (
            "highly input-bound (input wait 40.0 % of step time over the last 30 s)"
            in (events[0]["message"])
        )
        wait_for(
            lambda: live.of_type(
                "event", lambda m: m["run_id"] == agent.run_id and m["event"]["kind"] == "verdict"
            ),
            what="verdict events pushed live",
        )
    finally:
        agent.close()
        live.close()


def test_moderate_wait_is_moderately_input_bound(fast_server: ServerProcess) -> None:
    agent = ScriptedAgent(fast_server)
    try:
        agent.steps(50, dur=0.1, wait=0.01)
        wait_for(
            lambda: _verdict(fast_server, agent.run_id) == "moderately_input_bound",
            what="moderately_input_bound",
        )
    finally:
        agent.close()


def test_starvation_marks_return_the_starved_step_ranges(fast_server: ServerProcess) -> None:
    n = 100
    starved = set(range(20, 40)) | set(range(60, 70))
    steps = list(range(n))
    batch = {
        "type": "batch",
        "seq": 1,
        "steps": {
            "step": steps,
            "t": [1.7e9 + s * 0.1 for s in steps],
            "dur": [0.1] * n,
            "wait": [0.05 if s in starved else 0.001 for s in steps],
        },
    }
    hello = {"type": "hello", "protocol": 1, "run_key": uuid.uuid4().hex, "name": "marks"}
    response = httpx.post(
        f"{fast_server.url}/api/v1/ingest",
        json={"hello": hello, "batches": [batch], "end": {"type": "end"}},
        timeout=30,
    )
    run_id = response.json()["run_id"]
    marks = fast_server.get(f"/api/v1/runs/{run_id}/starvation", threshold=0.2)
    assert [(r["start"], r["end"]) for r in marks["ranges"]] == [(20, 39), (60, 69)]
    assert marks["starved_steps"] == 30 and marks["measured_steps"] == 100
    assert marks["ranges"][0]["wait_share"] == pytest.approx(0.5)
    merged = fast_server.get(f"/api/v1/runs/{run_id}/starvation", threshold=0.2, max_gap=20)
    assert [(r["start"], r["end"]) for r in merged["ranges"]] == [(20, 69)]
    # A finished run's verdict is its whole run's figure, the one its summary shows; with an
    # explicit window, over the last window of its steps.
    diagnosis = fast_server.get(f"/api/v1/runs/{run_id}/diagnosis")
    summary = fast_server.get(f"/api/v1/runs/{run_id}")["summary"]
    assert diagnosis["source"] == "measured" and diagnosis["window_label"] == "whole run"
    assert diagnosis["input_wait_share"] == summary["input_wait_share"]
    assert diagnosis["verdict"] == summary["verdict"] == "moderately_input_bound"
    assert fast_server.get(f"/api/v1/runs/{run_id}/diagnosis", window_s=3)["verdict"] == (
        "not_input_bound"
    )


def test_custom_loop_that_stops_stepping_while_connected_is_stalled(
    fast_server: ServerProcess,
) -> None:
    """A `Monitor` loop whose body hangs (as on a hung collective) while the process lives."""
    import threading

    from trainer_agent import Monitor

    live = LiveListener(fast_server)
    release = threading.Event()
    hang_at = 50

    def train() -> None:
        with Monitor(run_name="custom-loop", server=fast_server.url) as mon:
            for step, _batch in enumerate(mon.iterate(range(80))):
                sum(i * i for i in range(20_000))  # the "training step"
                if step == hang_at:
                    release.wait(120)  # hangs until the test lets it go

    trainer = threading.Thread(target=train, daemon=True)
    trainer.start()
    try:
        run_id = wait_for(
            lambda: next(
                (r["id"] for r in fast_server.get("/api/v1/runs")["data"]
                 if r["name"] == "custom-loop" and r["summary"]["steps"] >= hang_at),
                None,
            ),
            what="the loop's steps stored",
        )  # fmt: skip
        onset = time.monotonic()
        stalled = wait_for(
            lambda: live.of_type(
                "verdict",
                lambda m: m["run_id"] == run_id and m["diagnosis"]["verdict"] == "stalled",
            ),
            what="a stalled verdict",
        )[0]["diagnosis"]
        print(f"stall flagged {time.monotonic() - onset:.2f} s after the steps were stored")
        assert any(e["key"] == "seconds_without_steps" for e in stalled["evidence"])
        assert any(e["key"] == "agent_connected" for e in stalled["evidence"])
        # The advice follows the GPU readings: none here, unless an earlier test in this
        # process loaded the fake NVML, whose idle GPU then points at a blocked pipeline.
        advice = " ".join(stalled["advice"])
        util = next((e["value"] for e in stalled["evidence"] if e["key"] == "gpu_util_pct"), None)
        if util is None:
            assert "hung collective" in advice
        elif util < LOW_UTIL_PCT:
            assert "input pipeline may be blocked" in advice
        else:
            assert "typical of a hung collective" in advice
        firing = wait_for(
            lambda: fast_server.get("/api/v1/alerts", run_id=run_id, state="firing")["data"],
            what="the default stalled alert firing",
        )
        assert firing[0]["rule_name"].startswith("Training stalled")

        release.set()  # the loop steps again, then finishes
        wait_for(lambda: _verdict(fast_server, run_id) != "stalled", what="the stall to clear")
        wait_for(
            lambda: fast_server.get("/api/v1/alerts", run_id=run_id, state="resolved")["data"],
            what="the stalled alert resolved",
        )
    finally:
        release.set()
        trainer.join(30)
        live.close()
