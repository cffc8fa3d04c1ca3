"""Bounded by bytes (issue 39), against a real server: a run's config and environment are
capped; live run messages carry neither; a live client's queue is bounded in bytes; live
connections and subscriptions are capped. And the real agent keeps a run whose config is
too big, leaving out its largest entries."""

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from websockets.exceptions import ConnectionClosed
from websockets.sync.client import connect

from tests.harness.detect_support import first_drop_notice, run_with_a_stalled_reader
from tests.harness.support import ServerProcess, wait_for
from tests.server.test_ingest_websocket import hello

LIMITS = {
    "STOKER_MAX_CONFIG_BYTES": "4KiB",
    "STOKER_MAX_ENVIRONMENT_BYTES": "4KiB",
    "STOKER_LIVE_MAX_CLIENTS": "3",
    "STOKER_LIVE_MAX_SUBSCRIPTIONS": "2",
}


@pytest.fixture(scope="module")
def bounded(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    process = ServerProcess(data_dir=tmp_path_factory.mktemp("bounded"), env=LIMITS).start()
    yield process
    process.stop()


@pytest.mark.parametrize("section", ["config", "environment"])
def test_config_and_environment_over_their_limit_are_refused(
    bounded: ServerProcess, section: str
) -> None:
    name = f"too-big-{section}"
    big = hello(name=name, **{section: {"vocabulary": ["word"] * 1000}})  # ~8 KB as JSON
    response = httpx.post(f"{bounded.url}/api/v1/ingest", json={"hello": big})
    assert response.status_code == 413, response.text
    assert f"the run's {section} is" in response.json()["detail"]
    assert "4096-byte limit" in response.json()["detail"]
    with connect(f"{bounded.ws_url}/api/v1/agent") as ws:
        ws.send(json.dumps(big))
        with pytest.raises(ConnectionClosed) as closed:
            ws.recv(timeout=10)
    assert closed.value.rcvd is not None and closed.value.rcvd.code == 4400
    assert section in closed.value.rcvd.reason
    assert bounded.get("/api/v1/runs", q=name)["count"] == 0
    fits = hello(name=name, **{section: {"vocabulary": ["word"] * 100}})
    assert httpx.post(f"{bounded.url}/api/v1/ingest", json={"hello": fits}).status_code == 200


def test_live_run_messages_carry_no_config_or_environment(bounded: ServerProcess) -> None:
    """Every browser gets every running run's progress: a few hundred bytes each, not up to
    the two sections' limits. The run page reads them over REST."""
    config, environment = {"lr": 0.1, "notes": "x" * 2000}, {"gpu": "H100", "pad": "y" * 2000}
    first = hello(name="before-connect", config=config, environment=environment)
    httpx.post(f"{bounded.url}/api/v1/ingest", json={"hello": first}).raise_for_status()
    with connect(f"{bounded.ws_url}/api/v1/live") as live:
        initial = json.loads(live.recv(timeout=10))
        assert initial["type"] == "run"
        second = hello(name="after-connect", config=config, environment=environment)
        with connect(f"{bounded.ws_url}/api/v1/agent") as agent:
            agent.send(json.dumps(second))
            assert json.loads(agent.recv(timeout=10))["type"] == "welcome"
            run = wait_for(lambda: _run_message(live, "after-connect"), what="the new run")
    for message in (initial["run"], run):
        assert "config" not in message and "environment" not in message
        assert {"id", "name", "status", "summary"} <= set(message)
    stored = bounded.get(f"/api/v1/runs/{run['id']}")
    assert stored["config"] == config and stored["environment"] == environment


def _run_message(live: Any, name: str) -> dict[str, Any] | None:
    message = json.loads(live.recv(timeout=10))
    return message["run"] if message["type"] == "run" and message["run"]["name"] == name else None


def test_live_connections_and_subscriptions_are_capped(bounded: ServerProcess) -> None:
    url = f"{bounded.ws_url}/api/v1/live"
    held = [connect(url).__enter__() for _ in range(3)]
    try:
        with connect(url) as extra, pytest.raises(ConnectionClosed) as closed:
            while True:  # the closing frame follows the accept at once
                extra.recv(timeout=10)
        assert closed.value.rcvd is not None and closed.value.rcvd.code == 1013
        assert "3 live clients at most" in closed.value.rcvd.reason
        client = held[0]
        for run_id in (1, 2, 3):
            client.send(json.dumps({"type": "subscribe", "run_id": run_id}))
        notice = wait_for(lambda: _notice(client), what="the refused subscription's notice")
        assert "run 3 refused" in notice and "2 runs at most" in notice
    finally:
        for socket_ in held:
            socket_.close()
    wait_for(lambda: _live_clients(bounded) == 0, what="the live clients gone")
    with connect(url) as again:  # room again once they left
        assert json.loads(again.recv(timeout=10))["type"] in ("run", "notice")


def _notice(client: Any) -> str | None:
    message = json.loads(client.recv(timeout=10))
    return message["message"] if message["type"] == "notice" else None


def _live_clients(server: ServerProcess) -> float:
    text = httpx.get(f"{server.url}/metrics").text
    line = next(line for line in text.splitlines() if line.startswith("stoker_live_clients_open "))
    return float(line.split()[1])


STEPS_PER_BATCH = 500


def test_a_live_clients_queue_is_bounded_in_bytes(tmp_path: Path) -> None:
    """The count cap is far away (100 000 messages); the 64 KiB byte budget is what drops a
    reader that stopped reading (each steps message is ~25 KB), and it is told so."""
    env = {"STOKER_LIVE_QUEUE_SIZE": "100000", "STOKER_LIVE_CLIENT_MAX_BYTES": "64KiB"}
    server = ServerProcess(data_dir=tmp_path, env=env).start()
    try:
        with run_with_a_stalled_reader(server, "bytes") as (agent, slow):
            batches = 400
            for seq in range(1, batches + 1):
                ack = agent.steps(STEPS_PER_BATCH, dur=0.01, wait=None)
                assert ack == {"type": "ack", "seq": seq}
            assert first_drop_notice(slow, most=3 * batches)["dropped"] > 0
    finally:
        server.stop()


def test_the_agent_leaves_out_the_largest_config_entries_over_the_limit(
    shared_server: ServerProcess,
) -> None:
    """A config over 64 KiB (a vocabulary in it): the run is stored with the other entries,
    and the note says which were left out. Before, the server would have refused the run."""
    from trainer_agent import Monitor

    config = {"lr": 0.01, "vocabulary": ["token"] * 20_000, "layers": 4}
    with Monitor(run_name="big-config", server=shared_server.url, config=config) as mon:
        for _ in mon.iterate(range(5)):
            pass
        assert mon.session is not None
        sender = mon.session.sender
    wait_for(lambda: sender.run_id is not None, what="the run stored")
    run = shared_server.get(f"/api/v1/runs/{sender.run_id}")
    assert run["config"]["lr"] == 0.01 and run["config"]["layers"] == 4
    assert "vocabulary" not in run["config"]
    assert "vocabulary" in run["config"]["_stoker_dropped"]
