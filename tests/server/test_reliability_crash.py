"""Server crash under ingest load: nothing acknowledged is lost, replay never duplicates."""

import json
import threading
import uuid
from typing import Any

from websockets.sync.client import connect

from tests.harness.support import ServerProcess, wait_for

ROWS_PER_BATCH = 200


def _batch(seq: int) -> dict[str, Any]:
    first = (seq - 1) * ROWS_PER_BATCH
    steps = list(range(first, first + ROWS_PER_BATCH))
    return {
        "type": "batch",
        "seq": seq,
        "steps": {"step": steps, "t": [1.7e9 + s for s in steps], "dur": [0.01] * len(steps)},
    }


class LoadAgent(threading.Thread):
    """Sends batches as fast as they are acknowledged until the server goes away."""

    def __init__(self, url: str) -> None:
        super().__init__(daemon=True)
        self.url = url
        self.hello = {"type": "hello", "protocol": 1, "run_key": uuid.uuid4().hex,
                      "name": "crash-load", "host": "load"}  # fmt: skip
        self.acked: list[int] = []
        self.run_id: int | None = None

    def run(self) -> None:
        try:
            with connect(f"{self.url}/api/v1/agent") as ws:
                ws.send(json.dumps(self.hello))
                self.run_id = json.loads(ws.recv(timeout=10))["run_id"]
                seq = 0
                while True:
                    seq += 1
                    ws.send(json.dumps(_batch(seq)))
                    reply = json.loads(ws.recv(timeout=10))
                    assert reply == {"type": "ack", "seq": seq}
                    self.acked.append(seq)
        except Exception:
            return  # the server was killed: expected

    def resume_and_finish(self, total_batches: int) -> None:
        with connect(f"{self.url}/api/v1/agent") as ws:
            ws.send(json.dumps(self.hello))
            welcome = json.loads(ws.recv(timeout=10))
            assert welcome["run_id"] == self.run_id
            # The server has at least everything it acknowledged.
            assert welcome["last_seq"] >= max(self.acked)
            # Replay from the last acknowledged batch on, as an agent does after a crash.
            for seq in range(max(self.acked), total_batches + 1):
                ws.send(json.dumps(_batch(seq)))
                assert json.loads(ws.recv(timeout=10))["type"] == "ack"
            ws.send(json.dumps({"type": "end", "status": "finished"}))
            json.loads(ws.recv(timeout=10))


def test_kill_9_under_load_loses_no_acknowledged_row(server: ServerProcess) -> None:
    agents = [LoadAgent(server.ws_url) for _ in range(4)]
    for agent in agents:
        agent.start()
    wait_for(lambda: all(len(a.acked) >= 20 for a in agents), timeout_s=60, what="ingest load")
    server.kill()
    for agent in agents:
        agent.join(timeout=30)

    server.start()  # same data directory
    for agent in agents:
        series = server.get(f"/api/v1/runs/{agent.run_id}/steps", max_points=200_000)
        acked_rows = max(agent.acked) * ROWS_PER_BATCH
        assert series["total"] >= acked_rows
        assert series["step"] == list(range(series["total"]))

    total_batches = max(max(a.acked) for a in agents) + 5
    for agent in agents:
        agent.resume_and_finish(total_batches)
    for agent in agents:
        run = server.get(f"/api/v1/runs/{agent.run_id}")
        assert run["status"] == "finished"
        assert run["summary"]["steps"] == total_batches * ROWS_PER_BATCH
        series = server.get(f"/api/v1/runs/{agent.run_id}/steps", max_points=200_000)
        assert series["step"] == list(range(total_batches * ROWS_PER_BATCH))
