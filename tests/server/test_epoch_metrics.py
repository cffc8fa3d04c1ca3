"""Epoch metrics through the real wire on SQLite and PostgreSQL: the `epochs`
batch section's validation, idempotent and resumed re-sends, the metrics API's epoch series
and step aggregation, the summary's last/best values (and the config override), the runs
list sorted by a best epoch metric, and the compare answer."""

import json
import uuid
from typing import Any

import httpx
import pytest

from stoker_server.ingest.summary import epoch_metric_summary, metric_goal
from tests.harness.detect_support import ScriptedAgent
from tests.harness.support import ServerProcess

T0 = 1.7e9


def _hello(**overrides: Any) -> dict[str, Any]:
    return {"type": "hello", "protocol": 1, "run_key": uuid.uuid4().hex, **overrides}


def _epochs(
    values: dict[str, list[float | None]], *, first_epoch: int = 0, steps_per_epoch: int = 10
) -> dict[str, Any]:
    """An `epochs` section: every named metric at consecutive epochs from `first_epoch`."""
    section: dict[str, list[Any]] = {"epoch": [], "step": [], "t": [], "name": [], "value": []}
    for name, series in values.items():
        for i, value in enumerate(series):
            epoch = first_epoch + i
            section["epoch"].append(epoch)
            section["step"].append((epoch + 1) * steps_per_epoch)
            section["t"].append(T0 + epoch)
            section["name"].append(name)
            section["value"].append(value)
    return section


def _upload(
    server: ServerProcess, hello: dict[str, Any], batches: list[dict[str, Any]], end: bool = True
) -> httpx.Response:
    body: dict[str, Any] = {"hello": hello, "batches": batches}
    if end:
        body["end"] = {"type": "end"}
    return httpx.post(f"{server.url}/api/v1/ingest", json=body, timeout=60)


def _run_id(server: ServerProcess, hello: dict[str, Any], batches: list[dict[str, Any]]) -> int:
    response = _upload(server, hello, batches)
    assert response.status_code == 200, response.text
    return response.json()["run_id"]


def _epoch_series(server: ServerProcess, run_id: int, **params: Any) -> dict[str, Any]:
    out = server.get(f"/api/v1/runs/{run_id}/metrics", **params)
    return {s["name"]: s for s in out["series"] if s["axis"] == "epoch"}


# -- validation --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("change", "said"),
    [
        (lambda e: e["value"].pop(), "column 'value' has 2 values"),
        (lambda e: e.update(extra=[1, 2, 3]), "extra"),
        (lambda e: e["name"].__setitem__(1, ""), "name"),
        (lambda e: e["name"].__setitem__(1, "x" * 101), "name"),
        (lambda e: e["epoch"].__setitem__(0, -1), "epoch"),
        (lambda e: e["t"].__setitem__(0, None), "t"),
        (lambda e: e.pop("step"), "step"),
    ],
)
def test_epochs_section_invalid_is_refused_and_stores_nothing(
    db_server: ServerProcess, change: Any, said: str
) -> None:
    good = _epochs({"loss": [1.0]})
    bad = _epochs({"loss": [1.0, 0.5, 0.25]})
    change(bad)
    hello = _hello(project=uuid.uuid4().hex)
    batches = [
        {"type": "batch", "seq": 1, "epochs": good},
        {"type": "batch", "seq": 2, "epochs": bad},
    ]
    response = _upload(db_server, hello, batches)
    assert response.status_code == 422, response.text
    assert said in json.dumps(response.json()["detail"])
    # Nothing half-written: not even the valid first batch's run.
    assert db_server.get("/api/v1/runs", project=hello["project"])["count"] == 0


def test_epochs_section_invalid_over_websocket_gets_an_error_and_the_socket_stays_usable(
    db_server: ServerProcess,
) -> None:
    agent = ScriptedAgent(db_server, project=uuid.uuid4().hex)
    try:
        bad = _epochs({"val_loss": [0.5, 0.4]})
        bad["step"] = [10]
        agent.ws.send(json.dumps({"type": "batch", "seq": 1, "epochs": bad}))
        reply = json.loads(agent.ws.recv(timeout=10))
        assert reply["type"] == "error" and reply["seq"] == 1
        assert "'step' has 1" in reply["message"], reply
        agent.send(epochs=_epochs({"val_loss": [0.5, float("nan")]}))
        agent.end()
    finally:
        agent.close()
    series = _epoch_series(db_server, agent.run_id)["val_loss"]
    assert series["epoch"] == [0, 1] and series["value"] == [0.5, None]


# -- storage: replays and resumed runs ---------------------------------------------------------


def test_epochs_resent_with_the_same_seq_are_stored_once(db_server: ServerProcess) -> None:
    run_key = uuid.uuid4().hex
    batch = {"type": "batch", "seq": 1, "epochs": _epochs({"val_loss": [0.9, 0.7]})}
    first = _run_id(db_server, _hello(run_key=run_key), [batch])
    again = _run_id(db_server, _hello(run_key=run_key), [batch])  # a replay after a reconnect
    assert again == first
    series = _epoch_series(db_server, first)["val_loss"]
    assert series["total"] == 2 and series["value"] == [0.9, 0.7]
    summary = db_server.get(f"/api/v1/runs/{first}")["summary"]["epoch_metrics"]["val_loss"]
    assert summary["epochs"] == 2


def test_an_epoch_reported_again_by_a_resumed_run_keeps_the_latest_value(
    db_server: ServerProcess,
) -> None:
    run_key = uuid.uuid4().hex
    # Epochs 0 and 1; the process dies; a new process (another stream, its seq from 1)
    # resumes from a checkpoint of epoch 0 and reports epochs 1 and 2.
    before = {"type": "batch", "seq": 1, "epochs": _epochs({"val_loss": [0.9, 0.2]})}
    run_id = _run_id(db_server, _hello(run_key=run_key, host="a"), [before])
    resumed = _epochs({"val_loss": [0.6, 0.5]}, first_epoch=1, steps_per_epoch=12)
    _run_id(
        db_server,
        _hello(run_key=run_key, host="b"),
        [{"type": "batch", "seq": 1, "epochs": resumed}],
    )
    series = _epoch_series(db_server, run_id)["val_loss"]
    assert series["epoch"] == [0, 1, 2]
    assert series["value"] == [0.9, 0.6, 0.5]
    assert series["step"] == [10, 24, 36]
    summary = db_server.get(f"/api/v1/runs/{run_id}")["summary"]["epoch_metrics"]["val_loss"]
    # The replaced 0.2 is no longer the best.
    assert (summary["best"], summary["best_epoch"]) == (0.5, 2)
    assert (summary["last"], summary["last_epoch"], summary["epochs"]) == (0.5, 2, 3)


# -- the metrics API ---------------------------------------------------------------------------


def test_metrics_api_serves_epoch_series_beside_step_series(db_server: ServerProcess) -> None:
    steps = list(range(30))
    metrics = {"step": steps, "name": ["loss"] * 30, "value": [1.0 - s / 100 for s in steps]}
    epochs = _epochs(
        {"loss": [0.9, 0.8, 0.7], "val_loss": [1.0, 0.85, 0.9], "val_accuracy": [0.5, 0.6, 0.65]}
    )
    keras_env = {"fit_params": {"epochs": 3, "steps": 10}, "tensorflow_version": "2.x"}
    run_id = _run_id(
        db_server,
        _hello(environment=keras_env),
        [{"type": "batch", "seq": 1, "metrics": metrics, "epochs": epochs}],
    )
    out = db_server.get(f"/api/v1/runs/{run_id}/metrics")
    assert out["names"] == ["loss"]
    assert out["epoch_names"] == ["loss", "val_accuracy", "val_loss"]
    kinds = [(s["name"], s["axis"]) for s in out["series"]]
    assert kinds == [
        ("loss", "step"),
        ("loss", "epoch"),
        ("val_accuracy", "epoch"),
        ("val_loss", "epoch"),
    ]
    step_loss = out["series"][0]
    assert step_loss["aggregation"] == "running_mean_over_epoch"
    assert step_loss["step"] == steps
    val_loss = out["series"][3]
    assert val_loss["epoch"] == [0, 1, 2]
    assert val_loss["step"] == [10, 20, 30]
    assert val_loss["value"] == [1.0, 0.85, 0.9]
    assert "aggregation" not in val_loss

    only_epochs = db_server.get(f"/api/v1/runs/{run_id}/metrics", axis="epoch", name="val_loss")
    assert [(s["name"], s["axis"]) for s in only_epochs["series"]] == [("val_loss", "epoch")]
    only_steps = db_server.get(f"/api/v1/runs/{run_id}/metrics", axis="step")
    assert [(s["name"], s["axis"]) for s in only_steps["series"]] == [("loss", "step")]
    late = db_server.get(f"/api/v1/runs/{run_id}/metrics", axis="epoch", after_step=10)
    assert [s["epoch"] for s in late["series"]] == [[1, 2]] * 3
    bad = httpx.get(f"{db_server.url}/api/v1/runs/{run_id}/metrics", params={"axis": "time"})
    assert bad.status_code == 422

    # A custom loop (no Keras fit in its environment) logs plain values.
    loop_id = _run_id(
        db_server,
        _hello(environment={"agent": "stoker-trainer-agent"}),
        [{"type": "batch", "seq": 1, "metrics": metrics}],
    )
    (loop_loss,) = db_server.get(f"/api/v1/runs/{loop_id}/metrics")["series"]
    assert loop_loss["aggregation"] == "value"


# -- summary -----------------------------------------------------------------------------------


def test_summary_has_last_and_best_per_epoch_metric_live_and_after_the_end(
    db_server: ServerProcess,
) -> None:
    agent = ScriptedAgent(db_server, project=uuid.uuid4().hex)
    try:
        agent.steps(10, dur=0.01, wait=0.001)
        agent.send(
            epochs=_epochs(
                {
                    "loss": [0.8],
                    "val_loss": [0.9],
                    "val_accuracy": [0.4],
                    "val_mean_absolute_error": [3.0],
                }
            )
        )
        live = db_server.get(f"/api/v1/runs/{agent.run_id}")
        assert live["status"] == "running"
        assert live["summary"]["epoch_metrics"]["val_loss"]["last"] == 0.9
        agent.steps(10, dur=0.01, wait=0.001)
        agent.send(
            epochs=_epochs(
                {
                    "loss": [0.6, 0.5],
                    "val_loss": [0.7, 0.75],
                    "val_accuracy": [0.6, 0.55],
                    "val_mean_absolute_error": [2.0, None],
                },
                first_epoch=1,
            )
        )
        agent.end()
    finally:
        agent.close()
    run = db_server.get(f"/api/v1/runs/{agent.run_id}")
    assert run["status"] == "finished"
    em = run["summary"]["epoch_metrics"]
    assert em["loss"] == {
        "last": 0.5,
        "last_epoch": 2,
        "best": 0.5,
        "best_epoch": 2,
        "goal": "min",
        "directed": True,
        "epochs": 3,
    }
    assert (em["val_loss"]["last"], em["val_loss"]["best"], em["val_loss"]["best_epoch"]) == (
        0.75,
        0.7,
        1,
    )
    assert em["val_accuracy"]["goal"] == "max"
    assert (em["val_accuracy"]["best"], em["val_accuracy"]["best_epoch"]) == (0.6, 1)
    mae = em["val_mean_absolute_error"]  # "error": lower is better; a NaN is last, never best
    assert (mae["goal"], mae["best"], mae["best_epoch"], mae["last"]) == ("min", 2.0, 1, None)


def test_summary_goal_follows_the_runs_config_override(db_server: ServerProcess) -> None:
    config = {"lr": 0.1, "stoker": {"metric_goals": {"val_loss": "max", "val_perplexity": "min"}}}
    epochs = _epochs(
        {"val_loss": [0.9, 0.7], "val_perplexity": [30.0, 20.0], "val_accuracy": [0.1, 0.3]}
    )
    run_id = _run_id(
        db_server, _hello(config=config), [{"type": "batch", "seq": 1, "epochs": epochs}]
    )
    em = db_server.get(f"/api/v1/runs/{run_id}")["summary"]["epoch_metrics"]
    assert (em["val_loss"]["goal"], em["val_loss"]["best"]) == ("max", 0.9)
    assert (em["val_perplexity"]["goal"], em["val_perplexity"]["best"]) == ("min", 20.0)
    assert (em["val_accuracy"]["goal"], em["val_accuracy"]["best"]) == ("max", 0.3)
    assert all(em[name]["directed"] for name in ("val_loss", "val_perplexity", "val_accuracy"))


def test_metric_goal_and_epoch_summary_rules() -> None:
    assert metric_goal("val_loss", {}) == ("min", True)
    assert metric_goal("evaluate_Mean_Squared_Error", {}) == ("min", True)
    assert metric_goal("val_accuracy", {}) == ("max", True)
    assert metric_goal("val_sparse_categorical_accuracy", {}) == ("max", True)
    assert metric_goal("val_accuracy", {"stoker": {"metric_goals": {"val_accuracy": "min"}}}) == (
        "min", True
    )  # fmt: skip
    assert metric_goal("loss", {"stoker": {"metric_goals": {"loss": "sideways"}}}) == ("min", True)
    assert metric_goal("loss", {"stoker": "not a dict"}) == ("min", True)
    # A value Keras logs that is no metric has no direction unless the user gives it one.
    assert metric_goal("learning_rate", {}) == ("max", False)
    assert metric_goal("my_score", {}) == ("max", False)
    assert metric_goal("my_score", {"stoker": {"metric_goals": {"my_score": "min"}}}) == (
        "min", True
    )  # fmt: skip
    ties = epoch_metric_summary([(0, 0.5), (1, 0.4), (2, 0.4), (3, None)], goal="min")
    assert (ties["best"], ties["best_epoch"], ties["last"], ties["last_epoch"]) == (0.4, 1, None, 3)
    empty = epoch_metric_summary([(0, None)], goal="max")
    assert (empty["best"], empty["best_epoch"], empty["epochs"]) == (None, None, 1)


# -- runs list sort and compare ----------------------------------------------------------------


def test_runs_list_sorts_by_best_epoch_metric_with_runs_without_it_last(
    db_server: ServerProcess,
) -> None:
    project = uuid.uuid4().hex

    def run(name: str, accuracies: list[float | None] | None) -> int:
        batches = []
        if accuracies is not None:
            batches.append(
                {
                    "type": "batch",
                    "seq": 1,
                    "epochs": _epochs({"val_accuracy": accuracies, "loss": [1.0]}),
                }
            )
        return _run_id(db_server, _hello(name=name, project=project), batches)

    low = run("low", [0.3, 0.5, 0.4])  # best 0.5
    high = run("high", [0.7, 0.9])  # best 0.9
    mid = run("mid", [0.6])
    none = run("none", None)
    all_null = run("all-null", [None])

    def ids(sort: str) -> list[int]:
        runs = db_server.get("/api/v1/runs", project=project, sort=sort)["data"]
        return [r["id"] for r in runs]

    assert ids("-best:val_accuracy")[:3] == [high, mid, low]
    assert ids("best:val_accuracy")[:3] == [low, mid, high]
    assert set(ids("best:val_accuracy")[3:]) == {none, all_null}
    assert set(ids("-best:val_accuracy")[3:]) == {none, all_null}
    assert len(ids("best:nothing_like_this")) == 5
    page = db_server.get("/api/v1/runs", project=project, sort="-best:val_accuracy", limit=1)
    assert (
        page["count"] == 5
        and page["data"][0]["summary"]["epoch_metrics"]["val_accuracy"]["best"] == 0.9
    )
    for bad in ("best:", "-best", "best_val_accuracy", "val_accuracy"):
        response = httpx.get(f"{db_server.url}/api/v1/runs", params={"sort": bad})
        assert response.status_code == 422, bad


def test_compare_lists_every_epoch_metric_of_the_runs(db_server: ServerProcess) -> None:
    a = _run_id(
        db_server,
        _hello(),
        [{"type": "batch", "seq": 1, "epochs": _epochs({"val_loss": [0.5, 0.4]})}],
    )
    b = _run_id(
        db_server,
        _hello(),
        [{"type": "batch", "seq": 1, "epochs": _epochs({"val_loss": [0.6], "val_auc": [0.8]})}],
    )
    out = db_server.get("/api/v1/compare", runs=f"{a},{b}")
    assert out["epoch_metrics"] == ["val_auc", "val_loss"]
    bests = [r["summary"]["epoch_metrics"]["val_loss"]["best"] for r in out["runs"]]
    assert bests == [0.4, 0.6]


def test_deleting_a_run_removes_its_epoch_rows(db_server: ServerProcess) -> None:
    run_id = _run_id(
        db_server, _hello(), [{"type": "batch", "seq": 1, "epochs": _epochs({"val_loss": [0.5]})}]
    )
    assert httpx.delete(f"{db_server.url}/api/v1/runs/{run_id}").status_code == 204
    assert httpx.get(f"{db_server.url}/api/v1/runs/{run_id}/metrics").status_code == 404
