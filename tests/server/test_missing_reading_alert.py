"""A missing reading never feeds an alert rule as 0.

A real loop in a child process samples the fake NVML through the real binding; the GPU
answers no utilization at all (a MIG instance answers NOT_SUPPORTED; a driver can fail), so
the agent sends null. The default "GPU utilization below 70 %" rule (shortened `for`) must
stay silent while steps run on missing data, and fire once a real 30 % arrives, which
shows the rule was live all along.
"""

import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests.harness.detect_support import FAST_DETECTORS
from tests.harness.fake_nvml import NOT_SUPPORTED, FakeNvml
from tests.harness.support import REPO, ServerProcess, wait_for

NO_UTILIZATION = {
    "nvmlDeviceGetSamples": NOT_SUPPORTED,
    "nvmlDeviceGetUtilizationRates": NOT_SUPPORTED,
}


@pytest.fixture
def fast_server(tmp_path: Path) -> Iterator[ServerProcess]:
    process = ServerProcess(data_dir=tmp_path / "server", env=FAST_DETECTORS).start()
    yield process
    process.stop()


def test_missing_utilization_never_fires_the_low_utilization_rule(
    fast_server: ServerProcess, fake_nvml: FakeNvml, tmp_path: Path
) -> None:
    rule = next(
        r for r in fast_server.get("/api/v1/alert-rules")["data"] if r["builtin"] == "low_gpu_util"
    )
    patched = httpx.patch(
        f"{fast_server.url}/api/v1/alert-rules/{rule['id']}",
        json={"for_s": 0.5, "keep_firing_for_s": 0.5},
    )
    assert patched.status_code == 200, patched.text

    fake_nvml.write(errors=NO_UTILIZATION, gpu0={"util": 0, "power_mw": 100_000})
    stop = tmp_path / "stop"
    env = {**os.environ, **fake_nvml.env()}
    env.pop("CUDA_VISIBLE_DEVICES", None)
    child = subprocess.Popen(
        [sys.executable, "-m", "tests.harness.loop_script", "--server", fast_server.url,
         "--name", "no-util", "--stop-file", str(stop), "--interval-s", "0.1"],
        cwd=REPO, env=env,
    )  # fmt: skip
    try:
        run_id = wait_for(
            lambda: next(
                (r["id"] for r in fast_server.get("/api/v1/runs")["data"]
                 if r["summary"]["steps"] >= 50),
                None,
            ),
            timeout_s=60,
            what="the loop stepping",
        )  # fmt: skip
        # Device rows arrive (power is there) with utilization null, never 0.
        samples = wait_for(
            lambda: (s := fast_server.get(f"/api/v1/runs/{run_id}/samples", fields="util,power_w"))
            and s["series"] and len(s["series"][0]["t"]) >= 20 and s,
            what="device rows stored",
        )  # fmt: skip
        series = samples["series"][0]
        assert set(series["util"]) == {None}
        assert set(series["power_w"]) == {100.0}
        time.sleep(3.0)  # six times the rule's `for`, while steps run on missing data
        assert fast_server.get("/api/v1/alerts", run_id=run_id)["count"] == 0
        assert fast_server.get(f"/api/v1/runs/{run_id}")["summary"]["gpu_util_mean"] is None

        fake_nvml.write(gpu0={"util": 30})  # a real low reading: the rule was live
        firing = wait_for(
            lambda: fast_server.get("/api/v1/alerts", run_id=run_id, state="firing")["data"],
            what="the rule firing on a real 30 %",
        )[0]
        assert firing["value"] == pytest.approx(30.0)
    finally:
        stop.touch()
        assert child.wait(timeout=60) == 0
