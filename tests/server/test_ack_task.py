"""The agent WebSocket's ack task survives an error while publishing a stored batch (issue 39).

It used to publish outside its try: an exception ended the task, the reader then blocked on
the in-flight queue for ever, no ack or close came, and the connection was never reaped (its
run stayed "connected"). Now the connection is closed (1011) and the agent resends. The fault
is handed in as the route's publisher, through FastAPI's dependency overrides, on a real
uvicorn in this process.
"""

import itertools
import json
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from starlette.requests import HTTPConnection
from websockets.exceptions import ConnectionClosed
from websockets.sync.client import connect

from stoker_server.api.publish import BatchPublisher, stored_batch_publisher
from stoker_server.core.models import RunPublic
from stoker_server.core.settings import Settings
from stoker_server.ingest.protocol import Batch
from stoker_server.service.app import create_app
from tests.harness.support import InProcessServer, wait_for
from tests.server.test_ingest_websocket import batch, hello


class FaultyPublisher:
    """Raises on the next `faults` publishes, then publishes as the server does."""

    def __init__(self) -> None:
        self.faults = 0
        self.raised = 0

    def dependency(self, conn: HTTPConnection) -> BatchPublisher:
        real = stored_batch_publisher(conn)

        def publish(run: RunPublic, stored: Batch, rank: int) -> None:
            if self.faults > 0:
                self.faults -= 1
                self.raised += 1
                raise RuntimeError("injected: publishing a stored batch failed")
            real(run, stored, rank)

        return publish


@pytest.fixture(scope="module")
def faulty(
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[tuple[InProcessServer, FaultyPublisher]]:
    app = create_app(Settings(data_dir=tmp_path_factory.mktemp("acks")))
    publisher = FaultyPublisher()
    app.dependency_overrides[stored_batch_publisher] = publisher.dependency
    server = InProcessServer(app).start()
    yield server, publisher
    server.stop()


def _agent_connections(server: InProcessServer) -> int:
    return server.app.state.stoker.agents.total


def test_an_error_while_publishing_closes_the_connection_and_keeps_what_was_stored(
    faulty: tuple[InProcessServer, FaultyPublisher],
) -> None:
    server, publisher = faulty
    publisher.faults = 1
    message = hello(name="publish-fault")
    with connect(f"{server.ws_url}/api/v1/agent") as ws:
        ws.send(json.dumps(message))
        welcome = json.loads(ws.recv(timeout=10))
        ws.send(json.dumps(batch(1, 0)))
        with pytest.raises(ConnectionClosed) as closed:
            ws.recv(timeout=30)  # no ack: the close
    assert closed.value.rcvd is not None and closed.value.rcvd.code == 1011
    assert "send again" in closed.value.rcvd.reason
    assert publisher.raised == 1
    wait_for(lambda: _agent_connections(server) == 0, what="the connection reaped")
    # The batch was committed before the publish failed: resent, it is a replay, acked.
    with connect(f"{server.ws_url}/api/v1/agent") as ws:
        ws.send(json.dumps(message))
        again = json.loads(ws.recv(timeout=10))
        assert again["run_id"] == welcome["run_id"] and again["last_seq"] == 1
        ws.send(json.dumps(batch(1, 0)))
        assert json.loads(ws.recv(timeout=10)) == {"type": "ack", "seq": 1}
        ws.send(json.dumps(batch(2, 10)))
        assert json.loads(ws.recv(timeout=10)) == {"type": "ack", "seq": 2}
    steps = server.get(f"/api/v1/runs/{welcome['run_id']}/steps", max_points=1000)["step"]
    assert steps == list(range(20))


def test_the_real_agent_resends_after_the_connection_is_closed(
    faulty: tuple[InProcessServer, FaultyPublisher],
    monkeypatch: pytest.MonkeyPatch,
    agent_spool_dir: Path,
) -> None:
    """A Monitor's loop over the WebSocket: one publish fails mid-run; the agent reconnects,
    resends what was not acknowledged, and every step is stored once; nothing is dropped."""
    from trainer_agent import Monitor

    server, publisher = faulty
    monkeypatch.setenv("STOKER_FLUSH_INTERVAL_S", "0.05")
    publisher.raised = 0
    deadline = time.monotonic() + 120
    with Monitor(run_name="agent-resends", server=server.url) as mon:
        assert mon.session is not None
        sender = mon.session.sender
        for step in mon.iterate(itertools.count()):
            time.sleep(0.002)  # the step's own work
            if step == 0:
                wait_for(sender.connected.is_set, what="the agent's WebSocket")
                publisher.faults = 1  # the next stored batch's publish fails
            if publisher.raised and sender.connected.is_set() and sender.acked_batches >= 3:
                break
            assert time.monotonic() < deadline, "the agent did not reconnect after the close"
        iterated = step + 1
    assert sender.transport_name == "websocket"
    assert sender.dropped_rows == 0 and sender.rejected_rows == 0
    run_id = sender.run_id
    run = wait_for(
        lambda: (r := server.get(f"/api/v1/runs/{run_id}"))["status"] != "running" and r,
        what="the run's end",
    )
    assert run["status"] == "finished"
    steps = server.get(f"/api/v1/runs/{run_id}/steps", max_points=100_000)["step"]
    assert steps == list(range(len(steps))) and len(steps) >= iterated - 1
    assert publisher.raised == 1
    wait_for(lambda: _agent_connections(server) == 0, what="every agent connection reaped")
