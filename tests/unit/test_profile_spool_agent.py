"""The agent's side of spooled profiler traces, with a recording transport: a trace
over the spool's bound leaves the spool (said once), and a capture whose process died
before the trace was written is reported failed by the next uploader."""

import http.server
import json
import logging
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.harness.support import wait_for
from trainer_agent.config import AgentConfig
from trainer_agent.delivery import profile_spool
from trainer_agent.profiling.profile import Capture, Profiler


class Response:
    """Stoker's answer to a status report or a trace chunk: it holds both routes' key."""

    def __init__(self, status_code: int = 200) -> None:
        self.status_code = status_code
        self.headers = {"content-type": "application/json"}
        self.text = json.dumps(self.json())

    def json(self) -> dict[str, Any]:
        return {"status": "uploading", "received": 0}


class Recorder:
    """A `Post` that records each request (a JSON body decoded as `json`) and stores it."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, dict[str, Any]]] = []

    def __call__(self, url: str, **kwargs: Any) -> Response:
        if kwargs["headers"].get("Content-Type") == "application/json":
            kwargs["json"] = json.loads(kwargs["content"])
        self.calls.append((url, kwargs))
        return Response()


def _captured(profiler: Profiler, size: int) -> Capture:
    """A capture placed in the spool whose profiler wrote a trace of `size` bytes."""
    capture = Capture(id=7, steps=5, max_s=60.0, rank=1)
    profiler.requests._place(capture, "run-key-of-test")
    written = capture.directory / profile_spool.CAPTURE / "plugins" / "profile" / "x"
    written.mkdir(parents=True)
    (written / "host.xplane.pb").write_bytes(b"x" * size)
    capture.first_step, capture.last_step, capture.ended = 10, 14, True
    return capture


def test_trace_over_the_spool_bound_is_sent_from_outside_it_and_said_once(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    post = Recorder()
    config = AgentConfig(server="http://server", spool_dir=tmp_path / "spool", spool_max_bytes=100)
    profiler = Profiler(config, lambda: 3, post=post)
    capture = _captured(profiler, size=1000)
    assert capture.spooled and capture.directory.is_relative_to(tmp_path / "spool")
    with caplog.at_level(logging.WARNING, logger="trainer_agent"):
        profiler.uploader._upload(capture, overhead={"steps": 5})
    assert "does not fit in the spool" in caplog.text
    assert not list((tmp_path / "spool").rglob("*.xplane.pb"))  # left the spool
    urls = [url for url, _ in post.calls]
    assert urls == [
        "http://server/api/v1/runs/3/profiles/7/status",
        "http://server/api/v1/runs/3/profiles/7/trace",
    ]
    status, chunk = (kwargs for _, kwargs in post.calls)
    assert status["json"]["bytes"] == 1000 and status["params"] == {"rank": 1}
    assert chunk["params"] == {"rank": 1, "offset": 0, "total": 1000}
    assert not capture.directory.exists()  # delivered: deleted


def test_trace_within_the_bound_is_delivered_from_the_spool_then_deleted(tmp_path: Path) -> None:
    post = Recorder()
    config = AgentConfig(server="http://server", spool_dir=tmp_path / "spool")
    profiler = Profiler(config, lambda: 3, post=post)
    capture = _captured(profiler, size=1000)
    directory = capture.directory
    profiler.uploader._upload(capture, overhead={"steps": 5})
    assert [kwargs["params"].get("offset") for _, kwargs in post.calls] == [None, 0]
    assert post.calls[0][1]["json"]["first_step"] == 10
    assert not directory.exists() and not (tmp_path / "spool" / "run-key-of-test").exists()


def test_capture_whose_process_died_before_its_trace_is_reported_failed(tmp_path: Path) -> None:
    directory = profile_spool.trace_dir(tmp_path, "run-key-of-test", 7, 0)
    directory.mkdir(parents=True)
    profile_spool.write_status(
        directory,
        {"server": "http://server", "run_id": 3, "profile": 7, "rank": 0, "status": "capturing"},
    )
    post = Recorder()
    elsewhere = profile_spool.upload_spooled(tmp_path, server="http://other", token=None, post=post)
    assert elsewhere == (0, 0)  # captured for another server: left alone
    sent = profile_spool.upload_spooled(tmp_path, server="http://server", token="t", post=post)
    assert sent == (1, 0)
    ((url, kwargs),) = post.calls
    assert url == "http://server/api/v1/runs/3/profiles/7/status"
    assert kwargs["json"]["status"] == "failed" and "ended during" in kwargs["json"]["error"]
    assert kwargs["headers"]["Authorization"] == "Bearer t"
    assert not directory.exists()


def test_a_failure_after_the_capture_is_reported_and_leaves_nothing_behind(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Say the disk fills up as the status is rewritten: the server hears that the profile
    failed (it would otherwise wait for the trace and refuse new captures meanwhile)."""
    post = Recorder()
    config = AgentConfig(server="http://server", spool_dir=tmp_path / "spool")
    profiler = Profiler(config, lambda: 3, post=post)
    capture = _captured(profiler, size=1000)
    directory = capture.directory

    def disk_full(directory: Path, status: dict[str, Any]) -> None:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(profile_spool, "write_status", disk_full)
    profiler.requests._slot.acquire()
    profiler.uploader._upload(capture, overhead={"steps": 5})
    (url, kwargs), *_ = post.calls
    assert url.endswith("/profiles/7/status") and kwargs["json"]["status"] == "failed"
    assert "No space left on device" in kwargs["json"]["error"]
    assert not directory.exists() and not profiler.requests._slot.locked()


def test_a_profiler_that_cannot_stop_frees_the_slot_and_reports(tmp_path: Path) -> None:
    pytest.importorskip("tensorflow")
    post = Recorder()
    profiler = Profiler(AgentConfig(server="http://server", spool_dir=None), lambda: 3, post=post)
    profiler.request({"id": 7, "steps": 1, "rank": 0})
    capture = profiler.requests.pending
    assert capture is not None
    profiler.capture.active, profiler.requests.pending = (
        capture,
        None,
    )  # as if started: stop() will raise
    capture.steps_done = 1
    profiler.step_begin(step=5, now=1.0)
    from tests.harness.support import wait_for

    wait_for(lambda: not profiler.requests._slot.locked(), timeout_s=30, what="the slot freed")
    statuses = [kwargs["json"] for _, kwargs in post.calls]
    assert statuses and statuses[-1]["status"] == "failed"


def test_exit_names_each_trace_it_could_not_deliver(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    from trainer_agent.profiling.profile import wait_for_uploads

    profiler = Profiler(AgentConfig(server="http://server", spool_dir=tmp_path), lambda: 3)
    capture = _captured(profiler, size=10)
    profiler.undelivered[capture.id] = capture
    with caplog.at_level(logging.WARNING, logger="trainer_agent"):
        wait_for_uploads([profiler], cap_s=0.0)
    assert f"profile 7's trace is not delivered yet; it is kept in {capture.directory}" in (
        caplog.text
    )
    assert f"stoker upload {tmp_path / 'run-key-of-test.r1'}" in caplog.text


class _Answers(http.server.BaseHTTPRequestHandler):
    """A loopback HTTP server answering each POST from the server's `script` of (status,
    JSON body), then 200 with a profile; it records what it was sent."""

    def do_POST(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        body = json.loads(self.rfile.read(length) or b"null")
        server: Any = self.server
        status, answer = server.script.pop(0) if server.script else (200, {"status": "failed"})
        server.received.append((self.path, body, status))
        data = json.dumps(answer).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, *args: Any) -> None:
        pass


@pytest.fixture
def answering() -> Iterator[Any]:
    server: Any = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Answers)
    server.script, server.received = [], []
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield server
    server.shutdown()
    server.server_close()


@pytest.mark.parametrize(
    ("status", "answer", "said"),
    [
        (429, {"detail": "Too Many Requests"}, None),
        (503, {"detail": "Service Unavailable"}, None),
        (401, {"detail": "invalid agent token"}, "refuses the agent token (HTTP 401"),
    ],
)
def test_a_profile_status_the_server_is_busy_for_is_retried_not_dropped(
    answering: Any, status: int, answer: dict[str, Any], said: str | None,
    caplog: pytest.LogCaptureFixture,
) -> None:  # fmt: skip
    """A status report answered 429 (busy), as a trace chunk answered 429 already was, is
    sent again until the server takes it (it was dropped: the server then waited for a report
    that never came). A refused token is said once and retried too, never dropped silently."""
    answering.script = [(status, answer), (status, answer)]
    url = f"http://127.0.0.1:{answering.server_address[1]}"
    profiler = Profiler(AgentConfig(server=url, spool_dir=None, token="t"), lambda: 3)
    with caplog.at_level(logging.WARNING, logger="trainer_agent"):
        profiler.request({"id": 7, "steps": 5, "rank": 0})
        profiler.request({"id": 8, "steps": 5, "rank": 0})  # one at a time: 8 is failed
        wait_for(lambda: len(answering.received) == 3 and not profiler.busy, timeout_s=20,
                 what="the report delivered")  # fmt: skip
    assert [(path, sent["status"], got) for path, sent, got in answering.received] == [
        ("/api/v1/runs/3/profiles/8/status?rank=0", "failed", status),
        ("/api/v1/runs/3/profiles/8/status?rank=0", "failed", status),
        ("/api/v1/runs/3/profiles/8/status?rank=0", "failed", 200),
    ]
    assert "a capture is in progress" in answering.received[-1][1]["error"]
    warnings = [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]
    if said is None:
        assert warnings == []
    else:
        (warning,) = warnings
        assert said in warning and "set STOKER_AGENT_TOKEN" in warning
    profiler.stop()


class _FastClock:
    """The system clock, except that a wait records what was asked and lasts 10 ms."""

    def __init__(self) -> None:
        self.waits: list[float] = []

    def monotonic(self) -> float:
        return time.monotonic()

    def sleep(self, seconds: float) -> None:
        raise AssertionError("the upload thread waits on the clock and its stop event")

    def wait(self, event: threading.Event, seconds: float) -> bool:
        self.waits.append(seconds)
        return event.wait(0.01)


def test_the_upload_thread_retries_on_its_clock_and_stops_at_exit_keeping_the_trace(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """While the server is away the upload thread backs off on the profiler's clock; the exit
    stops it (it was never stopped), and the trace stays in the spool, unlocked, for the next
    agent."""
    from trainer_agent.profiling.profile import wait_for_uploads

    def away(url: str, **kwargs: Any) -> Response:
        raise ConnectionRefusedError(111, "Connection refused")

    clock = _FastClock()
    config = AgentConfig(server="http://server", spool_dir=tmp_path)
    profiler = Profiler(config, lambda: 3, post=away, clock=clock)
    capture = _captured(profiler, size=10)
    profiler.undelivered[capture.id] = capture
    profiler.uploader.send(lambda: profiler.uploader._upload(capture, overhead={"steps": 5}))
    wait_for(lambda: len(clock.waits) >= 3, timeout_s=10, what="three retries")
    assert clock.waits[0] <= 0.5 and profiler.server_away  # the backoff's first delays
    worker = profiler.uploader.thread
    assert worker is not None
    with caplog.at_level(logging.WARNING, logger="trainer_agent"):
        wait_for_uploads([profiler], cap_s=0.0)
    worker.join(timeout=5)
    assert not worker.is_alive() and profiler.uploader.thread is None
    assert "is not delivered yet; it is kept in" in caplog.text
    assert (capture.directory / profile_spool.TRACE).exists()
    with profile_spool.claimed(capture.directory) as mine:
        assert mine  # the next agent (or `stoker upload`) can take it
