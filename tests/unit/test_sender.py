"""The sender against an injected in-memory WebSocket: commands, acks and counters."""

import datetime
import json
import queue
from pathlib import Path
from typing import Any

import numpy as np

from tests.harness.support import wait_for
from trainer_agent.capture.recorder import Recorder
from trainer_agent.config import AgentConfig
from trainer_agent.delivery.sender import Phase, Sender


class ScriptedSocket:
    """Answers hello with welcome and each batch with a command, then its ack."""

    def __init__(self) -> None:
        self.sent: list[dict[str, Any]] = []
        self._replies: queue.Queue[str] = queue.Queue()

    def send(self, text: str) -> None:
        message = json.loads(text)
        self.sent.append(message)
        if message["type"] == "hello":
            self._replies.put(json.dumps({"type": "welcome", "run_id": 7, "last_seq": 0}))
        elif message["type"] == "batch":
            command = {"type": "command", "name": "profile", "id": 1, "steps": 5}
            self._replies.put(json.dumps(command))
            self._replies.put(json.dumps({"type": "command", "name": "unknown-to-agent"}))
            self._replies.put(json.dumps({"type": "ack", "seq": message["seq"]}))
        elif message["type"] == "end":
            self._replies.put(json.dumps({"type": "ack", "end": True}))

    def recv(self, timeout: float | None = None) -> str:
        try:
            return self._replies.get(timeout=timeout)
        except queue.Empty:
            raise TimeoutError from None  # as the websockets client does

    def close(self) -> None:
        pass


def test_sender_passes_server_commands_on_and_sends_counters(tmp_path: Path) -> None:
    socket = ScriptedSocket()
    recorder = Recorder(max_rows=10)
    config = AgentConfig(flush_interval_s=0.05, spool_dir=tmp_path)
    hello = {"type": "hello", "run_key": "r" * 16}
    sender = Sender(config=config, hello=hello, buffer=recorder, connect=lambda url, **kw: socket)
    commands: list[dict[str, Any]] = []
    sender.on_command = commands.append
    for step in range(12):  # two more than the buffer holds
        recorder.steps.append(step, 1.0 + step, 0.1, None, None)
    sender.start()
    wait_for(lambda: sender.acked_batches >= 1, timeout_s=10, what="an ack")
    sender.close("finished", timeout_s=10)
    assert [c["name"] for c in commands][:2] == ["profile", "unknown-to-agent"]
    batches = [m for m in socket.sent if m["type"] == "batch"]
    assert batches[0]["steps"]["step"] == list(range(10))
    assert batches[0]["agent"] == {"dropped_rows": 2, "spooled_rows": 0}
    assert socket.sent[-1] == {"type": "end", "status": "finished"}


def test_sender_writes_diverged_losses_as_null_and_encodes_any_config_value(
    tmp_path: Path,
) -> None:
    socket = ScriptedSocket()
    recorder = Recorder(max_rows=10)
    config = AgentConfig(flush_interval_s=0.05, spool_dir=tmp_path)
    user_config = {
        "started": datetime.date(2026, 11, 22),
        "data": Path("/data/train"),
        3: "x",
        "lr": np.float32(0.5),
        "sizes": np.array([1, 2]),
    }
    hello = {"type": "hello", "run_key": "r" * 16, "config": user_config}
    sender = Sender(config=config, hello=hello, buffer=recorder, connect=lambda url, **kw: socket)
    recorder.metrics.append(0, "loss", float("nan"))
    recorder.metrics.append(1, "loss", float("inf"))
    recorder.metrics.append(2, "loss", 0.5)
    sender.start()
    wait_for(lambda: sender.acked_batches >= 1, timeout_s=10, what="an ack")
    sender.close("finished", timeout_s=10)
    assert socket.sent[0]["config"] == {
        "started": "2026-11-22",
        "data": "/data/train",
        "3": "x",
        "lr": 0.5,
        "sizes": [1, 2],
    }
    batch = next(m for m in socket.sent if m["type"] == "batch")
    assert batch["metrics"]["value"] == [None, None, 0.5]


def test_a_sender_moves_from_sending_to_draining_to_done(tmp_path: Path) -> None:
    socket = ScriptedSocket()
    recorder = Recorder(max_rows=10)
    config = AgentConfig(flush_interval_s=0.05, spool_dir=tmp_path)
    hello = {"type": "hello", "run_key": "p" * 16}
    phases: list[Phase] = []
    sender = Sender(config=config, hello=hello, buffer=recorder, connect=lambda url, **kw: socket)
    sender.before_final_flush = lambda: phases.append(sender.phase)
    assert sender.phase is Phase.NEW and sender.join(0)  # nothing to wait for
    recorder.steps.append(0, 1.0, 0.1, None, None)
    sender.start()
    assert sender.phase is Phase.SENDING and not sender.done
    wait_for(lambda: sender.acked_batches >= 1, timeout_s=10, what="an ack")
    sender.close("finished", timeout_s=10)
    assert phases == [Phase.DRAINING] and sender.phase is Phase.DONE and sender.done


def test_a_sender_never_started_is_done_once_closed(tmp_path: Path) -> None:
    config = AgentConfig(spool_dir=tmp_path)
    sender = Sender(
        config=config, hello={"type": "hello", "run_key": "n" * 16}, buffer=Recorder(max_rows=10)
    )
    assert not sender.done
    sender.close("finished")
    assert sender.done and sender.phase is Phase.NEW
