"""What the public-script corpus (tests/corpus) found wrong, kept in CI by scripts of
our own of the same shapes (tests/examples/corpus_*.py): the public scripts themselves are never
committed and cannot run in CI. Each script runs plain and under `stoker run` against a real
`stoker serve`, and must behave the same.
"""

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest

from tests.harness.support import REPO, ServerProcess, wait_for

tf = pytest.importorskip("tensorflow")

EXAMPLES = REPO / "tests" / "examples"


@pytest.fixture(scope="module")
def shapes_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    server = ServerProcess(data_dir=tmp_path_factory.mktemp("corpus-shapes")).start()
    yield server
    server.stop()


def _run(command: list[str], env: dict[str, str], timeout_s: float = 240) -> dict[str, Any]:
    """Run to its end; the JSON object on its last line of output, with its exit code."""
    full_env = {**os.environ, "PYTHONPATH": str(REPO), "TF_CPP_MIN_LOG_LEVEL": "2", **env}
    try:
        done = subprocess.run(
            command, cwd=REPO, env=full_env, capture_output=True, text=True, timeout=timeout_s
        )
    except subprocess.TimeoutExpired as hung:
        pytest.fail(f"{command} hung ({timeout_s:.0f} s): {hung.stderr!r}")
    lines = [line for line in done.stdout.splitlines() if line.startswith("{")]
    assert lines, f"{command} printed no result (exit {done.returncode}): {done.stderr[-3000:]}"
    return {"exit": done.returncode, **json.loads(lines[-1])}


def _plain_and_stoker(
    server: ServerProcess, project: str, script: list[str], env: dict[str, str]
) -> tuple[dict[str, Any], dict[str, Any]]:
    """The script plain and under `stoker run`, side by side: each is seeded and mostly
    sleeps, so running them together changes neither's result and halves the wait."""
    stoker_command = [
        sys.executable, "-m", "trainer_agent.cli", "run", "--server", server.url,
        "--project", project, "--", sys.executable, *script,
    ]  # fmt: skip
    with ThreadPoolExecutor(max_workers=2) as pool:
        plain = pool.submit(_run, [sys.executable, *script], env)
        stoker = pool.submit(_run, stoker_command, env)
        return plain.result(), stoker.result()


def _finished_runs(server: ServerProcess, project: str, count: int) -> list[dict[str, Any]]:
    def finished() -> list[dict[str, Any]]:
        runs = server.get("/api/v1/runs", project=project, limit=100)["data"]
        done = len(runs) == count and all(r["status"] == "finished" for r in runs)
        return runs if done else []

    return wait_for(finished, what=f"{count} finished runs in {project}")


# Each Keras, with the first fit's length: on Keras 3 past the agent's first keepalive ping
# (20 s after it connects); that ping is the agent's whatever the Keras, so tf_keras's fit
# is short.
@pytest.fixture(
    scope="module",
    params=[({}, 22.0), ({"TF_USE_LEGACY_KERAS": "1"}, 2.0)],
    ids=["keras3", "tf_keras"],
)
def seeded_refit(request: pytest.FixtureRequest, shapes_server: ServerProcess) -> dict[str, Any]:
    """tests/examples/corpus_seeded_refit.py, plain and under stoker run, once per Keras."""
    env: dict[str, str] = request.param[0]
    if env and tuple(int(part) for part in tf.__version__.split(".")[:2]) >= (2, 16):
        pytest.importorskip("tf_keras")  # up to TF 2.15, tf.keras is Keras 2 itself
    project = f"seeded-refit-{request.param_index}"
    script = [str(EXAMPLES / "corpus_seeded_refit.py"), "--fit-s", str(request.param[1])]
    plain, stoker = _plain_and_stoker(shapes_server, project, script, env)
    return {"project": project, "plain": plain, "stoker": stoker}


@pytest.mark.timeout(600)
def test_seeded_refit_exits_alike_with_one_finished_run_per_fit(
    shapes_server: ServerProcess, seeded_refit: dict[str, Any]
) -> None:
    plain, stoker = seeded_refit["plain"], seeded_refit["stoker"]
    assert plain["exit"] == stoker["exit"] == 0
    runs = _finished_runs(shapes_server, seeded_refit["project"], 2)
    assert [run["summary"]["steps"] for run in runs] == [16, 16]  # 256 rows / 32, 2 epochs
    assert plain["losses"][0] == stoker["losses"][0]  # its model was built before any fit


@pytest.mark.timeout(600)
def test_seeded_refit_gives_the_same_losses_and_random_stream_under_stoker_run(
    seeded_refit: dict[str, Any],
) -> None:
    # websockets' keepalive ping (every 20 s on the agent's connection) took its payload from
    # random.getrandbits(32), the stream a seeded script's unseeded initializers draw from.
    plain, stoker = seeded_refit["plain"], seeded_refit["stoker"]
    assert stoker["next_draw"] == plain["next_draw"]
    assert stoker["losses"] == plain["losses"]
