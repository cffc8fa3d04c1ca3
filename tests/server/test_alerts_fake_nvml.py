"""The default low-utilization rule end to end: a real training loop in a child process whose
agent samples the fake NVML (scripted 95 % → 30 % → 95 %), a real server, and a loopback
webhook receiver that gets the firing and the resolution."""

import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests.harness.detect_support import FAST_DETECTORS, LiveListener, WebhookReceiver
from tests.harness.fake_nvml import FakeNvml
from tests.harness.support import REPO, ServerProcess, wait_for


@pytest.fixture
def fast_server(tmp_path: Path) -> Iterator[ServerProcess]:
    process = ServerProcess(data_dir=tmp_path / "server", env=FAST_DETECTORS).start()
    yield process
    process.stop()


def test_fake_gpu_utilization_drop_fires_default_rule_and_resolves_with_webhooks(
    fast_server: ServerProcess, fake_nvml: FakeNvml, tmp_path: Path
) -> None:
    receiver = WebhookReceiver()
    live = LiveListener(fast_server)
    rules = fast_server.get("/api/v1/alert-rules")["data"]
    rule = next(r for r in rules if r["builtin"] == "low_gpu_util")
    patched = httpx.patch(
        f"{fast_server.url}/api/v1/alert-rules/{rule['id']}",
        json={
            "for_s": 1.0,
            "keep_firing_for_s": 0.5,
            "channels": [{"type": "browser"},
                         {"type": "webhook", "url": f"{receiver.url}/hook"},
                         {"type": "webhook", "url": f"{receiver.url}/slack", "format": "slack"}],
        },
    )  # fmt: skip
    assert patched.status_code == 200, patched.text

    fake_nvml.write(gpu0={"util": 95})
    stop = tmp_path / "stop"
    env = {**os.environ, **fake_nvml.env()}
    env.pop("CUDA_VISIBLE_DEVICES", None)
    child = subprocess.Popen(
        [sys.executable, "-m", "tests.harness.loop_script", "--server", fast_server.url,
         "--name", "fake-gpu", "--stop-file", str(stop), "--interval-s", "0.1"],
        cwd=REPO, env=env,
    )  # fmt: skip
    try:
        run_id = wait_for(
            lambda: next(
                (r["id"] for r in fast_server.get("/api/v1/runs")["data"]
                 if (r["summary"]["gpu_util_mean"] or 0) >= 90),
                None,
            ),
            timeout_s=60,
            what="the loop's 95 % samples stored",
        )  # fmt: skip
        assert fast_server.get("/api/v1/alerts", run_id=run_id)["count"] == 0

        fake_nvml.write(gpu0={"util": 30})
        onset = time.monotonic()
        firing = wait_for(
            lambda: fast_server.get("/api/v1/alerts", run_id=run_id, state="firing")["data"],
            what="the default low-utilization rule firing",
        )[0]
        print(f"utilization drop → firing: {time.monotonic() - onset:.2f} s (for_s = 1)")
        assert firing["rule_id"] == rule["id"] and firing["value"] < 70

        fake_nvml.write(gpu0={"util": 95})
        wait_for(
            lambda: fast_server.get("/api/v1/alerts", run_id=run_id, state="resolved")["data"],
            what="the alert resolved",
        )
        states = [
            m["alert"]["state"]
            for m in live.of_type("alert", lambda m: m["alert"]["id"] == firing["id"])
        ]
        assert states[:2] == ["pending", "firing"]
        wait_for(lambda: len(receiver.at("/hook")) >= 2, what="firing and resolved webhooks")
        wait_for(lambda: len(receiver.at("/slack")) >= 2, what="firing and resolved on Slack")
        assert [p["event"] for p in receiver.at("/hook")] == ["firing", "resolved"]
        assert receiver.at("/hook")[0]["run"]["name"] == "fake-gpu"
    finally:
        stop.touch()
        assert child.wait(timeout=60) == 0
        live.close()
        receiver.close()
