"""What a profiler capture costs on the demo model: `stoker demo` trains a starved and a fed run;
each is profiled for `--steps` steps from the API while it trains. Prints, per run, the
capture's overhead (median step during vs before, start and stop cost), the trace size per step
and the profiler's input share beside Stoker's over the same steps.

    .venv/bin/python -m bench.profile_overhead [--steps 20] [--epochs 20]
"""

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx

REPO = Path(__file__).resolve().parent.parent
from tests.harness.support import free_port  # noqa: E402

START_AFTER_STEPS = 30


def _report(name: str, p: dict[str, Any]) -> None:
    o = p["overhead"]
    if p["status"] != "ready":
        print(f"{name}: {p['status']} {p['error']}")
        return
    share_p, share_s = p["input_share_profiler"], p["input_share_stoker"]
    print(
        f"{name}: median step {o['step_s_before'] * 1e3:.2f} ms before, "
        f"{o['step_s_during'] * 1e3:.2f} ms during ({(o['ratio'] - 1) * 100:+.1f} %); "
        f"start {o['start_s'] * 1e3:.1f} ms, stop {o['stop_s'] * 1e3:.1f} ms; trace "
        f"{p['trace_bytes'] / 1024:.0f} KiB = {p['trace_bytes'] / p['steps'] / 1024:.1f} KiB/step; "
        f"input share profiler {share_p if share_p is None else f'{share_p:.3f}'}, "
        f"Stoker {share_s if share_s is None else f'{share_s:.3f}'}"
    )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--epochs", type=int, default=20)
    args = parser.parse_args()
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    print(f"load average {os.getloadavg()[0]:.2f}")
    with tempfile.TemporaryDirectory() as data_dir:
        demo = subprocess.Popen(
            [sys.executable, "-m", "stoker_server.cli", "demo", "--port", str(port),
             "--data-dir", data_dir, "--epochs", str(args.epochs)],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, cwd=REPO,
        )  # fmt: skip
        asked: dict[int, tuple[str, int]] = {}  # run id -> (name, profile id)
        settled: set[int] = set()
        try:
            deadline = time.monotonic() + 900
            while demo.poll() is None and len(settled) < 2 and time.monotonic() < deadline:
                time.sleep(0.5)
                try:
                    runs = httpx.get(f"{url}/api/v1/runs", timeout=5).json()["data"]
                except httpx.HTTPError:
                    continue
                for run in runs:
                    steps = (run.get("summary") or {}).get("steps", 0)
                    if run["id"] in asked or run["status"] != "running":
                        continue
                    if steps < START_AFTER_STEPS:
                        continue
                    r = httpx.post(f"{url}/api/v1/runs/{run['id']}/profiles",
                                   json={"steps": args.steps}, timeout=10)  # fmt: skip
                    if r.status_code == 202:
                        asked[run["id"]] = (run["name"], r.json()["id"])
                for run_id, (name, pid) in asked.items():
                    if run_id in settled:
                        continue
                    p = httpx.get(f"{url}/api/v1/runs/{run_id}/profiles/{pid}", timeout=10).json()
                    ready = p["status"] == "ready" and p["input_share_stoker"] is not None
                    if ready or p["status"] == "failed":
                        settled.add(run_id)
                        _report(name, p)
        finally:
            demo.terminate()
            demo.wait(60)
    return 0 if len(settled) == 2 else 1


if __name__ == "__main__":
    sys.exit(main())
