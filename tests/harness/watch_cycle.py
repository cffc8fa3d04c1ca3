"""The live-pace cycle of a watched run, shared by the one-server and two-server tests: an
agent streams to one server while a browser on another (or the same) watches its run."""

import itertools
import json
import time
from collections.abc import Callable, Iterator

from websockets.sync.client import connect

from tests.harness.support import ServerProcess


def step_until(steps: Iterator[int], condition: Callable[[], bool], *, limit_s: float) -> bool:
    """Train (10 ms steps) until `condition` holds; False if it did not within `limit_s`."""
    deadline = time.monotonic() + limit_s
    for _ in steps:
        if condition():
            return True
        if time.monotonic() > deadline:
            return False
        time.sleep(0.01)
    return False


def watch_cycle(*, ingest: ServerProcess, view: ServerProcess, run_name: str) -> None:
    """A `Monitor` streaming to `ingest` is unwatched (1 s pace); a browser on `view` watches
    its run: the agent is told, goes to the 50 ms pace and its steps reach the browser; the
    browser leaves: the agent goes back to its 1 s pace."""
    from trainer_agent import Monitor

    with Monitor(run_name=run_name, server=ingest.url) as mon:
        assert mon.session is not None
        sender = mon.session.sender
        steps = mon.iterate(itertools.count())
        assert step_until(steps, lambda: sender.run_id is not None, limit_s=30)
        assert not sender.watched
        assert sender.flush_interval_s == sender._config.flush_interval_s == 1.0

        with connect(f"{view.ws_url}/api/v1/live") as browser:
            browser.send(json.dumps({"type": "subscribe", "run_id": sender.run_id}))
            assert step_until(steps, lambda: sender.watched, limit_s=30), (
                "the agent was not told that a browser watches its run"
            )
            assert sender.flush_interval_s == 0.05
            deadline = time.monotonic() + 30
            while True:
                message = json.loads(browser.recv(timeout=30))
                if message["type"] == "steps" and message["run_id"] == sender.run_id:
                    break
                assert time.monotonic() < deadline, "no steps reached the watching browser"
        # The last browser left: back to the unwatched pace.
        assert step_until(steps, lambda: not sender.watched, limit_s=30)
        assert sender.flush_interval_s == 1.0
