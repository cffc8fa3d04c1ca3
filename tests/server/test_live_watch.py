"""Live by default: a browser watching a run makes its agent send every 50 ms; when the last
browser leaves, the agent goes back to its 1 s pace."""

import itertools
import json
import time
from collections.abc import Callable, Iterator

from websockets.sync.client import connect

from tests.harness.support import ServerProcess


def _step_until(steps: Iterator[int], condition: Callable[[], bool], *, limit_s: float) -> bool:
    """Train (10 ms steps) until `condition` holds; False if it did not within `limit_s`."""
    deadline = time.monotonic() + limit_s
    for _ in steps:
        if condition():
            return True
        if time.monotonic() > deadline:
            return False
        time.sleep(0.01)
    return False


def test_watching_browser_switches_the_agent_to_live_pace_and_back(server: ServerProcess) -> None:
    from trainer_agent import Monitor

    with Monitor(run_name="watched", server=server.url) as mon:
        assert mon.session is not None
        sender = mon.session.sender
        steps = mon.iterate(itertools.count())
        assert _step_until(steps, lambda: sender.run_id is not None, limit_s=30)
        assert not sender.watched
        assert sender.flush_interval_s == sender._config.flush_interval_s == 1.0

        with connect(f"{server.ws_url}/api/v1/live") as browser:
            browser.send(json.dumps({"type": "subscribe", "run_id": sender.run_id}))
            assert _step_until(steps, lambda: sender.watched, limit_s=30)
            assert sender.flush_interval_s == 0.05
            # The watched run's steps reach the browser.
            deadline = time.monotonic() + 30
            while True:
                message = json.loads(browser.recv(timeout=30))
                if message["type"] == "steps" and message["run_id"] == sender.run_id:
                    break
                assert time.monotonic() < deadline, "no steps reached the watching browser"
        # The last browser left: back to the unwatched pace.
        assert _step_until(steps, lambda: not sender.watched, limit_s=30)
        assert sender.flush_interval_s == 1.0
