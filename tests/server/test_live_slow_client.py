"""A browser that stops reading never slows ingest: its queue drops oldest and says so."""

import itertools
import json
import threading
from contextlib import ExitStack
from pathlib import Path

from websockets.sync.client import connect

from tests.harness.detect_support import (
    first_drop_notice,
    run_with_a_stalled_reader,
)
from tests.harness.support import ServerProcess

STEPS_PER_BATCH = 500


def test_slow_live_client_does_not_stall_ingest_and_gets_drop_notice(tmp_path: Path) -> None:
    server = ServerProcess(data_dir=tmp_path, env={"STOKER_LIVE_QUEUE_SIZE": "20"}).start()
    try:
        with ExitStack() as clients:
            _check_slow_client(server, clients)
    finally:
        server.stop()


def _check_slow_client(server: ServerProcess, clients: ExitStack) -> None:
    agent, slow = clients.enter_context(run_with_a_stalled_reader(server, "slow"))
    fast = clients.enter_context(connect(f"{server.ws_url}/api/v1/live", max_size=None))
    fast.send(json.dumps({"type": "subscribe", "run_id": agent.run_id}))

    batches = 400
    last_step = batches * STEPS_PER_BATCH - 1
    fast_firsts_and_lasts: list[tuple[int, int]] = []

    def read_fast() -> None:
        while not fast_firsts_and_lasts or fast_firsts_and_lasts[-1][1] != last_step:
            message = json.loads(fast.recv(timeout=30))
            if message["type"] == "steps":
                step = message["data"]["step"]
                fast_firsts_and_lasts.append((step[0], step[-1]))

    reader = threading.Thread(target=read_fast, daemon=True)
    reader.start()
    for seq in range(1, batches + 1):
        assert agent.steps(STEPS_PER_BATCH, dur=0.01, wait=None) == {"type": "ack", "seq": seq}
    # The commands between the acks: the server says the run is watched.
    assert all(c == {"type": "command", "name": "watch", "watched": True} for c in agent.commands)
    reader.join(timeout=60)

    # The reading client got every batch from its subscription on, in order, no gap.
    assert fast_firsts_and_lasts and fast_firsts_and_lasts[-1][1] == last_step
    for (_, previous_last), (first, _) in itertools.pairwise(fast_firsts_and_lasts):
        assert first == previous_last + 1

    # The slow client, once it reads, is told that messages were dropped for it.
    notice = first_drop_notice(slow, most=3 * batches)
    assert notice["dropped"] > 0
    assert "re-fetch" in notice["message"]
