"""A server that accepts the agent and then stops reading: training is unaffected, the
agent's memory stays bounded because it spools to disk, and nothing is lost."""

import json
import os
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

from websockets.sync.server import serve

from tests.harness.support import REPO, ServerProcess, free_port, upload_spool, wait_for


class StuckServer:
    """Completes the handshake and the hello, then never reads again (TCP backs up)."""

    def __init__(self, port: int) -> None:
        self.release = threading.Event()
        self.connections = 0
        # No keepalive of its own: it reads nothing, so its pings would time out and, once the
        # agent has gone, fail with a traceback on the test process's stderr.
        self._server = serve(
            self._handle, "127.0.0.1", port, max_queue=1, compression=None, ping_interval=None
        )
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    def _handle(self, ws: Any) -> None:
        self.connections += 1
        json.loads(ws.recv(timeout=10))
        ws.send(json.dumps({"type": "welcome", "protocol": 1, "run_id": 1, "last_seq": 0}))
        self.release.wait()

    def __enter__(self) -> "StuckServer":
        self._thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self.release.set()
        self._server.shutdown()


def test_stuck_server_never_blocks_training_and_spooled_records_arrive_later(
    tmp_path: Path, agent_spool_dir: Path
) -> None:
    port = free_port()
    steps = 600
    with StuckServer(port) as stuck:
        training = subprocess.run(
            [sys.executable, "-m", "tests.harness.loop_script", "--server", f"http://127.0.0.1:{port}",
             "--steps", str(steps), "--step-s", "0.01"],
            cwd=REPO, capture_output=True, text=True, timeout=180,
            # Nothing is ever acknowledged: how soon the agent gives up on the server is the
            # setting's, 2 s instead of 10 at each wait (the test's time, not its premise).
            env={**os.environ, "STOKER_ACK_TIMEOUT_S": "2", "STOKER_CLOSE_TIMEOUT_S": "2"},
        )  # fmt: skip
        assert stuck.connections >= 1
    assert training.returncode == 0, training.stderr
    # What the stuck server never acknowledged went to disk, not into an ever-growing buffer.
    (run_dir,) = [p for p in agent_spool_dir.iterdir() if p.is_dir()]
    assert sorted(run_dir.glob("batches/*.json"))

    server = ServerProcess(data_dir=tmp_path / "server", port=free_port()).start()
    try:
        upload_spool(agent_spool_dir, server.url)
        run = wait_for(lambda: server.get("/api/v1/runs")["data"], what="the uploaded run")[0]
        series = server.get(f"/api/v1/runs/{run['id']}/steps", max_points=10_000)
        assert series["step"] == list(range(steps))
        assert run["summary"]["dropped_rows"] == 0
    finally:
        server.stop()
