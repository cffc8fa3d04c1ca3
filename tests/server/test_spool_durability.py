"""The agent's disk spool (issue 39), with the real agent and a real server: private (0700 and
0600) and flushed to the disk (the files and their directory fsynced); capped across runs;
an unreadable batch file is set aside (`unreadable/*.bad`), counted, and the rest is sent, by
the live sender and by `stoker upload` alike."""

import os
import stat
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from tests.harness.support import REPO, ServerProcess, free_port, upload_spool, wait_for
from trainer_agent.delivery.spool import UNREADABLE


def _run_while(server_url: str, name: str, until: Callable[[Any], bool], **options: Any) -> Any:
    """A Monitor's loop of 2 ms steps against `server_url` until `until(sender)`; its sender."""
    from trainer_agent import Monitor

    deadline = time.monotonic() + 120
    with Monitor(run_name=name, server=server_url, **options) as mon:
        assert mon.session is not None
        sender = mon.session.sender
        for _ in mon.iterate(iter(int, 1)):
            time.sleep(0.002)
            if until(sender):
                break
            assert time.monotonic() < deadline, f"{name}: the condition never held"
    return sender


def _batch_files(spool_dir: Path) -> list[Path]:
    return sorted(spool_dir.glob("*/batches/*.json"))


def _mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def test_the_spool_is_private_and_flushed_and_stoker_upload_sends_it_whole(
    tmp_path: Path, agent_spool_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    synced: set[str] = set()
    real_fsync = os.fsync

    def fsync(descriptor: int) -> None:  # records what is flushed, then flushes it
        synced.add(os.readlink(f"/proc/self/fd/{descriptor}"))
        real_fsync(descriptor)

    monkeypatch.setattr(os, "fsync", fsync)
    monkeypatch.setenv("STOKER_FLUSH_INTERVAL_S", "0.05")
    nowhere = f"http://127.0.0.1:{free_port()}"  # nothing listens: every batch is spooled
    _run_while(nowhere, "spooled", lambda _: len(_batch_files(agent_spool_dir)) >= 3)
    (run_dir,) = [p for p in agent_spool_dir.iterdir() if (p / "hello.json").exists()]
    for directory in (agent_spool_dir, run_dir, run_dir / "batches"):
        assert _mode(directory) == 0o700, directory
    files = [p for p in run_dir.rglob("*") if p.is_file()]
    assert {p.name for p in files} >= {"hello.json", "end.json", "server.txt", ".lock"}
    for path in files:
        assert _mode(path) == 0o600, path
    batches = _batch_files(agent_spool_dir)
    for path in batches:  # written to a temporary name, flushed, renamed
        assert f"{path}.tmp" in synced, path
    assert str(run_dir / "batches") in synced  # the renames flushed too
    assert str(run_dir / "end.json") in synced

    server = ServerProcess(data_dir=tmp_path / "server").start()
    try:
        upload_spool(agent_spool_dir, server.url)
        (run,) = server.get("/api/v1/runs", q="spooled")["data"]
        assert run["status"] == "finished" and run["summary"]["steps"] > 0
        assert run["summary"]["unreadable_spool_files"] == 0
    finally:
        server.stop()


def test_stoker_upload_sets_an_unreadable_batch_aside_and_sends_the_rest(
    tmp_path: Path, agent_spool_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Before, one corrupt file failed the whole directory at every `stoker upload`."""
    monkeypatch.setenv("STOKER_FLUSH_INTERVAL_S", "0.05")
    nowhere = f"http://127.0.0.1:{free_port()}"
    _run_while(nowhere, "one-corrupt", lambda _: len(_batch_files(agent_spool_dir)) >= 3)
    batches = _batch_files(agent_spool_dir)
    batches[1].write_bytes(b'{"type": "batch", "seq": 2, "steps": {"st')  # cut short
    server = ServerProcess(data_dir=tmp_path / "server").start()
    try:
        upload = subprocess.run(
            [sys.executable, "-m", "stoker_server.cli", "upload", str(agent_spool_dir),
             "--server", server.url],
            cwd=REPO, capture_output=True, text=True, timeout=120,
        )  # fmt: skip
        assert upload.returncode == 1, upload.stderr  # said: something was lost
        assert "1 batch files" in upload.stderr and "moved aside" in upload.stderr
        (run,) = server.get("/api/v1/runs", q="one-corrupt")["data"]
        assert run["status"] == "finished" and run["summary"]["steps"] > 0
        assert run["summary"]["unreadable_spool_files"] == 1
        (aside,) = (agent_spool_dir / UNREADABLE).iterdir()
        assert aside.name.endswith(f".{batches[1].name}.bad")
        assert _batch_files(agent_spool_dir) == []  # the run was sent: nothing left to retry
    finally:
        server.stop()


def test_the_live_sender_sets_an_unreadable_batch_aside_and_replays_the_rest(
    tmp_path: Path, agent_spool_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The server is down, the agent spools; one spooled file gets corrupted; the server comes
    back: the agent replays the rest and goes on (it retried the corrupt file for ever)."""
    monkeypatch.setenv("STOKER_FLUSH_INTERVAL_S", "0.05")
    port = free_port()
    server = ServerProcess(data_dir=tmp_path / "server", port=port)
    state: dict[str, Any] = {"corrupted": None}

    def until(sender: Any) -> bool:
        batches = _batch_files(agent_spool_dir)
        if state["corrupted"] is None and len(batches) >= 3:
            batches[1].write_bytes(b"\x00not json")
            state["corrupted"] = batches[1]
            server.start()  # back: the agent reconnects after its backoff
        return (
            state["corrupted"] is not None
            and sender.connected.is_set()
            and sender.acked_batches >= 3
            and not _batch_files(agent_spool_dir)
        )

    try:
        sender = _run_while(server.url, "live-replay", until)
        wait_for(
            lambda: server.get("/api/v1/runs", q="live-replay")["data"][0]["status"] == "finished",
            what="the run's end",
        )
        (run,) = server.get("/api/v1/runs", q="live-replay")["data"]
        assert run["summary"]["unreadable_spool_files"] == 1
        assert sender.acked_batches >= 3
        assert list((agent_spool_dir / UNREADABLE).glob("*.bad"))
    finally:
        server.stop()


def test_the_spool_has_a_cap_across_runs(
    tmp_path: Path, agent_spool_dir: Path, monkeypatch: pytest.MonkeyPatch, caplog: Any
) -> None:
    """Runs left behind by earlier processes count: with them over the total, a new run's
    batches are dropped and counted, and that is said once."""
    leftover = agent_spool_dir / "earlier-run" / "batches"
    leftover.mkdir(parents=True)
    (leftover / "000000000001.json").write_bytes(b"x" * 200_000)
    monkeypatch.setenv("STOKER_SPOOL_TOTAL_MAX_BYTES", "150000")
    monkeypatch.setenv("STOKER_FLUSH_INTERVAL_S", "0.05")
    nowhere = f"http://127.0.0.1:{free_port()}"
    with caplog.at_level("WARNING", logger="trainer_agent"):
        sender = _run_while(nowhere, "capped", lambda s: s.dropped_rows > 0)
    assert sender.dropped_rows > 0 and _batch_files(agent_spool_dir) == [
        leftover / "000000000001.json"
    ]
    said = [
        r.getMessage() for r in caplog.records if "STOKER_SPOOL_TOTAL_MAX_BYTES" in r.getMessage()
    ]
    assert len(said) == 1 and "150000-byte cap for all runs" in said[0]
