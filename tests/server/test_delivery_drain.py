"""Delivery at a run's end: the agent drains while the server acknowledges, says
truly what happened when it cannot, and what it leaves in the spool reaches the server with
no command, sent by the next agent that starts with the same spool directory."""

import os
import signal
import subprocess
import sys
import uuid
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.harness.support import REPO, ServerProcess, free_port, wait_for

# Steps per process. All four processes make them while the server is paused, so when they
# end, all of it (4 x this, plus samples and metrics) is still to be stored: several seconds
# of the server's work, more than the couple of seconds an exit used to allow, and hundreds
# of batches in flight. (400,000 a process took 81 s of CI's 30 minutes for the same finding.)
BACKLOG_STEPS = 200_000
# The test pauses the server for as long as the processes train: the agents must not take
# the pause for a dead server (that bound is only a safety net, never reached).
PATIENT_ACKS = {"STOKER_ACK_TIMEOUT_S": "600"}
# How long the exit drains while the server keeps acknowledging (60 s by default) is a bound
# this test does not judge: under a load of 10 the server stored 80 batches of the backlog in
# 60 s and the rest was left to the spool. It must not depend on this machine's speed.
PATIENT_DRAIN = {"STOKER_DRAIN_TIMEOUT_S": "900"}


def _loop(server_url: str, name: str, steps: int, *extra: str) -> list[str]:
    return [
        sys.executable, "-m", "tests.harness.loop_script", "--server", server_url, "--name", name,
        "--steps", str(steps), "--step-s", "0", *extra,
    ]  # fmt: skip


def _run_named(server: ServerProcess, name: str) -> dict[str, Any] | None:
    runs = server.get("/api/v1/runs", limit=1000)["data"]
    return next((r for r in runs if r["name"] == name), None)


def _stored_steps(server: ServerProcess, run_id: int) -> tuple[int, int, int | None, int | None]:
    """(rows, distinct steps, first step, last step) of a run, read from the store."""
    steps = server.steps(run_id).step.tolist()
    if not steps:
        return 0, 0, None, None
    return len(steps), len(set(steps)), min(steps), max(steps)


def _spooled_runs(spool_dir: Path) -> list[Path]:
    return (
        [p for p in spool_dir.iterdir() if (p / "hello.json").exists()]
        if spool_dir.exists()
        else []
    )


@pytest.mark.timeout(900)  # 800,000 steps stored after the pause, on a loaded machine too
def test_four_processes_ending_with_a_backlog_store_every_step_without_a_command(
    tmp_path: Path, agent_spool_dir: Path
) -> None:
    server = ServerProcess(data_dir=tmp_path / "server").start()
    assert server.process is not None
    go = tmp_path / "go"
    names = [f"backlog-{i}" for i in range(4)]
    children = [
        subprocess.Popen(
            _loop(server.url, name, BACKLOG_STEPS, "--start-file", str(go)),
            cwd=REPO,
            env={**os.environ, **PATIENT_ACKS, **PATIENT_DRAIN},
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for name in names
    ]
    try:
        # Each agent has said hello; then the server stops answering while they all train.
        wait_for(
            lambda: all(_run_named(server, name) for name in names), what="four connected runs"
        )
        server.process.send_signal(signal.SIGSTOP)
        go.touch()
        for child in children:
            assert child.stdout is not None
            assert child.stdout.readline().strip() == f"trained {BACKLOG_STEPS}"
        # Every process has ended its run with everything still to send; the server resumes.
        server.process.send_signal(signal.SIGCONT)
        outputs = [child.communicate(timeout=300) for child in children]
        for child, (_, stderr) in zip(children, outputs, strict=True):
            assert child.returncode == 0, stderr[-3000:]
            # The server was up all along: nothing may claim it was not.
            assert "unreachable" not in stderr and "cannot reach" not in stderr, stderr[-3000:]
            assert "stoker upload" not in stderr, stderr[-3000:]
        # Every step of every run is stored once the processes have exited: no upload needed.
        for name in names:
            run = _run_named(server, name)
            assert run is not None
            assert run["status"] == "finished"
            assert run["summary"]["steps"] == BACKLOG_STEPS
            assert run["summary"]["steps_to_upload"] == 0
            assert _stored_steps(server, run["id"]) == (
                BACKLOG_STEPS, BACKLOG_STEPS, 0, BACKLOG_STEPS - 1,
            )  # fmt: skip
        assert _spooled_runs(agent_spool_dir) == []
    finally:
        server.process.send_signal(signal.SIGCONT)
        for child in children:
            if child.poll() is None:
                child.kill()
                child.wait()
        server.stop()


def test_run_ended_with_steps_still_spooled_is_finished_and_the_next_agent_sends_them(
    tmp_path: Path, agent_spool_dir: Path
) -> None:
    # A reaper that interrupts silent running runs after 1 s.
    server = ServerProcess(
        data_dir=tmp_path / "server", env={"STOKER_HEARTBEAT_TIMEOUT_S": "1"}
    ).start()
    steps = 20_000
    try:
        # No time at all to drain: whatever the sender holds when the loop ends stays spooled.
        ended = subprocess.run(
            _loop(server.url, "left-behind", steps),
            cwd=REPO, env={**os.environ, "STOKER_DRAIN_TIMEOUT_S": "0"},
            capture_output=True, text=True, timeout=120,
        )  # fmt: skip
        assert ended.returncode == 0, ended.stderr[-3000:]
        assert "busy" in ended.stderr and "unreachable" not in ended.stderr, ended.stderr[-3000:]
        assert "next Stoker agent" in ended.stderr
        (left,) = _spooled_runs(agent_spool_dir)
        run = _run_named(server, "left-behind")
        assert run is not None
        # The server knows the run ended cleanly and that steps are still to come.
        assert run["status"] == "finished"
        assert run["summary"]["steps_to_upload"] > 0
        assert run["summary"]["steps"] + run["summary"]["steps_to_upload"] >= steps

        # A run whose agent vanished without an end is interrupted by the reaper; once it is,
        # the reaper has passed over the run above too and must have left it finished.
        httpx.post(
            f"{server.url}/api/v1/ingest",
            json={"hello": {"type": "hello", "protocol": 1, "run_key": uuid.uuid4().hex,
                            "name": "vanished"}},
            timeout=10,
        ).raise_for_status()  # fmt: skip
        wait_for(
            lambda: (_run_named(server, "vanished") or {}).get("status") == "interrupted",
            what="the reaper interrupting the run that has no agent",
        )
        assert _run_named(server, "left-behind")["status"] == "finished"  # type: ignore[index]

        # The next agent on this machine, same spool directory: no command is run.
        stop = tmp_path / "stop"
        nxt = subprocess.Popen(
            _loop(server.url, "next-agent", 0, "--stop-file", str(stop)),
            cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        )  # fmt: skip
        try:
            wait_for(
                lambda: (_run_named(server, "left-behind") or {}).get("summary", {}).get(
                    "steps_to_upload"
                ) == 0,
                timeout_s=60,
                what="the left-behind steps sent by the next agent",
            )  # fmt: skip
            # Its uploader removes the spooled run once the server acknowledged it all.
            wait_for(lambda: not left.exists(), timeout_s=60, what="the spooled run removed")
        finally:
            stop.touch()
            _, next_stderr = nxt.communicate(timeout=120)
        assert nxt.returncode == 0, next_stderr[-3000:]
        run = _run_named(server, "left-behind")
        assert run is not None
        assert run["status"] == "finished"
        assert _stored_steps(server, run["id"]) == (steps, steps, 0, steps - 1)
        assert not left.exists()
    finally:
        server.stop()


def test_spool_left_while_the_server_was_down_is_sent_by_the_next_agent(
    tmp_path: Path, agent_spool_dir: Path
) -> None:
    server = ServerProcess(data_dir=tmp_path / "server", port=free_port())
    steps = 300
    down = subprocess.run(
        _loop(server.url, "while-down", steps),
        cwd=REPO, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert down.returncode == 0, down.stderr[-3000:]
    # Refused connections: the message says unreachable, not busy, and what happens next.
    assert "unreachable" in down.stderr and "busy" not in down.stderr, down.stderr[-3000:]
    assert "next Stoker agent" in down.stderr
    (left,) = _spooled_runs(agent_spool_dir)

    server.start()
    stop = tmp_path / "stop"
    try:
        nxt = subprocess.Popen(
            _loop(server.url, "next-agent", 0, "--stop-file", str(stop)),
            cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        )  # fmt: skip
        try:
            run = wait_for(
                lambda: (r := _run_named(server, "while-down")) and r["status"] == "finished" and r,
                timeout_s=60,
                what="the run spooled while the server was down",
            )  # fmt: skip
            # Its uploader removes the spooled run once the server acknowledged it all (the
            # run reads finished a moment before: stopping the agent then raced the removal).
            wait_for(lambda: not left.exists(), timeout_s=60, what="the spooled run removed")
        finally:
            stop.touch()
            _, next_stderr = nxt.communicate(timeout=120)
        assert nxt.returncode == 0, next_stderr[-3000:]
        assert _stored_steps(server, run["id"]) == (steps, steps, 0, steps - 1)
        assert not left.exists()
    finally:
        server.stop()


FITS_THEN_EXIT = """
import sys
import numpy as np
import tensorflow as tf
from trainer_agent import StokerCallback

x = np.random.default_rng(0).normal(size=(64, 4)).astype("float32")
model = tf.keras.Sequential([tf.keras.Input((4,)), tf.keras.layers.Dense(1)])
model.compile("sgd", "mse")
for i in range(5):
    callback = StokerCallback(run_name=f"fit-{i}", server=sys.argv[1])
    model.fit(x, x[:, :1], batch_size=8, epochs=1, callbacks=[callback], verbose=0)
"""


def test_fits_that_return_before_the_ack_are_all_delivered_by_the_exit(
    tmp_path: Path, agent_spool_dir: Path
) -> None:
    """fit() does not wait for the server; the process's exit does, so a script that fits
    several times and exits at once loses nothing and each fit() is its own finished run."""
    server = ServerProcess(data_dir=tmp_path / "server").start()
    try:
        script = subprocess.run(
            [sys.executable, "-c", FITS_THEN_EXIT, server.url],
            cwd=REPO, capture_output=True, text=True, timeout=240,
        )  # fmt: skip
        assert script.returncode == 0, script.stderr[-3000:]
        for i in range(5):
            run = _run_named(server, f"fit-{i}")
            assert run is not None, f"fit-{i} missing"
            assert run["status"] == "finished"
            assert _stored_steps(server, run["id"]) == (8, 8, 0, 7)
            # Read on the sender thread, after fit() had started: still complete.
            assert run["environment"]["model"]["param_count"] == 5
            assert run["environment"]["tensorflow_version"]
        assert _spooled_runs(agent_spool_dir) == []
    finally:
        server.stop()
