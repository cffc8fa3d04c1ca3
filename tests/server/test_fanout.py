"""Two server processes on one PostgreSQL: a browser on one sees what an agent sends to the
other (LISTEN/NOTIFY), and an agent on one is told when a browser on the other watches its run."""

import json
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from websockets.sync.client import connect

from tests.harness.support import PostgresServer, ServerProcess
from tests.harness.watch_cycle import watch_cycle
from tests.server.test_ingest_websocket import batch, hello, open_agent, send

pytestmark = pytest.mark.postgres


@pytest.fixture
def two_servers(
    request: pytest.FixtureRequest, tmp_path: Path, postgres_server: PostgresServer
) -> Iterator[tuple[ServerProcess, ServerProcess]]:
    """Two servers on one PostgreSQL (`request.param`: more of their environment)."""
    url = postgres_server.create_database()
    env = {"STOKER_DATABASE_URL": url, **getattr(request, "param", {})}
    env["STOKER_DETECTOR_TICK_S"] = "0.2"
    first = ServerProcess(data_dir=tmp_path / "a", env=env).start()
    second = ServerProcess(data_dir=tmp_path / "b", env=env).start()
    yield first, second
    first.stop()
    second.stop()


def _send_past_commands(agent: Any, frame: dict[str, Any]) -> dict[str, Any]:
    """The server's reply to `frame`, past the commands it sends meanwhile (the watch
    command once the other server's browser subscribed)."""
    reply = send(agent, frame)
    while reply["type"] == "command":
        reply = json.loads(agent.recv(timeout=10))
    return reply


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
                assert _send_past_commands(agent, batch(seq, (seq - 1) * 10))["type"] == "ack"
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


def _next_watch(agent: Any, timeout_s: float = 60) -> bool:
    """The `watched` of the next watch command the agent receives."""
    while True:
        message = json.loads(agent.recv(timeout=timeout_s))
        if message.get("type") == "command" and message.get("name") == "watch":
            return message["watched"]


def test_browser_on_another_server_switches_the_agent_to_live_pace_and_back(
    two_servers: tuple[ServerProcess, ServerProcess],
) -> None:
    ingest_server, view_server = two_servers
    watch_cycle(ingest=ingest_server, view=view_server, run_name="watched-elsewhere")


def test_agent_joining_a_run_watched_on_another_server_is_told_at_once(
    two_servers: tuple[ServerProcess, ServerProcess],
) -> None:
    ingest_server, view_server = two_servers
    key = uuid.uuid4().hex  # one run, two workers
    first, welcome = open_agent(ingest_server, hello(name="joined", run_key=key, rank=0))
    run_id = welcome["run_id"]
    with connect(f"{view_server.ws_url}/api/v1/live") as browser:
        browser.send(json.dumps({"type": "subscribe", "run_id": run_id}))
        assert _next_watch(first) is True  # the ingest server knows of the watch
        # Another worker of the run connects to the ingest server: its first message after
        # the welcome is the watch command.
        second, joined = open_agent(ingest_server, hello(name="joined", run_key=key, rank=1))
        assert joined["type"] == "welcome" and joined["run_id"] == run_id
        message = json.loads(second.recv(timeout=10))
        assert message == {"type": "command", "name": "watch", "watched": True}
    assert _next_watch(first) is False and _next_watch(second) is False
    first.close()
    second.close()


# Renewed twice a second, expired after 2 s (default 3 and 10): the test waits less.
@pytest.mark.parametrize(
    "two_servers", [{"STOKER_WATCH_REFRESH_S": "0.5", "STOKER_WATCH_EXPIRY_S": "2"}], indirect=True
)
def test_watch_of_a_server_that_died_expires(
    two_servers: tuple[ServerProcess, ServerProcess],
) -> None:
    ingest_server, view_server = two_servers
    agent, welcome = open_agent(ingest_server, hello(name="orphaned-watch"))
    with connect(f"{view_server.ws_url}/api/v1/live") as browser:
        browser.send(json.dumps({"type": "subscribe", "run_id": welcome["run_id"]}))
        assert _next_watch(agent) is True
        view_server.kill()  # no unsubscribe, no close: the watch must still end
        assert _next_watch(agent) is False
    agent.close()
