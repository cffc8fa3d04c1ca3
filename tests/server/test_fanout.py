"""Two server processes on one PostgreSQL: a browser on one sees what an agent sends to the
other (LISTEN/NOTIFY)."""

import json
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from websockets.sync.client import connect

from tests.harness.support import PostgresServer, ServerProcess
from tests.server.test_ingest_websocket import batch, hello, open_agent, send

pytestmark = pytest.mark.postgres


@pytest.fixture
def two_servers(
    tmp_path: Path, postgres_server: PostgresServer
) -> Iterator[tuple[ServerProcess, ServerProcess]]:
    url = postgres_server.create_database()
    env = {"STOKER_DATABASE_URL": url}
    env["STOKER_DETECTOR_TICK_S"] = "0.2"
    first = ServerProcess(data_dir=tmp_path / "a", env=env).start()
    second = ServerProcess(data_dir=tmp_path / "b", env=env).start()
    yield first, second
    first.stop()
    second.stop()


def test_browser_on_one_server_sees_steps_sent_to_another(
    two_servers: tuple[ServerProcess, ServerProcess],
) -> None:
    ingest_server, view_server = two_servers
    agent, welcome = open_agent(ingest_server, hello(name="shared"))
    run_id = welcome["run_id"]
    seen_steps: list[int] = []
    seen_run = False
    with connect(f"{view_server.ws_url}/api/v1/live") as browser:
        browser.send(json.dumps({"type": "subscribe", "run_id": run_id}))
        deadline = time.monotonic() + 30
        seq = 0
        # Keep streaming until the other server's browser has received steps (the subscribe
        # may land after the first batches; those are then fetched over REST, not pushed).
        while not (seen_steps and seen_run):
            assert time.monotonic() < deadline, "no live updates reached the other server"
            if not seen_steps:
                seq += 1
                assert send(agent, batch(seq, (seq - 1) * 10))["type"] == "ack"
            try:
                while not (seen_steps and seen_run):
                    message = json.loads(browser.recv(timeout=0.5))
                    if message["type"] == "run" and message["run"]["id"] == run_id:
                        seen_run = seen_run or message["run"]["summary"]["steps"] > 0
                    if message["type"] == "steps" and message["run_id"] == run_id:
                        seen_steps = seen_steps or message["data"]["step"]
            except TimeoutError:
                continue
        # The run update of a batch is published after its steps: read on until it arrives.
        while not seen_run:
            assert time.monotonic() < deadline, "no run update reached the other server"
            message = json.loads(browser.recv(timeout=max(0.1, deadline - time.monotonic())))
            if message["type"] == "run" and message["run"]["id"] == run_id:
                seen_run = message["run"]["summary"]["steps"] > 0
    agent.close()
    first = seen_steps[0]
    assert first % 10 == 0 and seen_steps == list(range(first, first + 10))  # one whole batch


def test_browser_on_one_server_sees_verdicts_made_by_another(
    two_servers: tuple[ServerProcess, ServerProcess],
) -> None:
    ingest_server, view_server = two_servers
    with connect(f"{view_server.ws_url}/api/v1/live") as browser:
        agent, welcome = open_agent(ingest_server, hello(name="starved-elsewhere"))
        run_id = welcome["run_id"]
        for seq in range(1, 6):  # half of every step waits for input: highly input-bound
            starved = batch(seq, (seq - 1) * 10)
            starved["steps"]["wait"] = [0.005] * 10
            assert send(agent, starved)["type"] == "ack"
        deadline = time.monotonic() + 30
        while True:
            assert time.monotonic() < deadline, "no verdict reached the other server"
            message = json.loads(browser.recv(timeout=max(0.1, deadline - time.monotonic())))
            if message["type"] == "verdict" and message["run_id"] == run_id:
                break
        agent.close()
    assert message["diagnosis"]["verdict"] == "highly_input_bound"
