"""The agent's spool on a full disk: training is unaffected, records that do not fit are
dropped and counted, and the count reaches the run when the spool is uploaded.

The spool lives on a real 48 KiB tmpfs, mounted in a private mount namespace (`unshare -m`
as root, `unshare -rm` otherwise) around the training process, while the server is down.
"""

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import httpx
import pytest

from tests.harness.support import REPO, ServerProcess, free_port, upload_spool

TINY_FS = "size=48k"
# Mount a tiny tmpfs on $0, run the command, then copy what it left out for the test to read.
WRAPPER = (
    f'mount -t tmpfs -o {TINY_FS} tmpfs "$0" || exit 97; '
    '"$@"; rc=$?; df -k "$0" >&2; cp -r "$0"/. "$STOKER_TEST_SPOOL_COPY"/; exit $rc'
)


def _unshare() -> list[str] | None:
    """The unshare command that may mount a tmpfs here, or None when none can."""
    if shutil.which("unshare") is None:
        return None
    for command in (["unshare", "-m"], ["unshare", "-rm"]):
        if command == ["unshare", "-m"] and os.geteuid() != 0:
            continue
        probe = subprocess.run(
            [*command, "sh", "-c", f"mount -t tmpfs -o {TINY_FS} tmpfs /mnt"],
            capture_output=True,
            timeout=30,
        )
        if probe.returncode == 0:
            return command
    return None


def test_full_spool_disk_drops_with_a_count_and_training_finishes(tmp_path: Path) -> None:
    unshare = _unshare()
    if unshare is None:
        pytest.skip("cannot mount a small tmpfs here (needs root or user namespaces)")
    spool_mount = tmp_path / "spool-mount"
    spool_mount.mkdir()
    spool_copy = tmp_path / "spool-copy"
    spool_copy.mkdir()
    dead_server = f"http://127.0.0.1:{free_port()}"  # nothing listens: the server is down
    epochs, batches = 2, 150
    env = {
        **os.environ,
        "STOKER_SPOOL_DIR": str(spool_mount),
        "STOKER_TEST_SPOOL_COPY": str(spool_copy),
        "STOKER_SAMPLE_INTERVAL_S": "0.1",
        # A batch file every 0.2 s: the 6 s or more of training write 30 or more files of a
        # 4 KiB page or more each, well over the disk's 12 pages however the machine's load
        # stretches the run. (At the default 1 s, its ~12 files only just filled it, and a
        # loaded run once ended with every step stored: no record dropped.)
        "STOKER_FLUSH_INTERVAL_S": "0.2",
        "STOKER_CLOSE_TIMEOUT_S": "3",
    }
    training = subprocess.run(
        [*unshare, "sh", "-c", WRAPPER, str(spool_mount),
         sys.executable, "-m", "tests.harness.train_script", "--server", dead_server, "--name",
         "disk-full", "--epochs", str(epochs), "--batches", str(batches), "--batch-delay-s",
         "0.02"],
        cwd=REPO, env=env, capture_output=True, text=True, timeout=240,
    )  # fmt: skip

    # Training ran to the end, unharmed.
    assert training.returncode == 0, training.stderr[-3000:]
    assert json.loads(training.stdout.strip().splitlines()[-1]) == {"steps": epochs * batches}
    # One warning when the disk refused a write (not one per batch), and the count at exit.
    assert training.stderr.count("cannot write the spool") == 1, training.stderr[-3000:]
    assert "records were dropped" in training.stderr, training.stderr[-3000:]

    (run_dir,) = [p for p in spool_copy.iterdir() if (p / "hello.json").exists()]
    end = json.loads((run_dir / "end.json").read_text())
    dropped = end["agent"]["dropped_rows"]
    assert dropped > 0
    assert not list(run_dir.rglob("*.tmp")), "a failed write left a partial file behind"
    assert list((run_dir / "batches").glob("*.json")), "nothing was spooled before the disk filled"

    server = ServerProcess(data_dir=tmp_path / "server").start()
    try:
        upload_spool(spool_copy, server.url)
        (run,) = httpx.get(f"{server.url}/api/v1/runs", params={"q": "disk-full"}).json()["data"]
        summary = run["summary"]
        assert summary["dropped_rows"] == dropped
        # Every step was either stored or counted among the dropped records.
        assert 0 < summary["steps"] < epochs * batches
        assert summary["steps"] + dropped >= epochs * batches
    finally:
        server.stop()
