"""The UI views in real headless Chromium against a real `stoker serve`.

- the run page's verdict banner turns to highly input-bound for a real starved Keras training
  (serial map with an injected per-batch delay, no prefetch), with evidence and advice;
- the compare view of that run and a fed one: summary table with the best values marked,
  config differences showing only the keys that differ;
- an alert rule made with the rule form (after a validation message for a bad threshold)
  fires on a run whose GPU utilization drops, and shows in the alerts view and run page;
- device and host samples sent over HTTP ingest draw the GPU/memory/thermal/host charts, and
  the environment panel renders the agent's report;
- run names, tags and config values holding markup render as text everywhere.

Screenshots go to test-artifacts/ui-*.png.
"""

import importlib.util
import os
import re
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.conftest import require
from tests.harness.detect_support import FAST_DETECTORS, ScriptedAgent
from tests.harness.support import REPO, ServerProcess, wait_for

expect = pytest.importorskip("playwright.sync_api").expect

TRAIN_PROJECT = "ui-train"
STARVED, FED = "ui-starved", "ui-fed"

# Two real trainings in one child process (TensorFlow is imported once): first a starved
# pipeline (a serial map that sleeps per batch, no prefetch), then a fed one (cache + prefetch).
TRAINING = r"""
import os
import sys
import time

import numpy as np
import tensorflow as tf

from tests.harness.gpu_like import measure_step_s, starving_delay_s
from trainer_agent import StokerCallback

server, project, gate = sys.argv[1], sys.argv[2], sys.argv[5]
BATCH, FEATURES, BATCHES = 64, 64, 120


def model():
    m = tf.keras.Sequential([tf.keras.Input(shape=(FEATURES,)),
                             tf.keras.layers.Dense(64, activation="relu"),
                             tf.keras.layers.Dense(1)])
    m.compile(optimizer=tf.keras.optimizers.SGD(0.01), loss="mse")
    return m


def dataset(pipeline):
    rng = np.random.default_rng(0)
    x = rng.normal(size=(BATCHES * BATCH, FEATURES)).astype("float32")
    ds = tf.data.Dataset.from_tensor_slices((x, x[:, :1])).batch(BATCH)
    if pipeline == "fed":
        return ds.cache().prefetch(tf.data.AUTOTUNE)

    def slow(a):
        # The first batch waits until the test has the run page open (the gate file).
        deadline = time.monotonic() + 120
        while not os.path.exists(gate) and time.monotonic() < deadline:
            time.sleep(0.02)
        time.sleep(DELAY_S)  # stands in for slow decoding or reading
        return a

    def delay(a, b):
        return tf.ensure_shape(tf.numpy_function(slow, [a], tf.float32), a.shape), b

    return ds.map(delay)  # serial, no prefetch: every step waits for its batch


# The delay is several times this machine's step, measured first: starved on any machine.
DELAY_S = starving_delay_s(measure_step_s(model(), dataset("fed")), floor_s=0.04)
for pipeline, name in (("starved", sys.argv[3]), ("fed", sys.argv[4])):
    config = {
        "pipeline": "serial map, no prefetch" if pipeline == "starved" else "cache + prefetch",
        "input_delay_ms": round(DELAY_S * 1000, 1) if pipeline == "starved" else 0,
        "batch_size": BATCH,
        "optimizer": {"name": "sgd", "learning_rate": 0.01},
    }
    cb = StokerCallback(run_name=name, project=project, server=server, config=config,
                        tags=["ui-test", pipeline])
    model().fit(cb.wrap(dataset(pipeline)), epochs=1, callbacks=[cb], verbose=0)
"""


@pytest.fixture(scope="module")
def ui_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    """One server for the module, detectors ticking fast; each test keeps to its own runs."""
    process = ServerProcess(data_dir=tmp_path_factory.mktemp("ui-views"), env=FAST_DETECTORS)
    process.start()
    yield process
    process.stop()


@dataclass
class Trainings:
    """The starved-then-fed training child; it holds its first batch until `release()`."""

    process: subprocess.Popen[bytes]
    gate: Path
    log: Path

    def release(self) -> None:
        self.gate.touch()

    def check(self) -> None:
        if self.process.poll() not in (None, 0):
            raise AssertionError(f"the training exited with {self.process.returncode}: "
                                 f"{self.log.read_text(errors='replace')[-3000:]}")  # fmt: skip


@pytest.fixture(scope="module")
def trainings(
    ui_server: ServerProcess, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Trainings]:
    require(importlib.util.find_spec("tensorflow") is not None, "TensorFlow")
    tmp = tmp_path_factory.mktemp("ui-training")
    script = tmp / "ui_training.py"
    script.write_text(TRAINING)
    env = {**os.environ, "PYTHONPATH": str(REPO), "TF_CPP_MIN_LOG_LEVEL": "2",
           "STOKER_SPOOL_DIR": str(tmp / "spool")}  # fmt: skip
    gate = tmp / "gate"
    with (tmp / "training.log").open("wb") as log:
        process = subprocess.Popen(
            [sys.executable, str(script), ui_server.url, TRAIN_PROJECT, STARVED, FED, str(gate)],
            cwd=REPO, env=env, stdout=log, stderr=subprocess.STDOUT,
        )  # fmt: skip
    training = Trainings(process=process, gate=gate, log=tmp / "training.log")
    yield training
    training.release()
    if process.poll() is None:
        process.kill()
    process.wait()


def _run(server: ServerProcess, name: str, *, status: str | None = None) -> dict[str, Any] | None:
    runs = server.get("/api/v1/runs", q=name, limit=1000)["data"]
    return next(
        (r for r in runs if r["name"] == name and (status is None or r["status"] == status)), None
    )


def _training_run(
    server: ServerProcess, training: Trainings, name: str, *, status: str
) -> dict[str, Any]:
    def found() -> dict[str, Any] | None:
        training.check()
        return _run(server, name, status=status)

    return wait_for(found, timeout_s=150, interval_s=0.1, what=f"run {name} {status}")


def _ingest(server: ServerProcess, hello: dict[str, Any], batches: list[dict[str, Any]]) -> int:
    hello = {"type": "hello", "protocol": 1, "run_key": uuid.uuid4().hex, **hello}
    body = {"hello": hello, "batches": batches, "end": {"type": "end", "status": "finished"}}
    response = httpx.post(f"{server.url}/api/v1/ingest", json=body, timeout=30)
    assert response.status_code == 200, response.text
    return response.json()["run_id"]


def _steps(t0: float, n: int, dur: float, wait: float) -> dict[str, Any]:
    return {"step": list(range(n)), "t": [t0 + i * dur for i in range(n)], "dur": [dur] * n,
            "wait": [wait] * n, "batch_size": [32] * n}  # fmt: skip


def _by_testid(page: Any, testid: str, **attrs: Any) -> Any:
    selector = f'[data-testid="{testid}"]' + "".join(f'[{k}="{v}"]' for k, v in attrs.items())
    return page.locator(selector)


def _int_attr(locator: Any, name: str) -> int:
    return int(locator.get_attribute(name) or 0)


# -- 1. verdict banner ------------------------------------------------------------------------


def test_verdict_banner_turns_highly_input_bound_for_a_starved_training(
    ui_server: ServerProcess, trainings: Trainings, page: Any, artifacts: Path
) -> None:
    # The run exists (the callback said hello) and holds its first batch: open its page.
    run = _training_run(ui_server, trainings, STARVED, status="running")
    page.goto(f"{ui_server.url}/#/runs/{run['id']}")
    expect(page.get_by_test_id("run-name")).to_have_text(STARVED)
    banner = page.get_by_test_id("verdict-banner")
    expect(banner).not_to_have_attribute("data-verdict", "loading", timeout=15_000)
    before = banner.get_attribute("data-verdict")
    assert before != "highly_input_bound", before

    # Let it train: the banner turns live (a `verdict` message on the live socket). The
    # banner's state is read in one go, in the frame where it turns.
    trainings.release()
    turned = page.wait_for_function(
        """() => {
            const b = document.querySelector('[data-testid="verdict-banner"]');
            if (b.getAttribute('data-verdict') !== 'highly_input_bound') return null;
            const items = (id) => [...b.querySelectorAll(`[data-testid="${id}"] li`)]
                .map((li) => li.textContent);
            return {source: b.getAttribute('data-source'), evidence: items('verdict-evidence'),
                    advice: items('verdict-advice')};
        }""",
        polling="raf",
        timeout=90_000,
    ).json_value()
    assert turned["source"] == "measured"
    assert any("input wait is" in e for e in turned["evidence"]), turned
    assert any("does not prefetch" in e for e in turned["evidence"]), turned
    # wrap saw a serial map without prefetch: the advice names what to add.
    advice = " ".join(turned["advice"])
    assert ".prefetch(tf.data.AUTOTUNE)" in advice and "num_parallel_calls" in advice, advice

    # Once finished, the run page (opened afresh: see the report on the live page's
    # staleness) shows the verdict with evidence and advice, and the starved steps shaded.
    _training_run(ui_server, trainings, STARVED, status="finished")
    page.reload()
    expect(banner).to_have_attribute("data-verdict", "highly_input_bound", timeout=15_000)
    expect(banner).to_have_attribute("data-source", "measured")
    expect(page.get_by_test_id("verdict-title")).to_be_visible()
    expect(page.get_by_test_id("verdict-evidence")).to_contain_text("does not prefetch")
    advice_list = page.get_by_test_id("verdict-advice")
    expect(advice_list).to_be_visible()
    expect(advice_list).to_contain_text(".prefetch(tf.data.AUTOTUNE)")
    expect(advice_list).to_contain_text("num_parallel_calls")
    chart = page.get_by_test_id("step-time-chart")
    expect(chart).to_have_attribute("data-points", "120", timeout=15_000)
    wait_for(lambda: _int_attr(chart, "data-starved-ranges") > 0, timeout_s=15,
             what="starved stretches shaded on the step-time chart")  # fmt: skip
    expect(chart).to_have_attribute("data-starved-source", "server")
    page.screenshot(path=str(artifacts / "ui-verdict.png"), full_page=True)

    # The runs list carries the verdict as a badge.
    page.goto(f"{ui_server.url}/#/")
    row = _by_testid(page, "run-row", **{"data-run-id": run["id"]})
    expect(row.get_by_test_id("verdict-badge")).to_have_attribute(
        "data-verdict", "highly_input_bound", timeout=15_000
    )


# -- 2. compare view --------------------------------------------------------------------------


def test_compare_view_marks_best_values_and_shows_only_differing_config(
    ui_server: ServerProcess, trainings: Trainings, page: Any, artifacts: Path
) -> None:
    trainings.release()  # in case test 1 did not run
    starved = _training_run(ui_server, trainings, STARVED, status="finished")
    fed = _training_run(ui_server, trainings, FED, status="finished")
    assert trainings.process.wait(timeout=60) == 0

    # Choose the two runs in the runs list and press Compare.
    page.goto(f"{ui_server.url}/#/")
    for run in (starved, fed):
        _by_testid(page, "run-select", **{"data-run-id": run["id"]}).check()
    page.get_by_test_id("compare-button").click()
    table = page.get_by_test_id("compare-table")
    expect(table).to_be_visible(timeout=15_000)
    expect(table.locator("thead")).to_contain_text(STARVED)
    expect(table.locator("thead")).to_contain_text(FED)

    # Columns follow the header's run order.
    header_ids = [
        int(x) for x in table.locator("thead th[data-run-id]").evaluate_all(
            "ths => ths.map(th => th.getAttribute('data-run-id'))"
        )
    ]  # fmt: skip
    assert sorted(header_ids) == sorted([starved["id"], fed["id"]])
    fed_col = header_ids.index(fed["id"])
    starved_col = header_ids.index(starved["id"])
    # The diagnosis figures come first, unstarred: no direction the user chose (issue 38).
    diagnosis = page.get_by_test_id("compare-diagnosis")
    for metric in ("median", "wait"):
        cells = diagnosis.locator(f'tr[data-metric="{metric}"] td')
        expect(cells).to_have_count(2)
        assert cells.nth(fed_col).get_attribute("data-best") is None
        assert cells.nth(starved_col).get_attribute("data-best") is None
    expect(diagnosis.locator("[data-best]")).to_have_count(0)
    # A star only on a metric with a direction, whose heading says which.
    for row in table.locator("tr[data-metric]").all():
        if row.locator('td[data-best="true"]').count():
            expect(row.locator("th")).to_contain_text(re.compile("[↓↑]"))
            expect(row.locator('td[data-best="true"] .best-mark').first).to_be_visible()

    # Config: only the two keys that differ; equal ones (batch_size, optimizer.*) are left out.
    config_diff = page.get_by_test_id("config-diff")
    expect(config_diff).to_have_attribute("data-rows", "2")
    keys = config_diff.locator("tr[data-key]").evaluate_all(
        "rows => rows.map(r => r.getAttribute('data-key'))"
    )
    assert sorted(keys) == ["input_delay_ms", "pipeline"]
    pipeline_row = config_diff.locator('tr[data-key="pipeline"] td')
    by_col = {starved_col: "serial map, no prefetch", fed_col: "cache + prefetch"}
    for col, text in by_col.items():
        expect(pipeline_row.nth(col)).to_have_text(text)

    # Environment: exactly the keys the server says differ, each with differing values.
    server_diff = ui_server.get("/api/v1/compare", runs=f"{starved['id']},{fed['id']}")
    env_diff = page.get_by_test_id("env-diff")
    env_keys = env_diff.locator("tr[data-key]").evaluate_all(
        "rows => rows.map(r => r.getAttribute('data-key'))"
    )
    assert sorted(env_keys) == sorted(server_diff["differences"]["environment"])
    for key in env_keys:
        values = env_diff.locator(f'tr[data-key="{key}"] td').all_text_contents()
        assert len(values) == 2 and values[0] != values[1], (key, values)

    chart = page.get_by_test_id("compare-chart")
    wait_for(lambda: _int_attr(chart, "data-points") > 0, timeout_s=15, what="the overlay")
    expect(chart).to_have_attribute("data-align", "step")
    page.screenshot(path=str(artifacts / "ui-compare.png"), full_page=True)


# -- 3. alerts --------------------------------------------------------------------------------


class UtilFeeder:
    """A run over the real agent WebSocket that keeps stepping and reporting one GPU's
    utilization (set by the test), stamped with the wall clock like a real sampler."""

    def __init__(self, agent: ScriptedAgent, util: float) -> None:
        self.agent = agent
        self.util = util
        self.batches = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        step = 0
        while not self._stop.is_set():
            now = time.time()
            steps = {"step": [step], "t": [now - 0.05], "dur": [0.05], "wait": [0.0],
                     "batch_size": [32]}  # fmt: skip
            device = {"t": [now], "gpu": [0], "util": [self.util], "mem_used": [4e9],
                      "mem_total": [16e9], "temp_c": [60.0]}  # fmt: skip
            self.agent.send(steps=steps, device=device)
            step += 1
            self.batches += 1
            self._stop.wait(0.05)

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(10)


def test_rule_form_validates_and_a_firing_rule_shows_in_the_alerts_view(
    ui_server: ServerProcess, page: Any, artifacts: Path
) -> None:
    project = f"ui-alerts-{uuid.uuid4().hex[:6]}"
    rule_name = "UI test: GPU starving"
    rules_before = ui_server.get("/api/v1/alert-rules")["data"]

    page.goto(f"{ui_server.url}/#/alerts")
    form = page.get_by_test_id("alert-rule-form")
    # (data-mode is only set once the form is reset after a save; see the report.)
    expect(page.get_by_test_id("alert-rules")).to_be_visible()
    form.get_by_test_id("rule-name").fill(rule_name)
    form.get_by_test_id("rule-metric").select_option("gpu_util")
    form.get_by_test_id("rule-comparison").select_option("<")
    expect(form.get_by_test_id("rule-unit")).to_have_text("%")

    # An impossible threshold: a message next to the field, nothing sent.
    threshold = form.get_by_test_id("rule-threshold")
    threshold.fill("150")
    form.get_by_test_id("rule-submit").click()
    error = form.get_by_test_id("rule-error-threshold")
    expect(error).to_be_visible()
    expect(error).to_contain_text("At most 100")
    expect(threshold).to_have_attribute("aria-invalid", "true")
    threshold.fill("")
    form.get_by_test_id("rule-submit").click()
    expect(error).to_have_text("Enter a number.")
    page.screenshot(path=str(artifacts / "ui-rule-validation.png"), full_page=True)
    assert len(ui_server.get("/api/v1/alert-rules")["data"]) == len(rules_before)

    # Fixed: GPU utilization below 50 % for 1 s, in this test's project only.
    threshold.fill("50")
    form.get_by_test_id("rule-for-s").fill("1")
    form.get_by_test_id("rule-scope").select_option("project")
    form.get_by_test_id("rule-project").fill(project)
    form.get_by_test_id("rule-submit").click()
    expect(form).to_have_attribute("data-saved", re.compile(r"^\d+$"))
    rule_id = int(form.get_attribute("data-saved"))
    expect(form).to_have_attribute("data-mode", "create")  # reset for the next rule
    expect(error).to_be_hidden()
    expect(_by_testid(page, "alert-rule-row", **{"data-rule-id": rule_id})).to_contain_text(
        rule_name
    )
    rule = next(r for r in ui_server.get("/api/v1/alert-rules")["data"] if r["id"] == rule_id)
    assert (rule["metric"], rule["comparison"], rule["threshold"], rule["for_s"]) == (
        "gpu_util", "<", 50.0, 1.0,
    )  # fmt: skip
    assert (rule["scope"], rule["project"], rule["enabled"]) == ("project", project, True)

    # A run in that project: busy at first, then its GPU utilization drops to 20 %.
    agent = ScriptedAgent(ui_server, name="ui-util-drop", project=project)
    feeder = UtilFeeder(agent, util=95.0)
    try:
        wait_for(lambda: feeder.batches >= 10, what="a busy stretch")
        feeder.util = 20.0
        firing = wait_for(
            lambda: ui_server.get("/api/v1/alerts", run_id=agent.run_id, state="firing")["data"],
            timeout_s=30, what="the rule firing",
        )[0]  # fmt: skip
        assert firing["rule_id"] == rule_id
        # The alert arrives in the open alerts view over the live socket, no reload.
        row = _by_testid(page, "alert-row", **{"data-alert-id": firing["id"]})
        expect(row).to_have_attribute("data-state", "firing", timeout=15_000)
        expect(row).to_contain_text(rule_name)
        expect(row).to_contain_text("ui-util-drop")
        expect(page.get_by_test_id("nav-alerts-count")).to_have_text(re.compile(r"^[1-9]\d*$"))
        page.screenshot(path=str(artifacts / "ui-alerts.png"), full_page=True)

        # The run page's alert history shows it too, and follows it to resolved.
        page.goto(f"{ui_server.url}/#/runs/{agent.run_id}")
        history = page.get_by_test_id("run-alerts")
        run_row = _by_testid(history, "alert-row", **{"data-alert-id": firing["id"]})
        expect(run_row).to_have_attribute("data-state", "firing", timeout=15_000)
        feeder.util = 95.0
        expect(run_row).to_have_attribute("data-state", "resolved", timeout=30_000)
        page.screenshot(path=str(artifacts / "ui-run-alerts.png"), full_page=True)
    finally:
        feeder.stop()
        agent.end()
        agent.close()


# -- 4. telemetry charts and environment -------------------------------------------------------


def test_run_page_draws_gpu_memory_and_host_charts_and_the_environment(
    ui_server: ServerProcess, page: Any, artifacts: Path
) -> None:
    n = 60
    t0 = time.time() - n
    ts = [t0 + i for i in range(n)]
    throttle = [0x20 if 20 <= i < 30 else 0 for i in range(n)]  # a stretch of thermal slowdown
    device: dict[str, list[Any]] = {k: [] for k in (
        "t", "gpu", "util", "mem_util", "mem_used", "mem_total", "tf_mem_current", "tf_mem_peak",
        "temp_c", "power_w", "power_limit_w", "sm_clock_mhz", "throttle")}  # fmt: skip
    for gpu in (0, 1):
        for i, t in enumerate(ts):
            row = {"t": t, "gpu": gpu, "util": 40 + 50 * ((i + 10 * gpu) % 7) / 6,
                   "mem_util": 30.0, "mem_used": (20 + i / 10) * 2**30, "mem_total": 40 * 2**30,
                   "tf_mem_current": 18 * 2**30, "tf_mem_peak": 19 * 2**30,
                   "temp_c": 60.0 + i / 6, "power_w": 250.0 + i, "power_limit_w": 400.0,
                   "sm_clock_mhz": 1410.0 - (200 if throttle[i] else 0),
                   "throttle": throttle[i]}  # fmt: skip
            for k, v in row.items():
                device[k].append(v)
    host = {"t": ts, "proc_cpu": [120.0 + i % 5 for i in range(n)],
            "sys_cpu": [55.0 + i % 9 for i in range(n)], "rss": [3 * 2**30] * n,
            "mem_used": [40 * 2**30] * n, "mem_total": [128 * 2**30] * n}  # fmt: skip
    environment = {
        "agent": "stoker-trainer-agent", "hostname": "gpu-node-7", "python": "3.11.9",
        "tensorflow_version": "2.21.0", "keras_version": "3.12.0",
        "tf_build": {"is_cuda_build": True, "cuda_version": "12.5.1", "cudnn_version": "9"},
        "nvml": True, "driver_version": "550.54.15", "cuda_driver_version": "12.4",
        "gpus": [
            {"index": 0, "name": "NVIDIA A100-SXM4-40GB", "uuid": "GPU-0",
             "memory_total_bytes": 40 * 2**30, "compute_capability": "8.0"},
            {"index": 1, "name": "NVIDIA A100-SXM4-40GB", "uuid": "GPU-1",
             "memory_total_bytes": 40 * 2**30, "compute_capability": "8.0"},
        ],
        "tf_gpus": [],  # NVML sees two GPUs, TensorFlow none: the doctor warns
        "mixed_precision_policy": "mixed_float16", "jit_compile": True,
        "strategy": "MirroredStrategy", "replicas": 2,
    }  # fmt: skip
    run_id = _ingest(
        ui_server,
        {"name": "ui-gpu-telemetry", "project": "ui-telemetry", "environment": environment},
        [{"type": "batch", "seq": 1, "steps": _steps(t0, n, 1.0, 0.01),
          "metrics": {"step": list(range(n)), "name": ["loss"] * n,
                      "value": [1.0 / (1 + i) for i in range(n)]},
          "device": device, "host": host}],
    )  # fmt: skip

    page.goto(f"{ui_server.url}/#/runs/{run_id}")
    expect(page.get_by_test_id("run-name")).to_have_text("ui-gpu-telemetry")
    for testid in ("gpu-util-chart", "memory-chart", "thermal-chart", "host-chart"):
        chart = page.get_by_test_id(testid)
        expect(chart).to_have_attribute("data-state", "ok", timeout=15_000)
        expect(chart).to_be_visible()
        wait_for(lambda chart=chart: _int_attr(chart, "data-points") > 0, timeout_s=15,
                 what=f"points in {testid}")  # fmt: skip
        assert _int_attr(chart, "data-series") > 0, testid
    assert _int_attr(page.get_by_test_id("gpu-util-chart"), "data-series") >= 2  # both GPUs
    expect(page.get_by_test_id("thermal-chart")).not_to_have_attribute("data-throttle-ranges", "0")
    expect(page.get_by_test_id("samples-note")).to_be_hidden()
    wait_for(lambda: _int_attr(page.get_by_test_id("metrics-chart"), "data-points") > 0,
             timeout_s=15, what="the loss chart")  # fmt: skip

    env = page.get_by_test_id("env-panel")
    expect(env).to_be_visible()
    for key, text in (("tensorflow", "2.21.0"), ("driver", "550.54.15"), ("cuda", "12.5.1"),
                      ("mixed_precision", "mixed_float16"), ("jit_compile", "on"),
                      ("strategy", "MirroredStrategy"), ("replicas", "2")):  # fmt: skip
        expect(env.locator(f'tr[data-env="{key}"] td')).to_have_text(text)
    gpus = page.get_by_test_id("env-gpus")
    expect(gpus.locator("tbody tr")).to_have_count(2)
    expect(gpus).to_contain_text("NVIDIA A100-SXM4-40GB")
    expect(gpus).to_contain_text("8.0")
    expect(page.get_by_test_id("doctor-warnings")).to_contain_text("TensorFlow sees no GPU")
    page.screenshot(path=str(artifacts / "ui-run-gpu.png"), full_page=True)


# -- 5. markup renders as text ------------------------------------------------------------------

MARKUP_NAME = "<img src=x onerror=alert(1)>"
MARKUP_NAME_2 = "<svg onload=alert(2)>second</svg>"
MARKUP_TAG = "<b>bold</b>"

INJECTED = """() => [...document.querySelectorAll('*')].filter((e) =>
    [...e.attributes].some((a) => /^on/i.test(a.name))
    || (e.tagName === 'IMG' && ['x', 'y'].includes(e.getAttribute('src')))
    || e.tagName === 'B' || e.tagName.toLowerCase() === 'svg' && e.textContent === 'second'
    || (e.tagName === 'SCRIPT' && e.textContent.includes('alert'))
).map((e) => e.outerHTML)"""


def test_markup_in_names_tags_and_config_renders_as_text(
    ui_server: ServerProcess, page: Any, artifacts: Path
) -> None:
    t0 = time.time() - 30
    common = {"project": "ui-xss", "tags": [MARKUP_TAG, "<script>alert(3)</script>"]}
    first = _ingest(
        ui_server,
        {**common, "name": MARKUP_NAME,
         "config": {"note": "<img src=y onerror=alert(4)>", "lr": 0.1, "same": "<i>same</i>"}},
        [{"type": "batch", "seq": 1, "steps": _steps(t0, 30, 0.1, 0.01)}],
    )  # fmt: skip
    second = _ingest(
        ui_server,
        {**common, "name": MARKUP_NAME_2,
         "config": {"note": "<a href=javascript:alert(5)>x</a>", "lr": 0.2, "same": "<i>same</i>"}},
        [{"type": "batch", "seq": 1, "steps": _steps(t0, 30, 0.2, 0.01)}],
    )  # fmt: skip
    dialogs: list[str] = []
    page.on("dialog", lambda dialog: (dialogs.append(dialog.message), dialog.dismiss()))

    # Runs list
    page.goto(f"{ui_server.url}/#/")
    row = _by_testid(page, "run-row", **{"data-run-id": first})
    expect(row).to_contain_text(MARKUP_NAME)
    expect(row).to_contain_text(MARKUP_TAG)
    expect(row).to_contain_text("<script>alert(3)</script>")
    expect(_by_testid(page, "run-row", **{"data-run-id": second})).to_contain_text(MARKUP_NAME_2)
    assert page.evaluate(INJECTED) == []
    page.screenshot(path=str(artifacts / "ui-xss-runs.png"), full_page=True)

    # Run page
    page.goto(f"{ui_server.url}/#/runs/{first}")
    expect(page.get_by_test_id("run-name")).to_have_text(MARKUP_NAME)
    config = page.get_by_test_id("config-panel")
    expect(config).to_contain_text("<img src=y onerror=alert(4)>")
    expect(page.get_by_test_id("step-time-chart")).to_have_attribute("data-points", "30")
    expect(page.locator("main, body").first).to_contain_text(MARKUP_TAG)
    assert page.evaluate(INJECTED) == []

    # Compare view: names in the headers, the differing markup value in the config diff.
    page.goto(f"{ui_server.url}/#/compare?runs={first},{second}")
    table = page.get_by_test_id("compare-table")
    expect(table.locator("thead")).to_contain_text(MARKUP_NAME)
    expect(table.locator("thead")).to_contain_text(MARKUP_NAME_2)
    diff = page.get_by_test_id("config-diff")
    keys = diff.locator("tr[data-key]").evaluate_all("rs => rs.map(r => r.dataset.key)")
    assert sorted(keys) == ["lr", "note"]  # "same" is equal in both: left out
    expect(diff.locator('tr[data-key="note"]')).to_contain_text("<img src=y onerror=alert(4)>")
    expect(diff.locator('tr[data-key="note"]')).to_contain_text("<a href=javascript:alert(5)>x</a>")
    assert page.locator("a[href^='javascript']").count() == 0
    assert page.evaluate(INJECTED) == []
    page.screenshot(path=str(artifacts / "ui-xss-compare.png"), full_page=True)
    assert dialogs == []
