"""A training process exits once its script returns, even when Keras left its last tf.data
iterator in reference cycles (a fit ended by `stop_training`) with a pipeline thread inside a
`numpy_function`. Freed only during the interpreter's finalization, such an iterator waits
forever for that thread, which can no longer take the GIL (plain Keras hangs there too): the
agent collects at exit, while threads still run."""

import json
import subprocess
import sys
from pathlib import Path

from tests.harness.support import REPO, ServerProcess, wait_for


def _stored_steps(server: ServerProcess) -> int:
    (count,) = server.rows("SELECT coalesce(sum(n), 0) FROM stepchunk")[0]
    return int(count)


def test_a_script_whose_fit_stopped_early_on_a_python_map_exits(
    server: ServerProcess, tmp_path: Path
) -> None:
    stop_file = tmp_path / "stop-training"
    training = subprocess.Popen(
        [sys.executable, "-m", "tests.harness.train_script", "--server", server.url,
         "--name", "exit", "--epochs", "1", "--batches", "1000000", "--batch-delay-s", "0.1",
         "--stop-file", str(stop_file)],
        cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        wait_for(lambda: _stored_steps(server) >= 20, timeout_s=120, what="steps stored")
        stop_file.touch()
        out, err = training.communicate(timeout=120)
    finally:
        training.kill()
    assert training.returncode == 0, err[-3000:]
    assert json.loads(out.strip().splitlines()[-1])["steps"] >= 20
