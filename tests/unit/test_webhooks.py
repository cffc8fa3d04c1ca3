"""The webhook sender with an injected resolver and real loopback receivers: a name is checked
after it is resolved and the request goes to the address checked; a delivery has one deadline
for all its attempts; an answer is read up to a cap. (No DNS server is asked: the names here
resolve only through the resolver the test hands in.)"""

import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest

from stoker_server.core.net_guard import DestinationRefused, redact_url, vet_destination
from stoker_server.diagnosis.webhooks import REFUSED, Delivery, WebhookSender
from tests.harness.support import run_coroutine


class Receiver:
    """Records requests; answers after `hold` is set, with `body_bytes` of body (-1: endless)."""

    def __init__(self, *, body_bytes: int = 0, hold: bool = False) -> None:
        self.requests: list[dict[str, Any]] = []
        self.release = threading.Event()
        if not hold:
            self.release.set()
        self.sent_bytes = 0
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                self.rfile.read(int(self.headers.get("content-length", 0)))
                receiver.requests.append({"host": self.headers["host"], "path": self.path})
                receiver.release.wait(60)
                self.send_response(200)
                if body_bytes >= 0:
                    self.send_header("content-length", str(body_bytes))
                self.end_headers()
                chunk = b"x" * 65536
                try:
                    while body_bytes < 0 or receiver.sent_bytes < body_bytes:
                        self.wfile.write(chunk)
                        receiver.sent_bytes += len(chunk)
                except OSError:
                    pass  # the sender stopped reading and closed

            def log_message(self, *args: Any) -> None:
                pass

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.port = self.httpd.server_address[1]
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.release.set()
        self.httpd.shutdown()
        self.httpd.server_close()


def _resolver(names: dict[str, list[str]]):
    async def resolve(host: str, port: int) -> list[str]:
        if host not in names:
            raise OSError(f"{host}: no such name here")
        return names[host]

    return resolve


def _sender(**options: Any) -> tuple[WebhookSender, list[dict[str, Any]]]:
    recorded: list[dict[str, Any]] = []

    async def record(delivery: Delivery, outcome: dict[str, Any]) -> None:
        recorded.append(outcome)

    defaults: dict[str, Any] = {"timeout_s": 10.0, "attempts": 1, "backoff_s": 0.0,
                                "queue_size": 10}  # fmt: skip
    return WebhookSender(record=record, **{**defaults, **options}), recorded


def _delivery(url: str) -> Delivery:
    return Delivery(alert_id=1, url=url, format="json", event="firing", payload={"a": 1})


def test_a_name_that_resolves_to_loopback_is_refused_and_nothing_is_sent() -> None:
    receiver = Receiver()
    try:
        sender, _ = _sender(resolver=_resolver({"hooks.test": ["127.0.0.1"]}))
        outcome = run_coroutine(sender.deliver(_delivery(f"http://hooks.test:{receiver.port}/x")))
        assert outcome["status"] == "failed" and outcome["error"] == REFUSED
        assert outcome["url"] == f"http://hooks.test:{receiver.port}/…"
        assert receiver.requests == []
    finally:
        receiver.close()


def test_an_allowed_host_is_sent_to_the_address_the_check_resolved() -> None:
    """No DNS server knows hooks.test: the request reaching the receiver went to the address
    the resolver gave the check, with the name in its Host header."""
    receiver = Receiver()
    try:
        sender, _ = _sender(
            resolver=_resolver({"hooks.test": ["127.0.0.1"]}), allowed_hosts=["hooks.test"]
        )
        outcome = run_coroutine(sender.deliver(_delivery(f"http://hooks.test:{receiver.port}/x")))
        assert outcome["status"] == "delivered", outcome
        assert receiver.requests == [{"host": f"hooks.test:{receiver.port}", "path": "/x"}]
    finally:
        receiver.close()


def test_one_deadline_covers_every_attempt() -> None:
    """Three attempts with a 10 s timeout each would take 30 s: the deadline ends it sooner."""
    receiver = Receiver(hold=True)
    try:
        sender, _ = _sender(attempts=3, deadline_s=0.5, allowed_hosts=["127.0.0.1"])
        outcome = run_coroutine(sender.deliver(_delivery(f"http://127.0.0.1:{receiver.port}/")))
        assert outcome["status"] == "failed" and outcome["error"] == "timed out"
        assert outcome["attempts"] == 1
    finally:
        receiver.close()


def test_an_endless_answer_is_read_up_to_the_cap() -> None:
    receiver = Receiver(body_bytes=-1)
    try:
        sender, _ = _sender(max_response_bytes=65536, allowed_hosts=["127.0.0.1"], deadline_s=60)
        outcome = run_coroutine(sender.deliver(_delivery(f"http://127.0.0.1:{receiver.port}/")))
        assert outcome["status"] == "delivered" and outcome["http_status"] == 200
    finally:
        receiver.close()


def test_queued_deliveries_are_bounded_across_destinations() -> None:
    async def scenario() -> tuple[list[bool], int]:
        sender, _ = _sender(queue_size=3, resolver=_resolver({}))
        accepted = [sender.submit(_delivery(f"http://h{i}.test/x")) for i in range(5)]
        return accepted, sender.dropped

    accepted, dropped = run_coroutine(scenario())
    assert accepted == [True, True, True, False, False] and dropped == 2


@pytest.mark.parametrize(
    ("url", "shown"),
    [
        ("https://hooks.slack.com/services/T0/B0/secret", "https://hooks.slack.com/…"),
        ("https://user:pass@example.com/x?key=1", "https://example.com/…"),
        ("http://example.com", "http://example.com"),
    ],
)
def test_redacted_urls_keep_only_scheme_host_and_port(url: str, shown: str) -> None:
    assert redact_url(url) == shown


def test_save_time_check_passes_an_unresolvable_name_for_the_delivery_to_check() -> None:
    async def check() -> list[str]:
        return await vet_destination(
            "https://nowhere.test/x", allowed_hosts=[], resolver=_resolver({}), unresolved_ok=True
        )

    assert run_coroutine(check()) == []
    one_private = _resolver({"inside.test": ["10.0.0.7", "93.184.216.34"]})
    with pytest.raises(DestinationRefused, match="STOKER_WEBHOOK_ALLOWED_HOSTS"):
        run_coroutine(
            vet_destination("https://inside.test/x", allowed_hosts=[], resolver=one_private)
        )
