"""Many fits in one process (a fit per epoch, active learning, RL loops): they share the
sender's thread and one open HTTP connection, yet each fit is its own run with all its steps,
and a server that is down for one of them loses none of its records."""

import threading
from pathlib import Path

import numpy as np
import psutil
import pytest

import trainer_agent
from tests.harness.support import ServerProcess, wait_for
from trainer_agent.delivery import sender as sender_module

tf = pytest.importorskip("tensorflow")

BATCH = 8
STEPS = 5


@pytest.fixture(autouse=True)
def short_runs(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every fit here ends before its sender's first flush, whatever this machine's speed:
    each is then sent whole at its end, as a short fit is."""
    monkeypatch.setenv("STOKER_FLUSH_INTERVAL_S", "600")
    # A worker waiting for the next run must not retire between two fits of a slow machine.
    monkeypatch.setattr(sender_module._Workers, "IDLE_S", 3600.0)


def _model() -> "tf.keras.Model":
    model = tf.keras.Sequential(
        [tf.keras.Input(shape=(8,)), tf.keras.layers.Dense(4), tf.keras.layers.Dense(1)]
    )
    model.compile(optimizer="sgd", loss="mse")
    return model


def _dataset() -> "tf.data.Dataset":
    x = np.random.default_rng(0).normal(size=(STEPS * BATCH, 8)).astype("float32")
    return tf.data.Dataset.from_tensor_slices((x, x.sum(axis=1, keepdims=True))).batch(BATCH)


def _fit(model: "tf.keras.Model", data: "tf.data.Dataset", name: str, server_url: str) -> None:
    from trainer_agent import StokerCallback

    callback = StokerCallback(run_name=name, server=server_url)
    model.fit(callback.wrap(data), epochs=1, callbacks=[callback], verbose=0)


def _sender_threads() -> set[threading.Thread]:
    return {thread for thread in threading.enumerate() if thread.name == "stoker-sender"}


def _open_connections(server: ServerProcess) -> list[int]:
    """Local ports of this process's established TCP connections to the server."""
    return [
        c.laddr.port
        for c in psutil.Process().net_connections(kind="tcp")
        if c.raddr and c.raddr.port == server.port and c.status == psutil.CONN_ESTABLISHED
    ]


def _runs_by_name(server: ServerProcess) -> dict[str, dict]:
    return {run["name"]: run for run in server.get("/api/v1/runs", limit=100)["data"]}


def _stored_steps(server: ServerProcess, run_id: int) -> list[int]:
    return server.get(f"/api/v1/runs/{run_id}/steps")["step"]


def test_fits_share_the_sender_thread_and_one_connection_and_each_is_its_own_run(
    tmp_path: Path,
) -> None:
    server = ServerProcess(data_dir=tmp_path / "server").start()
    try:
        model, data = _model(), _dataset()
        names = [f"fit-{i}" for i in range(3)]
        threads, connections = [], []
        for name in names:
            _fit(model, data, name, server.url)
            assert trainer_agent.flush(60)
            threads.append(_sender_threads())
            connections.append(_open_connections(server))
        # The first fit may start the sender's thread; the next ones start none.
        assert threads[0] and threads[1] <= threads[0] and threads[2] <= threads[0]
        # Each fit went over the one connection the process keeps open (a client per request
        # would leave none open; a WebSocket per run, none once its run ended).
        assert [len(ports) for ports in connections] == [1, 1, 1], connections
        runs = _runs_by_name(server)
        assert sorted(runs) == names
        assert len({run["id"] for run in runs.values()}) == 3
        for name in names:
            run = runs[name]
            assert run["status"] == "finished"
            assert run["summary"]["steps"] == STEPS
            assert _stored_steps(server, run["id"]) == list(range(STEPS))
            assert run["environment"]["fit_params"]["steps"] == STEPS
    finally:
        server.stop()


def test_a_server_down_at_the_second_fit_loses_nothing(
    tmp_path: Path, agent_spool_dir: Path
) -> None:
    server = ServerProcess(data_dir=tmp_path / "server").start()
    model, data = _model(), _dataset()
    try:
        _fit(model, data, "before", server.url)
        assert trainer_agent.flush(60)
        server.stop()
        _fit(model, data, "while-down", server.url)
        assert trainer_agent.flush(60)
        left = [p for p in agent_spool_dir.iterdir() if (p / "hello.json").exists()]
        assert len(left) == 1  # the fit's records wait in the spool
        server = ServerProcess(data_dir=tmp_path / "server", port=server.port).start()
        # The next fit of this process sends what the earlier one left, with no command.
        _fit(model, data, "after", server.url)
        assert trainer_agent.flush(60)
        # The spooled run's hello makes it appear; its end is stored after its batches.
        runs = wait_for(
            lambda: (r := _runs_by_name(server)) and len(r) == 3
            and all(run["status"] != "running" for run in r.values()) and r,
            what="the spooled run uploaded to its end",
        )  # fmt: skip
        for name in ("before", "while-down", "after"):
            run = runs[name]
            assert run["status"] == "finished"
            assert _stored_steps(server, run["id"]) == list(range(STEPS))
        wait_for(
            lambda: not any((p / "hello.json").exists() for p in agent_spool_dir.iterdir()),
            what="the uploaded run removed from the spool",
        )
    finally:
        server.stop()
