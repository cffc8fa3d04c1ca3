"""The GPU figures (SM and tensor activity, energy) on the run page, in real headless Chromium
against a real `stoker serve` with a price per kWh: a run on a Hopper GPU (GPM rows, energy)
shows SM active and tensor active beside GPU utilization, its GPU energy and the energy burned
while starved (priced), and the launch-bound finding under the verdict; a run on a GPU without
GPM shows no GPM figure (not 0 %). The runs list shows each run's GPU energy, what was burned
while starved, priced, and dashes (with their reason) for a run without GPU readings. Runs are
fed through the HTTP ingest, as an agent sends them. Screenshots:
test-artifacts/ui-gpu-truth*.png."""

import re
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.harness.support import ServerProcess

expect = pytest.importorskip("playwright.sync_api").expect

H100 = {"gpus": [{"index": 0, "name": "NVIDIA H100", "compute_capability": "9.0",
                  "memory_total_bytes": 80 * 2**30}], "mixed_precision_policy": "mixed_bfloat16",
        "jit_compile": False, "steps_per_execution": 1}  # fmt: skip


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    env = {"STOKER_ENERGY_PRICE_KWH": "0.5", "STOKER_CURRENCY": "€"}
    process = ServerProcess(data_dir=tmp_path_factory.mktemp("gpu-truth-ui"), env=env).start()
    yield process
    process.stop()


def _run(server: ServerProcess, name: str, *, gpm: bool) -> int:
    """A finished run of 200 steps of 50 ms (30 ms waiting) and a reading every second at
    400 W; SM utilization 20 % while NVML says 98 %, with `gpm`."""
    n, dur, wait = 200, 0.05, 0.03
    t0 = time.time() - 60
    rows = 11
    device: dict[str, Any] = {
        "t": [t0 + i for i in range(rows)], "gpu": [0] * rows, "util": [98.0] * rows,
        "power_w": [400.0] * rows, "energy_j": [400.0 * i for i in range(rows)],
        "energy_integrated": [False] * rows,
        "mem_used": [20 * 2**30] * rows, "mem_total": [80 * 2**30] * rows,
        "tf_mem_peak": [18 * 2**30] * rows,
    }  # fmt: skip
    if gpm:
        device.update(sm_util=[None] + [20.0] * (rows - 1),
                      tensor_util=[None] + [30.0] * (rows - 1))  # fmt: skip
    batch = {
        "type": "batch", "seq": 1,
        "steps": {"step": list(range(n)), "t": [t0 + i * dur for i in range(n)],
                  "dur": [dur] * n, "wait": [wait] * n, "batch_size": [32] * n},
        "device": device,
    }  # fmt: skip
    hello = {"type": "hello", "protocol": 1, "run_key": uuid.uuid4().hex, "name": name,
             "project": "gpu-truth", "environment": H100}  # fmt: skip
    body = {"hello": hello, "batches": [batch], "end": {"type": "end", "status": "finished"}}
    response = httpx.post(f"{server.url}/api/v1/ingest", json=body, timeout=30)
    assert response.status_code == 200, response.text
    return response.json()["run_id"]


def test_run_page_shows_gpm_energy_and_findings(
    server: ServerProcess, page: Any, artifacts: Path
) -> None:
    run_id = _run(server, "hopper", gpm=True)
    energy = server.get(f"/api/v1/runs/{run_id}/energy")
    assert energy["total_j"] == pytest.approx(4000.0)
    assert energy["starved_j"] == pytest.approx(4000.0 * 0.6, rel=0.01)  # steps cover 10 s
    diagnosis = server.get(f"/api/v1/runs/{run_id}/diagnosis")
    assert [f["key"] for f in diagnosis["gpu_findings"]] == ["launch_bound"]

    page.goto(f"{server.url}/#/runs/{run_id}")
    expect(page.locator('[data-figure="gpu"] dd')).to_have_text("98 %", timeout=15_000)
    expect(page.locator('[data-figure="sm_util"] dd')).to_have_text("20 %")
    expect(page.locator('[data-figure="tensor_util"] dd')).to_have_text("30 %")
    expect(page.locator('[data-figure="energy"] dd')).to_have_text("4.0 kJ · €0.00056")
    expect(page.locator('[data-figure="energy_starved"] dd')).to_have_text(
        "2.4 kJ (60 %) · €0.00033"
    )
    findings = page.get_by_test_id("gpu-findings")
    expect(findings).to_contain_text("launch-bound")
    expect(findings).to_contain_text("jit_compile=True")
    page.screenshot(path=str(artifacts / "ui-gpu-truth.png"), full_page=True)


def test_a_gpu_without_gpm_shows_no_gpm_figure(server: ServerProcess, page: Any) -> None:
    run_id = _run(server, "ampere", gpm=False)
    assert server.get(f"/api/v1/runs/{run_id}")["summary"]["sm_util_mean"] is None
    page.goto(f"{server.url}/#/runs/{run_id}")
    expect(page.locator('[data-figure="energy"] dd')).to_have_text(
        "4.0 kJ · €0.00056", timeout=15_000
    )
    expect(page.locator('[data-figure="sm_util"]')).to_have_count(0)
    expect(page.locator('[data-figure="tensor_util"]')).to_have_count(0)
    expect(page.get_by_test_id("gpu-findings")).to_have_count(0)


def _host_only_run(server: ServerProcess, name: str) -> int:
    """A finished run of 100 steps of 50 ms (30 ms waiting) with no GPU: no device rows."""
    n, dur, wait = 100, 0.05, 0.03
    t0 = time.time() - 30
    batch = {
        "type": "batch", "seq": 1,
        "steps": {"step": list(range(n)), "t": [t0 + i * dur for i in range(n)],
                  "dur": [dur] * n, "wait": [wait] * n, "batch_size": [32] * n},
    }  # fmt: skip
    hello = {"type": "hello", "protocol": 1, "run_key": uuid.uuid4().hex, "name": name,
             "project": "gpu-truth", "environment": {}}  # fmt: skip
    body = {"hello": hello, "batches": [batch], "end": {"type": "end", "status": "finished"}}
    response = httpx.post(f"{server.url}/api/v1/ingest", json=body, timeout=30)
    assert response.status_code == 200, response.text
    return response.json()["run_id"]


def test_runs_list_shows_energy_burned_while_starved_and_no_gpu_time_for_a_host_run(
    server: ServerProcess, page: Any, artifacts: Path
) -> None:
    gpu_run = _run(server, "list-hopper", gpm=True)
    host_run = _host_only_run(server, "list-host-only")
    assert server.get(f"/api/v1/runs/{gpu_run}")["summary"]["energy_j"] == pytest.approx(4000.0)
    assert server.get(f"/api/v1/runs/{host_run}")["summary"]["energy_j"] is None

    page.goto(f"{server.url}/#/")
    gpu_row = page.locator(f'[data-testid="run-row"][data-run-id="{gpu_run}"]')
    host_row = page.locator(f'[data-testid="run-row"][data-run-id="{host_run}"]')
    # 4000 J at 0.5 €/kWh; 60 % of the covered time the steps waited for input.
    energy = gpu_row.get_by_test_id("run-energy")
    expect(energy).to_contain_text("4.0 kJ · €0.00056", timeout=15_000)
    expect(gpu_row.get_by_test_id("run-energy-starved")).to_have_text(
        "starved 2.4 kJ (60 %) · €0.00033"
    )
    expect(energy).to_have_attribute("title", re.compile(r"^GPU energy the run drew"))
    # A run without GPU readings: its host is its device, whose time its waits lost (as its run
    # page says); no energy (a dash that says why, not 0 J).
    lost = host_row.get_by_test_id("lost-gpu")
    expect(lost).not_to_have_text("—")
    expect(lost).to_have_attribute("title", re.compile(r"no GPU seen: the device is the host"))
    expect(host_row.get_by_test_id("run-energy")).to_have_text("—")
    expect(gpu_row.get_by_test_id("lost-gpu")).not_to_have_text("—")
    page.screenshot(path=str(artifacts / "ui-gpu-truth-runs.png"), full_page=True)
