"""Every page at 1024, 1440 and 1920 px, light and dark, in real Chromium against a real server
(issue 41): a screenshot of each (test-artifacts/screens/PAGE-WIDTH-THEME.png, to look at), and
a failure for anything that reads badly, found by element measurements, not pixels
(tests/harness/page_layout.py): text wider than its box or sticking out of it, a word broken
across lines, a badge on two lines, a page that scrolls sideways.

One server, one set of runs, as the demo leaves them on a machine without a GPU plus one run
with GPU readings: a fed run (3 s, one pipeline read taken before its steps had a pace), a
starved run whose alert fired and asked for a profile (through the real alert engine), and a
GPU run with a long name. Then what the issue saw, each measured: the runs list's badges on
one line, the GPU columns only when a run listed has GPU readings, one compact line instead of
three empty GPU charts, the pipeline view's legend, the profile link of an alert's event in the
message column, compare's dotted keys whole.
"""

import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import httpx
import pytest

from tests.conftest import ARTIFACTS
from tests.harness.detect_support import FAST_DETECTORS, ScriptedAgent
from tests.harness.page_layout import layout_problems
from tests.harness.support import ServerProcess, wait_for
from tests.harness.tune_groups import edit, group_body, post_group

WIDTHS = (1024, 1440, 1920)
THEMES = ("light", "dark")
PROJECT = "stoker-demo"


def _environment(*, epochs: int, steps: int, fed: bool) -> dict[str, Any]:
    """An environment as the agent reports it for the demo's model on a machine without GPU."""
    stages = ["BatchDataset", "MapDataset", "ShuffleDataset", "TensorSliceDataset"]
    if fed:
        stages = ["PrefetchDataset", "BatchDataset", "ShuffleDataset", "CacheDataset",
                  "ParallelMapDataset", "TensorSliceDataset"]  # fmt: skip
    return {
        "agent": "stoker-trainer-agent", "hostname": "vm", "pid": 4242, "rank": 0,
        "world_size": 1, "python": "3.11.7", "platform": "Linux-6.18-x86_64-with-glibc2.36",
        "cpu_count": 2, "nvml": False,
        "nvml_error": "NVMLError_LibraryNotFound: NVML Shared Library Not Found", "gpus": [],
        "tensorflow_version": "2.21.0",
        "tf_build": {"is_cuda_build": True, "cuda_version": "12.5.1", "cudnn_version": "9"},
        "keras_version": "3.15.1", "mixed_precision_policy": "float32",
        "model": {"name": "sequential" if fed else "sequential_1", "param_count": 83460,
                  "trainable_param_count": 83460, "layers": 3},
        "jit_compile": False, "steps_per_execution": 1,
        "strategy": "_DefaultDistributionStrategy", "replicas": 1,
        "optimizer": {"class": "Adam", "config": {"name": "adam" if fed else "adam_1",
                                                  "learning_rate": 0.001, "weight_decay": None,
                                                  "ema_momentum": 0.99}},
        "fit_params": {"verbose": 2 if fed else 0, "epochs": epochs, "steps": steps},
        "input_pipeline": {"prefetch": fed, "parallel_map": fed, "serial_map": not fed,
                           "cache": fed, "interleave": False, "prefetch_last": fed,
                           "stages": stages},
    }  # fmt: skip


def _stage(position: int, kind: str, name: str, *, ms: float | None, elements: int,
           buffered: int = 0, size: int | None = None, function: str | None = None,
           threads: int = 1) -> dict[str, Any]:  # fmt: skip
    return {"position": position, "kind": kind, "name": name, "function": function,
            "parallelism": threads, "ms_per_element": ms, "elements": elements,
            "buffered": buffered, "buffer_size": size, "bytes_per_element": 264}  # fmt: skip


# The fed demo run's one read, taken while its cache filled: the stages after it had produced
# nothing yet (what the issue saw as empty bars and dashes).
FED_STAGES = [
    _stage(0, "tensor_slices", "TensorSlice", ms=0.003, elements=856),
    _stage(1, "parallel_map", "ParallelMapV2 (autotune)", ms=1.07, elements=854, size=2,
           function="slow_decode", threads=2),
    _stage(2, "cache", "MemoryCacheImpl", ms=0.0009, elements=854, buffered=854),
    _stage(3, "cache", "MemoryCache", ms=0.0003, elements=854),
    _stage(4, "shuffle", "Shuffle", ms=None, elements=0, buffered=854),
    _stage(5, "batch", "BatchV2", ms=None, elements=0),
    _stage(6, "prefetch", "Prefetch", ms=None, elements=0, size=1),
]  # fmt: skip


# The starved demo run's pipeline: a serial map on one thread, no prefetch.
STARVED_STAGES = [
    _stage(0, "tensor_slices", "TensorSlice", ms=0.003, elements=4097),
    _stage(1, "shuffle", "Shuffle", ms=0.002, elements=2369, buffered=4096),
    _stage(2, "map_and_batch", "MapAndBatch", ms=70.3, elements=290, function="slow_decode"),
]  # fmt: skip


def _epochs(t0: float, epochs: int, steps: int) -> dict[str, list[Any]]:
    rows: dict[str, list[Any]] = {"epoch": [], "step": [], "t": [], "name": [], "value": []}
    for epoch in range(epochs):
        for name, value in (("loss", 1.0 / (epoch + 1)), ("accuracy", 0.6 + 0.03 * epoch),
                            ("val_loss", 0.85 + 0.01 * epoch), ("val_accuracy", 0.67)):  # fmt: skip
            rows["epoch"].append(epoch)
            rows["step"].append((epoch + 1) * steps)
            rows["t"].append(t0 + epoch + 1)
            rows["name"].append(name)
            rows["value"].append(value)
    return rows


def _host(t0: float, seconds: int) -> dict[str, list[Any]]:
    return {"t": [t0 + i for i in range(seconds)], "proc_cpu": [30.0] * seconds,
            "sys_cpu": [90.0] * seconds, "rss": [2.1e9] * seconds,
            "mem_used": [9e9] * seconds, "mem_total": [2.5e10] * seconds}  # fmt: skip


def _ingest(server: ServerProcess, hello: dict[str, Any], batches: list[dict[str, Any]]) -> int:
    hello = {"type": "hello", "protocol": 1, "run_key": uuid.uuid4().hex, "project": PROJECT,
             "tags": ["demo"], **hello}  # fmt: skip
    body = {"hello": hello, "batches": batches, "end": {"type": "end", "status": "finished"}}
    response = httpx.post(f"{server.url}/api/v1/ingest", json=body, timeout=30)
    assert response.status_code == 200, response.text
    return int(response.json()["run_id"])


def _fed_run(server: ServerProcess) -> int:
    n, t0 = 192, time.time() - 300
    steps = {"step": list(range(n)), "t": [t0 + i * 0.015 for i in range(n)],
             "dur": [0.002] * n, "wait": [0.0001] * n, "batch_size": [64] * n}  # fmt: skip
    batch = {"type": "batch", "seq": 1, "steps": steps, "host": _host(t0, 4),
             "epochs": _epochs(t0, 3, 64),
             "pipeline": {"t": [t0 + 1], "source": ["autotune_model"], "stages": [FED_STAGES],
                          "read_us": [420.0]}}  # fmt: skip
    config = {"pipeline": "fed", "epochs": 3, "steps_per_epoch": 64, "batch_size": 64}
    hello = {"name": "fed-pipeline", "config": config,
             "environment": _environment(epochs=3, steps=64, fed=True)}  # fmt: skip
    return _ingest(server, hello, [batch])


def _gpu_run(server: ServerProcess) -> int:
    n, t0 = 400, time.time() - 200
    steps = {"step": list(range(n)), "t": [t0 + i * 0.1 for i in range(n)],
             "dur": [0.1] * n, "wait": [0.03] * n, "batch_size": [256] * n}  # fmt: skip
    k = 40
    device = {"t": [t0 + i for i in range(k)], "gpu": [0] * k, "util": [62.0] * k,
              "mem_used": [3.1e10] * k, "mem_total": [8.5e10] * k, "temp_c": [61.0] * k,
              "power_w": [350.0] * k, "power_limit_w": [700.0] * k,
              "sm_clock_mhz": [1980.0] * k, "energy_j": [350.0 * i for i in range(k)]}  # fmt: skip
    env = {**_environment(epochs=10, steps=40, fed=True), "nvml": True, "nvml_error": None,
           "gpus": [{"index": 0, "name": "NVIDIA H200", "compute_capability": "9.0"}]}  # fmt: skip
    hello = {"name": "resnet50-imagenet-baseline-lr0.1-bs256", "project": "imagenet-baselines",
             "config": {"batch_size": 256, "learning_rate": 0.1}, "environment": env}  # fmt: skip
    batch = {"type": "batch", "seq": 1, "steps": steps, "device": device, "host": _host(t0, k)}
    return _ingest(server, hello, [batch])


def _starved_run(server: ServerProcess) -> int:
    """Through the agent socket, live, so that the real alert engine fires the demo's rule on
    it and asks its agent for a profile (the event's link)."""
    rule = {"name": "Demo: input-bound for 5 s", "metric": "input_wait_share",
            "comparison": ">=", "threshold": 0.2, "for_s": 0, "scope": "project",
            "project": PROJECT, "profile_steps": 20}  # fmt: skip
    created = httpx.post(f"{server.url}/api/v1/alert-rules", json=rule, timeout=10)
    assert created.status_code == 201, created.text
    env = _environment(epochs=6, steps=64, fed=False)
    agent = ScriptedAgent(server, name="starved-pipeline", project=PROJECT, environment=env)
    try:
        t0 = agent.t
        for _ in range(6):
            agent.steps(64, dur=0.076, wait=0.071)
        agent.send(
            host=_host(t0, 29), epochs=_epochs(t0, 6, 64),
            pipeline={"t": [t0 + 20], "source": ["autotune_model"], "stages": [STARVED_STAGES],
                      "read_us": [380.0]},
        )  # fmt: skip

        def fired() -> list[Any]:
            alerts = server.get("/api/v1/alerts", run_id=agent.run_id)["data"]
            return [a for a in alerts if a["fired_at"] and a["profile_id"] is not None]

        wait_for(fired, what="the demo rule's alert, with its profile")
        agent.end("finished")
    finally:
        agent.close()
    return agent.run_id


def _tune_group(server: ServerProcess, fed: int, starved: int) -> int:
    """A `stoker tune` group whose two trials are the starved and the fed run (as posted by
    `stoker tune`: a table with a speed-up, a line to edit and changes not tried)."""
    keys = [
        server.rows("SELECT run_key FROM run WHERE id = ?", run)[0][0] for run in (starved, fed)
    ]
    rows = [
        {"id": "unchanged", "label": "unchanged", "verdict": "unchanged", "steps_per_s": 12.3,
         "input_wait_share": 0.925, "batches": 200, "examples": 12800, "run_key": keys[0]},
        {"id": "parallel:2", "advice": "parallel", "label": "parallel map slow_decode",
         "title": "num_parallel_calls=AUTOTUNE, deterministic=True on map slow_decode",
         "verdict": "speed-up", "steps_per_s": 24.7, "input_wait_share": 0.871, "speedup": 2.0,
         "repeat_speedup": 1.96, "function": "slow_decode",
         "edit": edit("stoker_server/cli/demo_pipelines.py:63"), "run_key": keys[1]},
        {"id": "prefetch", "advice": "prefetch", "label": "prefetch at the end",
         "verdict": "not tried", "note": "already in effect: tf.data appends prefetch(AUTOTUNE) "
         "itself to a pipeline that ends in a synchronous stage (its inject_prefetch rewrite)"},
        {"id": "cache", "advice": "cache", "label": "cache", "verdict": "not tried",
         "note": "shuffle (stage 1) shuffles: a cache after it would repeat the first epoch's "
         "order, and nothing before it does work worth caching"},
    ]  # fmt: skip
    command = ["python", "-m", "stoker_server.cli.demo_pipelines", "starved"]
    trials = [("unchanged", "unchanged", keys[0]),
              ("parallel:2", "parallel map slow_decode", keys[1])]  # fmt: skip
    group = group_body(
        uuid.uuid4().hex[:16], command, trials, rows, project=PROJECT, cwd="/home/user/work",
        noise=0.05, best="parallel:2",
        noise_text="the best change's two runs differ by 2.0%, under the 5% floor",
        elements_text="Every trial compared took the same elements in its 200 steps as the "
        "unchanged run: 200 batches, 12,800 examples.",
        conclusion="Best: num_parallel_calls=AUTOTUNE, deterministic=True on map slow_decode: "
        "2.00x the unchanged run's steps/s, 1.96x again.",
    )  # fmt: skip
    stored = post_group(server, group)
    assert stored.status_code == 200, stored.text
    return int(stored.json()["id"])


@dataclass
class Runs:
    server: ServerProcess
    fed: int
    starved: int
    gpu: int
    tune: int = 0

    def routes(self) -> dict[str, str]:
        return {
            "runs": "#/",
            "run-fed": f"#/runs/{self.fed}",
            "run-starved": f"#/runs/{self.starved}",
            "run-gpu": f"#/runs/{self.gpu}",
            "compare": f"#/compare?runs={self.fed},{self.starved}",
            "alerts": "#/alerts",
            "cost": "#/cost",
            "tune": "#/tune",
            "tune-group": f"#/tune/{self.tune}",
        }


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Runs]:
    server = ServerProcess(data_dir=tmp_path_factory.mktemp("widths"), env=FAST_DETECTORS).start()
    try:
        fed, starved = _fed_run(server), _starved_run(server)
        yield Runs(server, fed=fed, starved=starved, gpu=_gpu_run(server),
                   tune=_tune_group(server, fed, starved))  # fmt: skip
    finally:
        server.stop()


def _ready(page: Any, name: str) -> None:
    """Until the page shows what its measurements are about (its data read, its charts sized)."""
    ids = {
        "runs": ["run-row"],
        "run-fed": ["verdict-banner", "pipeline-legend", "gpu-empty", "run-events"],
        "run-starved": ["verdict-banner", "gpu-empty", "event-profile"],
        "run-gpu": ["verdict-banner", "gpu-util-chart"],
        "compare": ["compare-table", "env-diff", "compare-epochs"],
        "alerts": ["alert-row", "alert-rule-row"],
        "cost": ["cost-runs"],
        "tune": ["tune-list-table"],
        "tune-group": ["tune-table", "tune-chart"],
    }[name]
    for test_id in ids:
        page.get_by_test_id(test_id).first.wait_for(timeout=20_000)
    if name == "run-starved":  # its "Prove it" open: the command to paste measured too
        page.get_by_test_id("prove-it-button").click()
        page.get_by_test_id("prove-it-command").wait_for(timeout=20_000)
    if name == "tune-group":
        wait_for(
            lambda: page.get_by_test_id("tune-chart").get_attribute("data-points") not in
            (None, "0"), what="the trials' steps drawn",
        )  # fmt: skip
    if name == "runs":
        wait_for(lambda: page.get_by_test_id("run-row").count() == 3, what="the three runs")
    if name.startswith("run-"):
        wait_for(
            lambda: page.get_by_test_id("host-chart").get_attribute("data-state") == "ok",
            what="the samples read",
        )
    _settled(page)


def _settled(page: Any) -> None:
    """Until the page's height holds over three reads: charts are added and sized as their data
    comes, and again after a resize (a ResizeObserver)."""
    heights: list[int] = []

    def settled() -> bool:
        heights.append(page.evaluate("() => document.documentElement.scrollHeight"))
        return len(heights) >= 3 and len(set(heights[-3:])) == 1

    wait_for(settled, interval_s=0.1, what="the page's height to settle")


def _box(locator: Any) -> dict[str, float]:
    box = locator.bounding_box()
    assert box is not None, locator
    return box


def _what_the_issue_saw(page: Any, name: str, runs: Runs) -> list[str]:
    """The issue's particular complaints, measured on `page` (showing `name`)."""
    seen: list[str] = []
    if name == "runs":
        table = page.get_by_test_id("runs-table")
        if not table.locator("th.gpu-col").first.is_visible():
            seen.append("GPU columns hidden although a run listed has GPU readings")
    if name in ("run-fed", "run-starved"):
        charts = [t for t in ("gpu-util-chart", "memory-chart", "thermal-chart")
                  if page.get_by_test_id(t).is_visible()]  # fmt: skip
        if charts:
            seen.append(f"empty GPU charts shown without a GPU: {charts}")
        if _box(page.get_by_test_id("gpu-empty"))["height"] > 90:
            seen.append("the no-GPU note is not compact")
    if name == "run-gpu" and page.get_by_test_id("gpu-empty").is_visible():
        seen.append("the no-GPU note on a run with GPU readings")
    if name == "run-starved":
        link = _box(page.get_by_test_id("event-profile").first)
        events = page.get_by_test_id("run-events")
        row = events.locator("li", has=page.get_by_test_id("event-profile")).first
        kind = _box(row.locator(".event-kind"))
        if link["x"] < kind["x"] + kind["width"]:
            seen.append("the event's profile link is not in the message column")
    return seen


def test_every_page_reads_well_at_1024_1440_and_1920_px_light_and_dark(
    runs: Runs, browser: Any
) -> None:
    """Each page is opened once, then shown at each width in each theme (the viewport resized,
    the colour scheme switched), measured and photographed there."""
    screens = ARTIFACTS / "screens"
    screens.mkdir(parents=True, exist_ok=True)
    problems: list[str] = []
    context = browser.new_context(viewport={"width": WIDTHS[0], "height": 900})
    page = context.new_page()
    page.goto(f"{runs.server.url}/")
    try:
        for name, route in runs.routes().items():
            page.evaluate("(hash) => { location.hash = hash; }", route)
            _ready(page, name)
            for theme in THEMES:
                page.emulate_media(color_scheme=theme)
                for width in WIDTHS:
                    page.set_viewport_size({"width": width, "height": 900})
                    _settled(page)
                    shown = page.evaluate("() => document.documentElement.dataset.theme")
                    assert shown == theme, (name, shown, theme)
                    page.screenshot(path=str(screens / f"{name}-{width}-{theme}.png"),
                                    full_page=True)  # fmt: skip
                    found = layout_problems(page) + _what_the_issue_saw(page, name, runs)
                    problems += [f"{name} at {width} px, {theme}: {p}" for p in found]
    finally:
        context.close()
    assert not problems, "\n".join(problems)


def test_runs_list_without_a_gpu_run_hides_the_gpu_columns_and_says_why(
    runs: Runs, browser: Any
) -> None:
    context = browser.new_context(viewport={"width": 1024, "height": 800})
    page = context.new_page()
    try:
        page.goto(f"{runs.server.url}/#/")
        wait_for(lambda: page.get_by_test_id("run-row").count() == 3, what="the three runs")
        assert page.get_by_test_id("runs-table").locator("th.gpu-col").first.is_visible()
        assert page.get_by_test_id("runs-no-gpu").is_hidden()
        page.get_by_role("searchbox", name="Filter runs").fill(PROJECT)  # the demo's two
        wait_for(lambda: page.get_by_test_id("run-row").count() == 2, what="the demo's runs")
        assert page.get_by_test_id("runs-table").locator("th.gpu-col").first.is_hidden()
        assert page.get_by_test_id("runs-no-gpu").is_visible()
        assert not layout_problems(page)
    finally:
        context.close()
