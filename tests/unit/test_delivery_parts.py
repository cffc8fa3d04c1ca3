"""The delivery parts one at a time, on a clock moved by hand: backoff, reconnect timing,
batching and the spool (Outbox), the two transports, the drain's stop rule, and the sender's
cycle across an outage. No server, no threads, no waiting."""

import json
import logging
import queue
import random
import threading
from pathlib import Path
from typing import Any

import pytest

from trainer_agent.capture.recorder import Recorder
from trainer_agent.config import AgentConfig
from trainer_agent.delivery.backoff import Backoff, Reconnect
from trainer_agent.delivery.classify import (
    INGEST,
    PROFILE_STATUS,
    PROFILE_TRACE,
    Answer,
    Route,
    Verdict,
    classify,
    post,
)
from trainer_agent.delivery.http import (
    HTTP_CHUNK_BYTES,
    HTTP_CHUNK_ITEMS,
    HttpTransport,
    http_chunks,
)
from trainer_agent.delivery.outbox import Outbox, batch_rows, split_sections
from trainer_agent.delivery.sender import Drain, Sender
from trainer_agent.delivery.spool import Spool
from trainer_agent.delivery.transport import (
    DrainCapReached,
    HandshakeRefused,
    NotStokerServer,
    TokenRefused,
    Welcome,
    is_slow,
)
from trainer_agent.delivery.websocket import WebSocketTransport, default_connect

HELLO = {"type": "hello", "run_key": "k" * 16}


class ManualClock:
    """Time moves only when a test (or a wait) moves it."""

    def __init__(self) -> None:
        self.now = 1000.0

    def monotonic(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.now += seconds

    def wait(self, event: threading.Event, seconds: float) -> bool:
        if not event.is_set():
            self.now += seconds
        return event.is_set()


class ScriptedSocket:
    """A WebSocket whose server side is a function of each message sent; a recv with nothing
    to read moves the clock by its timeout and times out, as the real one would."""

    def __init__(self, clock: ManualClock, answer: Any) -> None:
        self.clock = clock
        self.answer = answer
        self.sent: list[dict[str, Any]] = []
        self.replies: queue.Queue[dict[str, Any]] = queue.Queue()
        self.closed = False

    def send(self, text: str) -> None:
        message = json.loads(text)
        self.sent.append(message)
        for reply in self.answer(message):
            self.replies.put(reply)

    def recv(self, timeout: float | None = None) -> str:
        try:
            return json.dumps(self.replies.get_nowait())
        except queue.Empty:
            self.clock.now += timeout or 0.0
            raise TimeoutError from None

    def close(self) -> None:
        self.closed = True


def acking_server(message: dict[str, Any]) -> list[dict[str, Any]]:
    if message["type"] == "hello":
        return [{"type": "welcome", "run_id": 7, "last_seq": 0}]
    if message["type"] == "batch":
        return [{"type": "ack", "seq": message["seq"]}]
    return [{"type": "ack", "end": True}]


def steps_batch(seq: int, steps: list[int]) -> dict[str, Any]:
    return {"type": "batch", "seq": seq, "steps": {"step": steps, "t": [0.0] * len(steps)}}


# --- Backoff and Reconnect ---------------------------------------------------------------
def test_backoff_doubles_within_full_jitter_up_to_its_cap_and_resets() -> None:
    backoff = Backoff(initial_s=0.5, max_s=4.0, rng=random.Random(1))
    ceilings = [0.5, 1.0, 2.0, 4.0, 4.0, 4.0]
    for ceiling in ceilings:
        assert ceiling / 2 <= backoff.next_delay_s() <= ceiling
    backoff.reset()
    assert 0.25 <= backoff.next_delay_s() <= 0.5


def test_reconnect_waits_out_the_backoff_and_reports_each_change_once() -> None:
    clock = ManualClock()
    reconnect = Reconnect(clock, Backoff(initial_s=1.0, max_s=1.0, rng=random.Random(0)))
    assert reconnect.may_try() and not reconnect.down
    assert reconnect.failed() is True  # up -> down: say it
    assert reconnect.failed() is False  # still down: said already
    assert not reconnect.may_try()
    assert reconnect.may_try(force=True)
    clock.now += 1.0
    assert reconnect.may_try()
    assert reconnect.succeeded() is True  # down -> up: say it
    assert reconnect.succeeded() is False


# --- cutting -----------------------------------------------------------------------------
def test_http_chunks_cut_by_bytes_and_by_count_in_order() -> None:
    assert http_chunks([], len) == []
    quarter = HTTP_CHUNK_BYTES // 4
    by_bytes = http_chunks([quarter] * 9, lambda size: size)
    assert [len(chunk) for chunk in by_bytes] == [4, 4, 1]
    oversized = http_chunks([10, HTTP_CHUNK_BYTES * 2, 10], lambda size: size)
    assert oversized == [[10], [HTTP_CHUNK_BYTES * 2], [10]]  # too big goes alone, not lost
    items = list(range(HTTP_CHUNK_ITEMS + 5))
    by_count = http_chunks(items, lambda _: 1)
    assert [len(chunk) for chunk in by_count] == [HTTP_CHUNK_ITEMS, 5]
    assert [item for chunk in by_count for item in chunk] == items


def test_split_sections_keeps_the_usual_batch_whole_and_cuts_long_sections() -> None:
    sections = {"steps": {"step": [0, 1, 2]}, "host": {"t": [0.0]}}
    assert split_sections(sections, 3)[0] is sections
    assert split_sections({}, 3) == []
    chunks = split_sections({"steps": {"step": list(range(5))}, "host": {"t": [0.0]}}, 2)
    assert chunks == [
        {"steps": {"step": [0, 1]}, "host": {"t": [0.0]}},
        {"steps": {"step": [2, 3]}},
        {"steps": {"step": [4]}},
    ]
    assert [batch_rows(chunk) for chunk in chunks] == [3, 2, 1]


# --- Outbox ------------------------------------------------------------------------------
def make_outbox(tmp_path: Path | None, *, max_rows: int = 100, spool_bytes: int = 2**20):
    recorder = Recorder(max_rows=max_rows)
    spool = Spool(tmp_path / "run", max_bytes=spool_bytes) if tmp_path else None
    outbox = Outbox(recorder, HELLO, max_batch_rows=4, max_pending_rows=1000, spool=spool)
    return recorder, outbox


class RecordingTransport:
    """Stores what it is sent; refuses batches whose seq is in `refuse`."""

    name = "test"

    def __init__(self, group: int = 1, refuse: tuple[int, ...] = ()) -> None:
        self.group = group
        self.refuse = refuse
        self.sent: list[int] = []
        self.run_id: int | None = None
        self.is_open = True

    def groups(self, items: list[Any], size_of: Any) -> list[list[Any]]:
        return [items[i : i + self.group] for i in range(0, len(items), self.group)]

    def send(self, batches: list[dict[str, Any]], deadline: float) -> list[str | None]:
        self.sent.extend(batch["seq"] for batch in batches)
        return ["invalid" if batch["seq"] in self.refuse else None for batch in batches]


def test_outbox_numbers_batches_cuts_them_and_reports_counters_once(tmp_path: Path) -> None:
    recorder, outbox = make_outbox(None, max_rows=6)
    for step in range(8):  # two more than the recorder holds
        recorder.steps.append(step, 0.0, 0.1, None, None)
    outbox.collect()
    outbox.collect()  # nothing new, counters unchanged: no batch
    transport = RecordingTransport()
    outcomes: list[tuple[int, str | None]] = []
    outbox.deliver(transport, float("inf"), lambda b, o: outcomes.append((b["seq"], o)))
    assert transport.sent == [1, 2]  # 6 steps, 4 rows a batch
    assert outcomes == [(1, None), (2, None)]
    assert outbox.counters() == {"dropped_rows": 2, "spooled_rows": 0}
    assert outbox.pending_rows == 0


def test_outbox_replays_the_spool_before_memory_in_seq_order(tmp_path: Path) -> None:
    recorder, outbox = make_outbox(tmp_path)
    recorder.steps.append(0, 0.0, 0.1, None, None)
    outbox.collect()
    outbox.spool_pending()  # the server is away
    recorder.steps.append(1, 0.0, 0.1, None, None)
    outbox.collect()
    assert outbox.spooled_rows == 1 and outbox.spooled_steps == 1
    transport = RecordingTransport(group=5, refuse=(2,))
    refused: list[int] = []
    outbox.deliver(transport, float("inf"), lambda b, o: o and refused.append(b["seq"]))
    assert transport.sent == [1, 2]
    assert refused == [2]  # answered for: forgotten, counted by the caller
    assert outbox.spooled_steps == 0 and not outbox.spool_holds_batches()


def test_outbox_sets_an_unreadable_spooled_batch_aside_and_sends_the_rest(tmp_path: Path) -> None:
    recorder, outbox = make_outbox(tmp_path)
    for step in range(3):
        recorder.steps.append(step, 0.0, 0.1, None, None)
        outbox.collect()
    outbox.spool_pending()  # the server is away: three batches on disk
    assert outbox.spool is not None
    second = outbox.spool.batch_paths()[1]
    second.write_bytes(b"\x00 not a batch")
    transport = RecordingTransport(group=5)
    outbox.deliver(transport, float("inf"), lambda b, o: None)
    assert transport.sent == [1, 3]  # before, the load raised and the sender retried for ever
    assert not outbox.spool_holds_batches()
    assert outbox.counters()["unreadable_spool_files"] == 1
    assert (tmp_path / "unreadable" / f"run.{second.name}.bad").read_bytes() == b"\x00 not a batch"


def test_outbox_counts_what_the_spool_cannot_hold(tmp_path: Path) -> None:
    recorder, outbox = make_outbox(tmp_path, spool_bytes=10)
    for step in range(3):
        recorder.steps.append(step, 0.0, 0.1, None, None)
    outbox.collect()
    outbox.spool_pending()
    assert outbox.counters() == {"dropped_rows": 3, "spooled_rows": 0}
    assert outbox.pending_rows == 0


def test_outbox_failed_send_keeps_every_batch(tmp_path: Path) -> None:
    recorder, outbox = make_outbox(None)
    recorder.steps.append(0, 0.0, 0.1, None, None)
    outbox.collect()

    class Failing(RecordingTransport):
        def send(self, batches: list[dict[str, Any]], deadline: float) -> list[str | None]:
            raise ConnectionError("gone")

    with pytest.raises(ConnectionError):
        outbox.deliver(Failing(), float("inf"), lambda b, o: None)
    assert outbox.pending_rows == 1
    transport = RecordingTransport()
    outbox.deliver(transport, float("inf"), lambda b, o: None)
    assert transport.sent == [1]


def test_outbox_resumes_numbering_after_the_server_then_trims_what_it_holds() -> None:
    recorder, outbox = make_outbox(None)
    for step in range(6):
        recorder.steps.append(step, 0.0, 0.1, None, None)
    outbox.collect()  # seqs 1, 2
    outbox.welcomed(last_seq=40)  # a new process resuming a run the server holds up to 40
    recorder.steps.append(6, 0.0, 0.1, None, None)
    outbox.collect()
    transport = RecordingTransport()
    outbox.deliver(transport, float("inf"), lambda b, o: None)
    assert transport.sent == [41, 42, 43]

    recorder.steps.append(7, 0.0, 0.1, None, None)
    recorder.steps.append(8, 0.0, 0.1, None, None)
    outbox.collect()  # 44
    outbox.welcomed(last_seq=44)  # a reconnect: the server stored 44 before the link broke
    assert outbox.pending_rows == 0


# --- transports --------------------------------------------------------------------------
def test_websocket_transport_acks_refusals_commands_and_timeouts() -> None:
    clock = ManualClock()
    commands: list[str] = []
    config = AgentConfig(ack_timeout_s=5.0)

    def server(message: dict[str, Any]) -> list[dict[str, Any]]:
        if message["type"] == "hello":
            return [{"type": "welcome", "run_id": 3, "last_seq": 9}]
        if message["seq"] == 2:
            return [{"type": "error", "seq": 2, "message": "bad"}]
        if message["seq"] == 3:
            return []  # never answered
        return [{"type": "command", "name": "profile"}, {"type": "ack", "seq": message["seq"]}]

    socket = ScriptedSocket(clock, server)
    transport = WebSocketTransport(
        config, HELLO, lambda c: commands.append(c["name"]),
        connect=lambda url, **kw: socket, clock=clock,
    )  # fmt: skip
    assert transport.open(float("inf")) == Welcome(run_id=3, last_seq=9)
    assert transport.run_id == 3 and transport.is_open
    outcomes = transport.send([steps_batch(1, [0]), steps_batch(2, [1])], float("inf"))
    assert outcomes[0] is None and "bad" in (outcomes[1] or "")
    assert commands == ["profile"]
    started = clock.now
    with pytest.raises(TimeoutError) as waited:
        transport.send([steps_batch(3, [2])], float("inf"))
    assert not isinstance(waited.value, DrainCapReached)
    assert clock.now - started == pytest.approx(5.0)
    with pytest.raises(DrainCapReached):  # the drain's deadline comes before the ack timeout
        transport.send([steps_batch(3, [2])], clock.now + 1.0)
    transport.close()
    assert socket.closed and not transport.is_open


def test_websocket_transport_tells_a_refused_upgrade_apart() -> None:
    class InvalidStatus(Exception):  # websockets' name for an HTTP answer to the upgrade
        pass

    def refuse(url: str, **kwargs: Any) -> Any:
        raise InvalidStatus("403")

    transport = WebSocketTransport(AgentConfig(), HELLO, print, connect=refuse)
    with pytest.raises(HandshakeRefused):
        transport.open(float("inf"))


class FakeResponse:
    def __init__(self, status_code: int, body: dict[str, Any]) -> None:
        self.status_code = status_code
        self._body = body
        self.text = json.dumps(body)
        self.headers = {"content-type": "application/json"}

    def json(self) -> dict[str, Any]:
        return self._body

    def raise_for_status(self) -> None:
        if self.status_code >= 400:
            raise ConnectionError(f"HTTP {self.status_code}")


def test_http_transport_posts_hello_with_batches_and_takes_refusals() -> None:
    posted: list[dict[str, Any]] = []
    answers = iter([FakeResponse(200, {"run_id": 5}), FakeResponse(422, {"detail": "no"}),
                    FakeResponse(503, {}), FakeResponse(200, {"run_id": 5})])  # fmt: skip

    def post(url: str, *, content: bytes, **kwargs: Any) -> FakeResponse:
        posted.append(json.loads(content))
        return next(answers)

    transport = HttpTransport(AgentConfig(server="http://127.0.0.1:1"), HELLO, post=post)
    assert transport.open(float("inf")) is None and transport.is_open
    assert transport.send([steps_batch(1, [0])], float("inf")) == [None]
    assert transport.run_id == 5
    assert transport.send([steps_batch(2, [1])], float("inf"))[0] is not None
    with pytest.raises(ConnectionError):
        transport.send([steps_batch(3, [2])], float("inf"))
    transport.end({"type": "end", "status": "finished"}, float("inf"))
    assert posted[0]["hello"] == HELLO and posted[-1]["end"]["status"] == "finished"


# --- classify: what every HTTP answer means -----------------------------------------------
class Answered:
    """An HTTP answer as httpx gives it: status, headers, text and a JSON body (or none)."""

    def __init__(
        self, status_code: int, body: Any = None, *, content_type: str = "application/json",
        location: str | None = None, reason_phrase: str = "",
    ) -> None:  # fmt: skip
        self.status_code = status_code
        self._body = body
        self.text = json.dumps(body) if body is not None else "<html>nope</html>"
        self.headers = {"content-type": content_type}
        if location:
            self.headers["location"] = location
        self.reason_phrase = reason_phrase

    def json(self) -> Any:
        if self._body is None:
            raise ValueError("not JSON")
        return self._body


def _verdict(route: Route, answer: Any) -> Answer:
    return classify("http://s:1", route, "POST /api/v1/ingest", answer)


@pytest.mark.parametrize("route", [INGEST, PROFILE_STATUS, PROFILE_TRACE])
@pytest.mark.parametrize(
    ("answer", "verdict"),
    [
        (Answered(422, {"detail": "steps.t: missing"}), Verdict.REFUSED),
        (Answered(409, {"detail": "trace over the cap"}), Verdict.REFUSED),
        (Answered(413, {"detail": "too large"}), Verdict.REFUSED),
        (Answered(429, {"detail": "slow down"}), Verdict.RETRY),
        (Answered(429, None, content_type="text/html"), Verdict.RETRY),  # a proxy's
        (Answered(408, None, content_type="text/html"), Verdict.RETRY),
        (Answered(503, None, content_type="text/html"), Verdict.RETRY),
        (Answered(500, {"detail": "Internal Server Error"}), Verdict.RETRY),
        (ConnectionRefusedError(111, "Connection refused"), Verdict.RETRY),
        (TimeoutError("timed out"), Verdict.RETRY),
    ],
)  # fmt: skip
def test_classify_gives_every_route_the_same_verdict(
    route: Route, answer: Any, verdict: Verdict
) -> None:
    classified = _verdict(route, answer)
    assert classified.verdict is verdict and classified.problem is None
    if verdict is Verdict.REFUSED:
        assert classified.reason == answer.text  # the server's words, for the log
    if isinstance(answer, BaseException):
        assert classified.failure() is answer  # the sender tells a timeout by it


def test_classify_delivered_only_with_the_json_stoker_answers_on_the_route() -> None:
    assert _verdict(INGEST, Answered(200, {"run_id": 3, "acked": [1]})).body["run_id"] == 3
    assert _verdict(PROFILE_STATUS, Answered(200, {"status": "uploading"})).verdict is (
        Verdict.DELIVERED
    )
    assert _verdict(PROFILE_TRACE, Answered(200, {"received": 9})).verdict is Verdict.DELIVERED
    # A 200 without it is some other program's answer, and so is a redirect.
    for answer in (
        Answered(200, None, content_type="text/html"),
        Answered(200, {"ok": True}),
        Answered(307, None, content_type="text/html", location="https://s/api/v1/ingest"),
    ):
        classified = _verdict(INGEST, answer)
        assert classified.verdict is Verdict.RETRY
        assert isinstance(classified.problem, NotStokerServer), answer.status_code
    redirect = _verdict(
        INGEST, Answered(307, None, content_type="text/html", location="https://s/x")
    )
    assert str(redirect.problem) == (
        "http://s:1 answers but is not a Stoker server (POST /api/v1/ingest: HTTP 307 to "
        "https://s/x)"
    )


def test_classify_a_refused_token_is_a_setting_to_fix_named_with_its_fix() -> None:
    for status in (401, 403):
        classified = _verdict(PROFILE_TRACE, Answered(status, {"detail": "invalid token"}))
        assert classified.verdict is Verdict.RETRY and classified.failure() is classified.problem
        assert isinstance(classified.problem, TokenRefused)
        assert str(classified.problem) == (
            f"the Stoker server at http://s:1 refuses the agent token (HTTP {status}: invalid "
            "token): set STOKER_AGENT_TOKEN (or token=) to the server's agent token"
        )
    # A 401 without Stoker's JSON is not Stoker refusing the token.
    html = _verdict(INGEST, Answered(401, None, content_type="text/html"))
    assert isinstance(html.problem, NotStokerServer)


def test_classify_statuses_stoker_never_gives_on_a_route_mean_another_program() -> None:
    # Stoker has no 404 on ingest; on a profile a 404 with its own words is an unknown profile,
    # Starlette's bare "Not Found" a path no route serves.
    assert isinstance(_verdict(INGEST, Answered(404, {"detail": "run 3 not found"})).problem,
                      NotStokerServer)  # fmt: skip
    unknown = _verdict(PROFILE_STATUS, Answered(404, {"detail": "profile 7 of run 3 not found"}))
    assert unknown.verdict is Verdict.REFUSED
    no_route = _verdict(PROFILE_STATUS, Answered(404, {"detail": "Not Found"}))
    assert isinstance(no_route.problem, NotStokerServer)
    for route in (INGEST, PROFILE_STATUS, PROFILE_TRACE):
        for status in (405, 501):
            answer = Answered(status, None, content_type="text/html", reason_phrase="Nope")
            classified = _verdict(route, answer)
            assert isinstance(classified.problem, NotStokerServer)
            assert f"HTTP {status} Nope, text/html" in str(classified.problem)


def test_post_sends_json_or_bytes_with_the_token_and_never_raises() -> None:
    sent: list[tuple[str, dict[str, Any]]] = []

    def send(url: str, **kwargs: Any) -> Answered:
        sent.append((url, kwargs))
        return Answered(200, {"received": 3})

    answer = post(send, "http://s:1/", PROFILE_TRACE, "/api/v1/runs/1/profiles/2/trace",
                  body=b"abc", token="t", timeout=5.0, params={"rank": 1})  # fmt: skip
    assert answer.verdict is Verdict.DELIVERED
    ((url, kwargs),) = sent
    assert url == "http://s:1/api/v1/runs/1/profiles/2/trace" and kwargs["content"] == b"abc"
    assert kwargs["headers"] == {
        "Authorization": "Bearer t", "Content-Type": "application/octet-stream"
    }  # fmt: skip
    assert kwargs["params"] == {"rank": 1} and kwargs["timeout"] == 5.0

    def fail(url: str, **kwargs: Any) -> Answered:
        raise OSError("no route to host")

    failed = post(fail, "http://s:1", INGEST, "/api/v1/ingest", body={"hello": {}},
                  token=None, timeout=5.0)  # fmt: skip
    assert failed.verdict is Verdict.RETRY and isinstance(failed.failure(), OSError)


# --- the drain's stop rule ---------------------------------------------------------------
def test_drain_stops_at_the_cap_when_unreachable_or_when_acks_stop() -> None:
    drain = Drain(0.0, cap_s=60.0, reach_for_s=2.0, ack_timeout_s=10.0)
    refused = ConnectionRefusedError(111, "refused")
    assert not drain.should_stop(1.0, refused)
    assert drain.should_stop(2.0, refused)  # not reachable: not coming back now
    assert not drain.should_stop(9.0, None)
    drain.progressed(9.0)  # an ack: keep going
    assert not drain.should_stop(18.0, TimeoutError())
    assert drain.should_stop(19.0, TimeoutError())  # connected, nothing acknowledged for 10 s
    drain.progressed(59.0)
    assert drain.should_stop(60.0, None)  # the cap, however well it goes


# --- the sender's cycle ------------------------------------------------------------------
def test_sender_spools_while_away_backs_off_then_replays_in_order(tmp_path: Path) -> None:
    clock = ManualClock()
    up = False
    socket = ScriptedSocket(clock, acking_server)

    def connect(url: str, **kwargs: Any) -> ScriptedSocket:
        if not up:
            raise ConnectionRefusedError(111, "Connection refused")
        return socket

    recorder = Recorder(max_rows=100)
    config = AgentConfig(spool_dir=tmp_path, server="http://127.0.0.1:9")
    sender = Sender(config=config, hello=dict(HELLO), buffer=recorder, connect=connect, clock=clock)
    recorder.steps.append(0, 0.0, 0.1, None, None)
    assert sender.cycle() is False
    assert sender.spooled_rows == 1 and not sender.connected.is_set()
    up = True
    recorder.steps.append(1, 0.0, 0.1, None, None)
    assert sender.cycle() is False  # within the backoff: not even tried
    assert socket.sent == [] and sender.spooled_rows == 2
    clock.now += 60.0
    recorder.steps.append(2, 0.0, 0.1, None, None)
    assert sender.cycle() is True
    batches = [m for m in socket.sent if m["type"] == "batch"]
    assert [b["seq"] for b in batches] == [1, 2, 3]
    assert [b["steps"]["step"] for b in batches] == [[0], [1], [2]]
    assert sender.connected.is_set() and sender.run_id == 7 and sender.acked_batches == 3
    assert sender.pending_rows == 0


def test_sender_switches_to_http_at_once_when_the_upgrade_is_refused(tmp_path: Path) -> None:
    class InvalidStatus(Exception):
        pass

    def refuse(url: str, **kwargs: Any) -> Any:
        raise InvalidStatus("426")

    posted: list[dict[str, Any]] = []

    def post(url: str, *, content: bytes, **kwargs: Any) -> FakeResponse:
        posted.append(json.loads(content))
        return FakeResponse(200, {"run_id": 4})

    recorder = Recorder(max_rows=100)
    sender = Sender(
        config=AgentConfig(spool_dir=None), hello=dict(HELLO), buffer=recorder,
        connect=refuse, post=post, clock=ManualClock(),
    )  # fmt: skip
    recorder.steps.append(0, 0.0, 0.1, None, None)
    assert sender.cycle() is True
    assert sender.transport_name == "http" and sender.run_id == 4
    assert [b["seq"] for b in posted[0]["batches"]] == [1]


def test_a_stalled_server_is_slow_and_a_refusing_one_unreachable() -> None:
    from websockets.exceptions import ConnectionClosedError
    from websockets.frames import Close

    keepalive = ConnectionClosedError(None, Close(1011, "keepalive ping timeout"), None)
    assert is_slow(keepalive) and is_slow(TimeoutError()) and is_slow(DrainCapReached())
    assert not is_slow(ConnectionRefusedError(111, "Connection refused"))
    assert not is_slow(ConnectionClosedError(None, Close(1001, "going away"), None))


def test_websockets_own_log_lines_reach_the_agents_logger_at_debug(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """A keepalive ping that failed is logged by websockets at ERROR with its traceback (a
    training script without logging set up printed it); on the agent's connection it is a
    DEBUG line of `trainer_agent.websockets`, what the connection itself reports."""
    from websockets.sync.server import serve

    with serve(lambda ws: ws.recv(), "127.0.0.1", 0) as server:
        threading.Thread(target=server.serve_forever, daemon=True).start()
        port = server.socket.getsockname()[1]
        ws = default_connect(f"ws://127.0.0.1:{port}")
        try:
            with caplog.at_level(logging.DEBUG, logger="trainer_agent.websockets"):
                try:
                    raise ConnectionResetError(104, "Connection reset by peer")
                except ConnectionResetError:
                    ws.logger.error("keepalive ping failed", exc_info=True)  # as websockets does
        finally:
            ws.close()
            server.shutdown()
    failed = [r for r in caplog.records if r.getMessage() == "keepalive ping failed"]
    assert [(r.name, r.levelno) for r in failed] == [("trainer_agent.websockets", logging.DEBUG)]
    assert failed[0].exc_info is not None  # the traceback is kept, for whoever asks for DEBUG


def test_two_workers_of_one_run_spool_apart(tmp_path: Path) -> None:
    """Both ranks number their batches from 1: in one directory they would overwrite each
    other's spooled batches while the server is away."""

    def refuse(url: str, **kwargs: Any) -> Any:
        raise ConnectionRefusedError(111, "Connection refused")

    config = AgentConfig(spool_dir=tmp_path, server="http://127.0.0.1:9")
    for rank in (0, 1):
        recorder = Recorder(max_rows=100)
        hello = {**HELLO, "rank": rank}
        sender = Sender(
            config=config, hello=hello, buffer=recorder, connect=refuse, clock=ManualClock()
        )
        recorder.steps.append(rank, 0.0, 0.1, None, None)
        assert sender.cycle() is False and sender.spooled_rows == 1
    spooled = {
        path.parent.parent.name: Spool.load(path)["steps"]["step"]
        for path in tmp_path.glob("*/batches/*.json")
    }
    assert spooled == {HELLO["run_key"]: [0], HELLO["run_key"] + ".r1": [1]}


def test_websocket_transport_closed_from_another_thread_fails_as_a_connection_error() -> None:
    """abandon() closes the transport from the training thread while the sender thread may be
    about to send: that must be a connection error, not an AttributeError on None."""
    clock = ManualClock()
    socket = ScriptedSocket(clock, acking_server)
    transport = WebSocketTransport(
        AgentConfig(), HELLO, print, connect=lambda url, **kw: socket, clock=clock
    )
    transport.open(float("inf"))
    transport.close()
    with pytest.raises(ConnectionError):
        transport.send([steps_batch(1, [0])], float("inf"))
    with pytest.raises(ConnectionError):
        transport.poll_commands()
