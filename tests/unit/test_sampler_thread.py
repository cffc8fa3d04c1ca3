"""One sampler thread per process serves every open run's sampler
(trainer_agent/telemetry/samplers.py)."""

import threading
import time
from typing import Any

from tests.harness.support import wait_for
from trainer_agent.capture.recorder import Recorder
from trainer_agent.telemetry.samplers import Sampler


class CountingSource:
    """A source that records how often, and on which thread, it was read."""

    def __init__(self) -> None:
        self.reads: list[str] = []

    def sample(self, t: float, recorder: Recorder) -> None:
        self.reads.append(threading.current_thread().name)
        recorder.host.append(t, None, None, 1, 1, 1)


def _sampler(source: CountingSource, interval_s: float = 0.1) -> Sampler:
    return Sampler(Recorder(max_rows=10_000), interval_s=interval_s, host=source)  # type: ignore[arg-type]


def _sampler_threads() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name == "stoker-sampler"]


def test_runs_share_one_sampler_thread_and_each_keeps_its_schedule() -> None:
    first, second = CountingSource(), CountingSource()
    a, b = _sampler(first, 0.1), _sampler(second, 0.3)
    a.start()
    b.start()
    try:
        wait_for(lambda: len(first.reads) >= 7, timeout_s=20, what="7 readings of the first")
        assert len(_sampler_threads()) == 1
        assert set(first.reads) == set(second.reads) == {"stoker-sampler"}
        assert second.reads  # read right after its start, then on its own, slower schedule
        assert len(second.reads) < len(first.reads)
    finally:
        a.close()
    after_close = len(first.reads)
    wait_for(lambda: len(second.reads) >= 4, timeout_s=20, what="the second sampling on")
    assert len(first.reads) == after_close  # nothing after close returned
    b.close()
    assert len(_sampler_threads()) == 1


def test_close_takes_a_last_reading_and_a_sampler_never_started_takes_none() -> None:
    source = CountingSource()
    sampler = _sampler(source, interval_s=60.0)
    sampler.start()
    wait_for(lambda: len(source.reads) == 1, timeout_s=20, what="the first reading")
    sampler.close()
    assert len(source.reads) == 2  # the last reading, taken before close returned
    sampler.close()  # twice is once
    assert len(source.reads) == 2
    idle = CountingSource()
    _sampler(idle).close()
    assert idle.reads == []


def test_a_stuck_reading_of_one_run_does_not_hold_close_beyond_its_timeout() -> None:
    release = threading.Event()

    class Stuck(CountingSource):
        def sample(self, t: float, recorder: Recorder) -> None:
            release.wait(30)
            super().sample(t, recorder)

    stuck = _sampler(Stuck(), interval_s=60.0)
    stuck.start()
    other = CountingSource()
    sampler = _sampler(other)
    try:
        time.sleep(0.2)  # the thread is inside the stuck reading
        sampler.start()
        started = time.monotonic()
        sampler.close(timeout_s=0.5)
        assert time.monotonic() - started < 5
    finally:
        release.set()
        stuck.close()
    wait_for(lambda: len(other.reads) >= 1, timeout_s=20, what="the last reading, late")


def test_readings_keep_going_after_a_source_raises() -> None:
    class Failing(CountingSource):
        def sample(self, t: float, recorder: Recorder) -> None:
            super().sample(t, recorder)
            raise RuntimeError("driver hiccup")

    failing, fine = Failing(), CountingSource()
    samplers: list[Any] = [_sampler(failing), _sampler(fine)]
    for sampler in samplers:
        sampler.start()
    try:
        wait_for(
            lambda: len(failing.reads) >= 3 and len(fine.reads) >= 3, timeout_s=20, what="3 each"
        )
    finally:
        for sampler in samplers:
            sampler.close()
