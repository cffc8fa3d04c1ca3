"""Profiles asked for in a notebook that trains again at once (issue 38): one process, fits
back to back, each its own run. A capture asked 30 steps into a fit is `ready`; one whose
command reaches the agent as its fit ends (the process already on its next fit) is `failed`
with the reason, once its run ended, never left `requested`."""

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import pytest

from tests.harness.support import ServerProcess, wait_for

tf = pytest.importorskip("tensorflow")

from tests.harness.gpu_like import held_model  # noqa: E402

FEATURES = 8
BATCH = 16
STEPS = 120
HOLD_S = 0.005
ENDED = ("training ended before the capture could start", "ended before its capture started")


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    process = ServerProcess(data_dir=tmp_path_factory.mktemp("back-to-back")).start()
    yield process
    process.stop()


class AskForProfile(tf.keras.callbacks.Callback):  # type: ignore[misc]
    """Asks the server for a profile of this fit's run at batch `at` (as a user clicking the
    button would, here from the training thread so the moment is exact)."""

    def __init__(self, server: ServerProcess, stoker: Any, at: int) -> None:
        super().__init__()
        self.server, self.stoker, self.at = server, stoker, at
        self.answer: dict[str, Any] | None = None
        self.run_id: int | None = None

    def on_train_batch_end(self, batch: int, logs: Any = None) -> None:
        if batch != self.at:
            return
        session = self.stoker.run_session
        # The run must be on the server with its agent connected: only a live run is profiled.
        self.run_id = wait_for(lambda: session.sender.run_id, what="the run's id")
        url = f"{self.server.url}/api/v1/runs/{self.run_id}/profiles"
        response = wait_for(
            lambda: (r := httpx.post(url, json={"steps": 10}, timeout=10)).status_code == 202 and r,
            what="the profile request taken",
        )
        self.answer = response.json()


def _data() -> "tf.data.Dataset":
    x = np.random.default_rng(0).random((STEPS * BATCH, FEATURES), dtype=np.float32)
    return tf.data.Dataset.from_tensor_slices((x, x[:, :1])).batch(BATCH)


def _settled(server: ServerProcess, run_id: int, pid: int) -> dict[str, Any]:
    def done() -> dict[str, Any] | None:
        profile = server.get(f"/api/v1/runs/{run_id}/profiles/{pid}")
        return profile if profile["status"] in ("ready", "failed") else None

    return wait_for(done, timeout_s=120, interval_s=0.1, what=f"profile {pid} to settle")


def _wait_ended(server: ServerProcess, run_id: int) -> None:
    wait_for(
        lambda: server.get(f"/api/v1/runs/{run_id}")["status"] != "running",
        what=f"run {run_id} ended",
    )


def test_back_to_back_fits_end_every_profile_asked_for(
    server: ServerProcess, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from trainer_agent import StokerCallback

    monkeypatch.setenv("STOKER_FLUSH_INTERVAL_S", "0.2")  # connected within the fit
    monkeypatch.setenv("STOKER_SPOOL_DIR", str(tmp_path / "spool"))
    model = held_model(FEATURES, HOLD_S)
    asked: list[AskForProfile] = []
    # Fit 1: asked 30 steps in. Fit 2: asked at its last step, so the command reaches the
    # agent as the fit ends and the process trains fit 3 at once. Fit 4 trains on.
    for fit, at in enumerate((30, STEPS - 1, None, None)):
        stoker = StokerCallback(run_name=f"notebook-fit-{fit + 1}", server=server.url)
        callbacks: list[Any] = [stoker]
        if at is not None:
            asked.append(AskForProfile(server, stoker, at))
            callbacks.append(asked[-1])
        model.fit(stoker.wrap(_data()), epochs=1, callbacks=callbacks, verbose=0)
    first, second = asked
    assert first.answer and second.answer and first.run_id and second.run_id
    assert first.answer["status"] == second.answer["status"] == "requested"

    captured = _settled(server, first.run_id, first.answer["id"])
    assert captured["status"] == "ready", captured
    assert captured["first_step"] is not None and captured["first_step"] > 30

    _wait_ended(server, second.run_id)
    ended = time.monotonic()
    unstarted = _settled(server, second.run_id, second.answer["id"])
    print(f"\nthe unstarted profile failed {time.monotonic() - ended:.2f} s after its run ended")
    assert unstarted["status"] == "failed", unstarted
    assert any(reason in (unstarted["error"] or "") for reason in ENDED), unstarted
    # The process's later fits are runs of their own, untouched by that profile.
    runs = server.get("/api/v1/runs")["data"]
    later = [r for r in runs if r["name"] in ("notebook-fit-3", "notebook-fit-4")]
    assert len(later) == 2 and all(r["summary"]["steps"] == STEPS for r in later)
    for run in later:
        assert server.get(f"/api/v1/runs/{run['id']}/profiles")["count"] == 0
