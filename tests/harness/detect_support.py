"""Helpers for diagnosis and alert tests: a scripted agent, a live listener, a webhook receiver."""

import json
import socket
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from websockets.sync.client import connect

from tests.harness.support import ServerProcess

FAST_DETECTORS = {
    "STOKER_DETECTOR_TICK_S": "0.1",
    "STOKER_ALERT_VALUE_WINDOW_S": "1",
    "STOKER_DIAGNOSIS_WINDOW_S": "30",
    "STOKER_WEBHOOK_BACKOFF_S": "0.05",
    # The tests' webhook receivers listen on loopback, which webhooks may not reach by default.
    "STOKER_WEBHOOK_ALLOWED_HOSTS": "127.0.0.1",
}


class ScriptedAgent:
    """Speaks the real agent protocol over the real WebSocket; the test decides the numbers."""

    def __init__(
        self,
        server: ServerProcess,
        name: str = "scripted",
        project: str = "tests",
        run_key: str | None = None,
        rank: int = 0,
        host: str = "h1",
        environment: dict[str, Any] | None = None,
    ):
        self.ws = connect(f"{server.ws_url}/api/v1/agent").__enter__()
        hello = {
            "type": "hello", "protocol": 1, "run_key": run_key or uuid.uuid4().hex, "name": name,
            "project": project, "host": host, "rank": rank, "environment": environment or {},
        }  # fmt: skip
        self.ws.send(json.dumps(hello))
        welcome = json.loads(self.ws.recv(timeout=10))
        assert welcome["type"] == "welcome", welcome
        self.run_id: int = welcome["run_id"]
        self.last_seq: int = welcome["last_seq"]  # what the server holds of this worker's stream
        self.seq = self.last_seq
        self.step = 0
        self.t = time.time()
        self.commands: list[dict[str, Any]] = []

    def reply(self) -> dict[str, Any]:
        """The server's next reply; commands (e.g. `watch`) may come at any time: kept apart."""
        while True:
            message = json.loads(self.ws.recv(timeout=10))
            if message.get("type") != "command":
                return message
            self.commands.append(message)

    def send(self, **sections: Any) -> dict[str, Any]:
        self.seq += 1
        self.ws.send(json.dumps({"type": "batch", "seq": self.seq, **sections}))
        reply = self.reply()
        assert reply.get("type") == "ack", reply
        return reply

    def steps(
        self, n: int, *, dur: float, wait: float | None, device_util: float | None = None
    ) -> dict[str, Any]:
        """Send `n` steps of `dur` seconds each waiting `wait` for input (agent clock); the
        server's ack."""
        indices = list(range(self.step, self.step + n))
        starts = [self.t + i * dur for i in range(n)]
        sections: dict[str, Any] = {
            "steps": {"step": indices, "t": starts, "dur": [dur] * n, "batch_size": [32] * n}
        }
        if wait is not None:
            sections["steps"]["wait"] = [wait] * n
        if device_util is not None:
            sections["device"] = {
                "t": [starts[-1]], "gpu": [0], "util": [device_util],
                "mem_used": [4e9], "mem_total": [16e9], "temp_c": [60.0],
            }  # fmt: skip
        self.step += n
        self.t += n * dur
        return self.send(**sections)

    def end(self, status: str = "finished") -> None:
        self.ws.send(json.dumps({"type": "end", "status": status}))
        self.reply()

    def close(self) -> None:
        self.ws.close()


@contextmanager
def run_with_a_stalled_reader(
    server: ServerProcess, name: str
) -> Iterator[tuple[ScriptedAgent, Any]]:
    """A scripted agent's run, and a browser subscribed to it that stops reading: its receive
    buffer is tiny, so the server's writes to it back up at once. It sends no keepalive
    pings: it would not read their pongs, and one timing out after its test printed
    websockets' traceback. Both are closed on leaving."""
    with ExitStack() as stack:
        agent = ScriptedAgent(server, name=name)
        stack.callback(agent.close)
        sock = socket.socket()
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        sock.connect(("127.0.0.1", server.port))
        slow = connect(
            f"{server.ws_url}/api/v1/live", sock=sock, max_size=None, max_queue=1,
            compression=None, ping_interval=None, close_timeout=1,
        )  # fmt: skip
        stack.enter_context(slow)
        slow.send(json.dumps({"type": "subscribe", "run_id": agent.run_id}))
        yield agent, slow


def first_drop_notice(client: Any, *, most: int) -> dict[str, Any]:
    """Read `client` (at most `most` messages) until the server's notice of dropped messages."""
    for _ in range(most):
        message = json.loads(client.recv(timeout=10))
        if message["type"] == "notice":
            return message
    raise AssertionError(f"no drop notice in {most} messages")


class LiveListener:
    """A browser's live connection, collecting every message in a background thread."""

    def __init__(self, server: ServerProcess) -> None:
        self.ws = connect(f"{server.ws_url}/api/v1/live").__enter__()
        self.messages: list[dict[str, Any]] = []
        self._lock = threading.Lock()
        self._thread = threading.Thread(target=self._read, daemon=True)
        self._thread.start()

    def _read(self) -> None:
        try:
            for text in self.ws:
                with self._lock:
                    self.messages.append(json.loads(text))
        except Exception:
            pass

    def of_type(self, kind: str, where: Callable[[dict[str, Any]], bool] = bool) -> list[Any]:
        with self._lock:
            return [m for m in self.messages if m.get("type") == kind and where(m)]

    def close(self) -> None:
        self.ws.close()


class WebhookReceiver:
    """A real HTTP server on loopback that records what it is sent (or answers `status`);
    with `hold`, it answers nothing until `release` is set (a receiver that hangs)."""

    def __init__(self, status: int = 200, *, hold: bool = False) -> None:
        self.received: list[dict[str, Any]] = []
        self.status = status
        self.arrived = threading.Event()
        self.release = threading.Event()
        if not hold:
            self.release.set()
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                length = int(self.headers.get("content-length", 0))
                body = json.loads(self.rfile.read(length) or b"null")
                receiver.received.append({"path": self.path, "body": body})
                receiver.arrived.set()
                receiver.release.wait(120)
                self.send_response(receiver.status)
                self.send_header("content-length", "0")
                self.end_headers()

            def log_message(self, *args: Any) -> None:
                pass

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}"
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()

    def at(self, path: str) -> list[dict[str, Any]]:
        return [r["body"] for r in self.received if r["path"] == path]

    def close(self) -> None:
        self.release.set()
        self.httpd.shutdown()
        self.httpd.server_close()
