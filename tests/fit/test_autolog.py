"""`autolog()` and `stoker run`: unmodified scripts monitored, against a real `stoker serve`.

The example scripts in tests/examples never mention Stoker (except the one that brings its
own callback); `stoker run` runs them as a user would. The starved script's per-batch delay
is set from the GPU-like step measured here (tests/harness/gpu_like.py), so it starves on any
machine.
"""

import logging
import os
import subprocess
import sys
from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest

import trainer_agent
from tests.harness.detect_support import FAST_DETECTORS
from tests.harness.faults import fail_autolog, fail_wrap
from tests.harness.support import REPO, ServerProcess, wait_for

tf = pytest.importorskip("tensorflow")

from tests.harness.gpu_like import held_model, measure_step_s, starving_delay_s  # noqa: E402

pytestmark = pytest.mark.tf_matrix  # also on the oldest TF and tf_keras: make test-tf-matrix

EXAMPLES = REPO / "tests" / "examples"
HOLD_S = 0.015  # the examples' device step (starved_fit.py --hold-s default)
MISSING = object()


@pytest.fixture(scope="module")
def autolog_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    process = ServerProcess(data_dir=tmp_path_factory.mktemp("autolog"), env=FAST_DETECTORS)
    process.start()
    yield process
    process.stop()


@pytest.fixture(autouse=True)
def autolog_off() -> Iterator[None]:
    yield
    trainer_agent.autolog(disable=True)


def stoker_run(
    server: ServerProcess,
    *options: str,
    command: list[str],
    env: dict[str, str] | None = None,
    timeout_s: float = 240,
) -> int:
    """`stoker run OPTIONS -- COMMAND` in a child process; returns its exit code. A command
    still running after `timeout_s` fails the test as hung."""
    env = {**os.environ, "PYTHONPATH": str(REPO), "TF_CPP_MIN_LOG_LEVEL": "2", **(env or {})}
    try:
        done = subprocess.run(
            [sys.executable, "-m", "trainer_agent.cli", "run", "--server", server.url, *options,
             "--", *command],
            cwd=REPO, env=env, capture_output=True, text=True, timeout=timeout_s,
        )  # fmt: skip
    except subprocess.TimeoutExpired as hung:
        pytest.fail(f"{command} hung under stoker run ({timeout_s:.0f} s): {hung.stderr!r}")
    print(done.stdout, done.stderr)
    return done.returncode


def _runs(server: ServerProcess, project: str) -> list[dict[str, Any]]:
    return server.get("/api/v1/runs", project=project, limit=100)["data"]


def _only_finished_run(server: ServerProcess, project: str) -> dict[str, Any]:
    runs = wait_for(
        lambda: [r for r in _runs(server, project) if r["status"] == "finished"],
        what=f"a finished run in {project}",
    )
    assert len(_runs(server, project)) == 1
    return runs[0]


def _finished_runs(server: ServerProcess, project: str, count: int) -> list[dict[str, Any]]:
    """The project's runs once there are `count`, all finished."""

    def finished() -> list[dict[str, Any]]:
        runs = _runs(server, project)
        done = len(runs) == count and all(r["status"] == "finished" for r in runs)
        return runs if done else []

    return wait_for(finished, what=f"{count} finished runs in {project}")


def _model() -> Any:
    model = tf.keras.Sequential([tf.keras.Input(shape=(8,)), tf.keras.layers.Dense(1)])
    model.compile(optimizer="sgd", loss="mse")
    return model


def _dataset(batches: int = 8) -> Any:
    x = np.random.default_rng(0).normal(size=(batches * 16, 8)).astype("float32")
    return tf.data.Dataset.from_tensor_slices((x, x[:, :1])).batch(16)


def test_stoker_run_starved_tf_data_fit_is_flagged_with_measured_wait(
    autolog_server: ServerProcess,
) -> None:
    x = np.random.default_rng(0).normal(size=(20 * 64, 32)).astype("float32")
    source = tf.data.Dataset.from_tensor_slices((x, x[:, :1])).batch(64)
    delay_s = starving_delay_s(measure_step_s(held_model(32, HOLD_S), source))
    script = [sys.executable, str(EXAMPLES / "starved_fit.py"), "--delay-s", f"{delay_s:.4f}"]
    assert stoker_run(autolog_server, "--project", "starved", "--name", "s1", command=script) == 0

    run = _only_finished_run(autolog_server, "starved")
    assert run["name"] == "s1"
    waits = autolog_server.get(f"/api/v1/runs/{run['id']}/steps")["wait"]
    assert len(waits) == 60 and all(w is not None for w in waits[1:])  # measured: x was wrapped
    diagnosis = autolog_server.get(f"/api/v1/runs/{run['id']}/diagnosis")
    assert diagnosis["source"] == "measured"
    assert diagnosis["verdict"] == "highly_input_bound"
    evidence = {e["key"]: e["value"] for e in diagnosis["evidence"]}
    assert evidence["prefetch"] is False  # wrap described the script's pipeline


def test_stoker_run_exits_while_tf_data_is_inside_a_python_map(
    autolog_server: ServerProcess,
) -> None:
    # When fit returns, tf.data's reader is inside the script's numpy_function (the map is
    # slower than the step) and each later call sleeps: an iterator Stoker kept past the fit
    # was destroyed at interpreter shutdown and waited forever for the GIL.
    x = np.random.default_rng(0).normal(size=(20 * 64, 8)).astype("float32")
    source = tf.data.Dataset.from_tensor_slices((x, x[:, :1])).batch(64)
    delay_s = starving_delay_s(measure_step_s(held_model(8, HOLD_S), source))
    after_fit_s = 2.0
    script = [sys.executable, str(EXAMPLES / "python_map_repeat_fit.py"),
              "--delay-s", f"{delay_s:.4f}", "--after-fit-s", str(after_fit_s)]  # fmt: skip
    # Without Stoker it exits within a few of its after-fit calls; the hang was forever.
    assert stoker_run(autolog_server, "--project", "python-map", command=script,
                      timeout_s=120) == 0  # fmt: skip
    run = _only_finished_run(autolog_server, "python-map")
    assert run["summary"]["steps"] == 40


def test_stoker_run_keeps_a_legacy_keras_fit_compiled_beside_tensorboard(
    autolog_server: ServerProcess, tmp_path: Any
) -> None:
    # tf_keras's train_function is a tf.function whose __wrapped__ is the Python step: Stoker
    # unwrapped it, so every step ran eagerly and TensorBoard's graph writer raised.
    legacy = {}  # up to TF 2.15, tf.keras is Keras 2 itself (and TF_USE_LEGACY_KERAS breaks it)
    if tuple(int(part) for part in tf.__version__.split(".")[:2]) >= (2, 16):
        pytest.importorskip("tf_keras")
        legacy = {"TF_USE_LEGACY_KERAS": "1"}
    script = [sys.executable, str(EXAMPLES / "tensorboard_fit.py"), "--logdir", str(tmp_path)]
    code = stoker_run(autolog_server, "--project", "legacy-tensorboard", command=script, env=legacy)
    assert code == 0  # 3: a train step ran eagerly; 1: TensorBoard raised
    runs = _finished_runs(autolog_server, "legacy-tensorboard", 2)
    assert sorted(r["summary"]["steps"] for r in runs) == [16, 32]


def test_stoker_run_monitors_a_keras_3_fit_and_a_tf_keras_fit_in_one_process(
    autolog_server: ServerProcess,
) -> None:
    # Each Keras takes only its own callbacks: the tf_keras fit was left unmonitored.
    if tuple(int(part) for part in tf.__version__.split(".")[:2]) < (2, 16):
        pytest.skip("up to TF 2.15 there is one Keras")
    pytest.importorskip("tf_keras")
    script = [sys.executable, str(EXAMPLES / "two_kerases_fit.py")]
    assert stoker_run(autolog_server, "--project", "two-kerases", command=script) == 0
    runs = _finished_runs(autolog_server, "two-kerases", 2)
    assert [r["summary"]["steps"] for r in runs] == [16, 16]


def test_stoker_run_monitors_fits_inside_a_mirrored_strategy_scope(
    autolog_server: ServerProcess,
) -> None:
    # Stoker's stamp variables were made inside the strategy's scope, became mirrored, and the
    # stamping stage raised NotImplementedError: the agent disabled itself, 0 runs stored.
    script = [sys.executable, str(EXAMPLES / "mirrored_guide_fit.py")]
    assert stoker_run(autolog_server, "--project", "mirrored-guide", command=script) == 0
    runs = _finished_runs(autolog_server, "mirrored-guide", 3)
    for run in runs:
        assert run["summary"]["steps"] == 10
        waits = autolog_server.get(f"/api/v1/runs/{run['id']}/steps")["wait"]
        assert all(w is not None for w in waits[1:])  # the wrapped dataset was stamped


def test_stoker_run_numpy_fit_has_steps_and_inferred_wait(autolog_server: ServerProcess) -> None:
    script = [sys.executable, str(EXAMPLES / "numpy_fit.py")]
    assert stoker_run(autolog_server, "--project", "numpy", "--tag", "a", "--tag", "b",
                      command=script) == 0  # fmt: skip

    run = _only_finished_run(autolog_server, "numpy")
    assert sorted(run["tags"]) == ["a", "b"]
    series = autolog_server.get(f"/api/v1/runs/{run['id']}/steps")
    assert len(series["step"]) == 2 * 16  # 512 training rows (validation_split=0.2) / 32
    assert all(w is None for w in series["wait"])
    assert autolog_server.get(f"/api/v1/runs/{run['id']}/diagnosis")["source"] == "fallback"


def test_stoker_run_script_with_its_own_callback_makes_exactly_one_run(
    autolog_server: ServerProcess,
) -> None:
    script = [sys.executable, str(EXAMPLES / "own_callback_fit.py")]
    assert stoker_run(autolog_server, "--project", "own", command=script) == 0

    run = _only_finished_run(autolog_server, "examples")
    assert run["name"] == "own-callback"
    assert _runs(autolog_server, "own") == []


def test_stoker_run_exits_with_the_commands_code(autolog_server: ServerProcess) -> None:
    command = [sys.executable, "-c", "import sys; sys.exit(3)"]
    assert stoker_run(autolog_server, command=command) == 3


def test_autolog_imports_no_keras_and_patches_keras_when_it_is_imported() -> None:
    check = (
        "import sys, trainer_agent\n"
        "trainer_agent.autolog()\n"
        "assert not {'tensorflow', 'keras', 'tf_keras'} & set(sys.modules), sys.modules.keys()\n"
        "import tensorflow as tf\n"
        "assert tf.keras.Model.fit.__stoker_autolog__\n"
    )
    done = subprocess.run([sys.executable, "-c", check], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr


def test_autolog_patches_once_and_disable_restores_fit(autolog_server: ServerProcess) -> None:
    before = tf.keras.Model.__dict__.get("fit", MISSING)
    trainer_agent.autolog(project="twice", server=autolog_server.url)
    patched = tf.keras.Model.fit
    trainer_agent.autolog(project="twice", server=autolog_server.url)
    assert tf.keras.Model.fit is patched is not before

    _model().fit(_dataset(), epochs=1, verbose=0)
    trainer_agent.flush()
    run = _only_finished_run(autolog_server, "twice")  # one callback, though called twice
    waits = autolog_server.get(f"/api/v1/runs/{run['id']}/steps")["wait"]
    assert len(waits) == 8 and all(w is not None for w in waits[1:])

    trainer_agent.autolog(disable=True)
    assert tf.keras.Model.__dict__.get("fit", MISSING) is before
    _model().fit(_dataset(), epochs=1, verbose=0)
    trainer_agent.flush()
    assert len(_runs(autolog_server, "twice")) == 1


def _trained(history: Any, epochs: int) -> bool:
    return len(history.history["loss"]) == epochs


def test_fit_the_patch_cannot_understand_runs_unmonitored_and_logs_once(
    autolog_server: ServerProcess, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    fail_autolog(monkeypatch)  # the patch raises before the fit
    trainer_agent.autolog(project="patch-fault", server=autolog_server.url)
    with caplog.at_level(logging.WARNING, logger="trainer_agent"):
        assert _trained(_model().fit(_dataset(), epochs=2, verbose=0), 2)
        assert _trained(_model().fit(_dataset(), epochs=2, verbose=0), 2)
    assert len([r for r in caplog.records if "steps aside" in r.getMessage()]) == 1
    trainer_agent.flush()
    assert _runs(autolog_server, "patch-fault") == []


def test_fit_whose_wrap_fails_is_monitored_without_input_wait(
    autolog_server: ServerProcess, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    fail_wrap(monkeypatch)
    trainer_agent.autolog(disable=True)  # forgets what was said (an earlier test's wrap fault)
    trainer_agent.autolog(project="wrap-fault", server=autolog_server.url)
    with caplog.at_level(logging.WARNING, logger="trainer_agent"):
        assert _trained(_model().fit(_dataset(), epochs=2, verbose=0), 2)
        assert _trained(_model().fit(_dataset(), epochs=1, verbose=0), 1)
    messages = [r.getMessage() for r in caplog.records]
    assert not [m for m in messages if "agent disabled" in m]
    assert len([m for m in messages if "input wait is not measured" in m]) == 1  # said once
    trainer_agent.flush()
    runs = _runs(autolog_server, "wrap-fault")
    assert sorted((r["status"], r["summary"]["steps"]) for r in runs) == [
        ("finished", 8), ("finished", 16)
    ]  # fmt: skip
    for run in runs:
        assert all(w is None for w in autolog_server.get(f"/api/v1/runs/{run['id']}/steps")["wait"])


def test_validation_data_is_not_wrapped(autolog_server: ServerProcess) -> None:
    trainer_agent.autolog(project="validation", server=autolog_server.url)
    model = _model()
    model.fit(_dataset(), validation_data=_dataset(4), epochs=2, verbose=0)
    trainer_agent.flush()
    run = _only_finished_run(autolog_server, "validation")
    # Only the training elements were stamped: 8 steps per epoch, each with its wait.
    waits = autolog_server.get(f"/api/v1/runs/{run['id']}/steps")["wait"]
    assert len(waits) == 16 and all(w is not None for w in waits[1:])
