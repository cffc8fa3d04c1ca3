"""Live latency with the agent's defaults: a step's end in the training process → its
arrival on a watching browser's socket; and the server's CPU per stored row.

One real `stoker serve` on loopback, one real agent process (`tests.harness.loop_script`: `Monitor`
over `--steps` steps of `--step-s`, the issue's 600 x 20 ms), one browser on `/api/v1/live`.
Cases, each a fresh run:
- `watched`: the browser subscribes before the steps start; the server tells the agent
  (`watch` command) and it sends every 50 ms. The figure the target is checked on.
- `watched, old pace`: the same with the agent kept at the pace it had before the `watch`
  command existed (every 0.5 s, watched or not): the baseline.
- `unwatched` and `unwatched, old pace`: no browser at all; only the server's CPU per row
  counts (nothing is delivered live).
Latency of a step = arrival time of the message holding it - (its t + dur), both wall
clock on this machine. Server CPU per row = the server process's user + system CPU time
over the case / rows stored.

Usage: .venv/bin/python -m bench.live_latency [--steps 600] [--step-s 0.02] [--repeats 1]
"""

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

import psutil
from websockets.sync.client import connect

from tests.harness.support import REPO, ServerProcess, wait_for

TARGET_P95_S = 0.150
OLD_PACE = {"STOKER_FLUSH_INTERVAL_S": "0.5", "STOKER_WATCHED_FLUSH_INTERVAL_S": "0.5"}


@dataclass
class Case:
    name: str
    watched: bool
    env: dict[str, str] = field(default_factory=dict)


CASES = [
    Case("watched", True),
    Case("watched, old pace (0.5 s)", True, OLD_PACE),
    Case("unwatched", False),
    Case("unwatched, old pace (0.5 s)", False, OLD_PACE),
]


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))] if ordered else float("nan")


def watch(server: ServerProcess, name: str, latencies: list[float], ready: threading.Event,
          done: threading.Event) -> None:  # fmt: skip
    """The browser: subscribe to the run named `name` as soon as it exists, then time steps."""
    with connect(f"{server.ws_url}/api/v1/live", max_size=None) as ws:
        run_id = None
        while run_id is None:
            message = json.loads(ws.recv(timeout=60))
            if message["type"] == "run" and message["run"]["name"] == name:
                run_id = message["run"]["id"]
        ws.send(json.dumps({"type": "subscribe", "run_id": run_id}))
        ready.set()
        while not done.is_set():
            try:
                raw = ws.recv(timeout=0.5)
            except TimeoutError:
                continue
            arrived = time.time()
            message = json.loads(raw)
            if message["type"] == "steps" and message["run_id"] == run_id:
                data = message["data"]
                latencies += [
                    arrived - (t + d) for t, d in zip(data["t"], data["dur"], strict=True)
                ]


def run_case(server: ServerProcess, case: Case, args: argparse.Namespace, index: int) -> dict:
    name = f"live-{index}"
    start_file = Path(tempfile.mkdtemp()) / "start"
    env = {**os.environ, **case.env}
    agent = subprocess.Popen(
        [sys.executable, "-m", "tests.harness.loop_script", "--server", server.url, "--name", name,
         "--steps", str(args.steps), "--step-s", str(args.step_s), "--interval-s", "1",
         "--start-file", str(start_file)],
        cwd=REPO, env=env, stdout=subprocess.DEVNULL,
    )  # fmt: skip
    latencies: list[float] = []
    ready, done = threading.Event(), threading.Event()
    browser = None
    if case.watched:
        browser = threading.Thread(target=watch, args=(server, name, latencies, ready, done))
        browser.start()
        ready.wait(60)
        time.sleep(1.5)  # the agent takes the watch command at its next send (≤ 1 s)
    else:
        wait_for(lambda: any(r["name"] == name for r in server.get("/api/v1/runs")["data"]),
                 timeout_s=60, what="the run")  # fmt: skip
    assert server.process is not None  # started
    process = psutil.Process(server.process.pid)
    cpu_before = sum(process.cpu_times()[:2])
    start_file.touch()
    agent.wait(timeout=600)
    run = wait_for(
        lambda: next((r for r in server.get("/api/v1/runs")["data"]
                      if r["name"] == name and r["status"] == "finished"), None),
        timeout_s=60, what="the run finished",
    )  # fmt: skip
    assert run is not None  # wait_for returns a truthy value
    cpu = sum(process.cpu_times()[:2]) - cpu_before
    done.set()
    if browser is not None:
        browser.join()
    rows = run["summary"]["steps"]
    return {"latencies": latencies, "cpu_per_row_us": cpu / max(rows, 1) * 1e6, "rows": rows}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=600)
    parser.add_argument("--step-s", type=float, default=0.02)
    parser.add_argument("--repeats", type=int, default=1, help="runs per case")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as data_dir:
        server = ServerProcess(data_dir=Path(data_dir)).start()
        try:
            print(f"load average {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
            print(f"{'case':30} {'steps':>6} {'p50 ms':>8} {'p95 ms':>8} {'server CPU µs/row':>18}")
            index = 0
            for case in CASES:
                latencies: list[float] = []
                cpu: list[float] = []
                rows = 0
                for _ in range(args.repeats):
                    index += 1
                    result = run_case(server, case, args, index)
                    latencies += result["latencies"]
                    cpu.append(result["cpu_per_row_us"])
                    rows += result["rows"]
                p50 = f"{percentile(latencies, 0.5) * 1e3:8.1f}" if latencies else f"{'-':>8}"
                p95 = f"{percentile(latencies, 0.95) * 1e3:8.1f}" if latencies else f"{'-':>8}"
                print(f"{case.name:30} {rows:6d} {p50} {p95} {statistics.median(cpu):18.1f}",
                      flush=True)  # fmt: skip
            print(f"target: watched p95 < {TARGET_P95_S * 1e3:.0f} ms with the defaults; "
                  "unwatched CPU per row no higher than at the old pace")  # fmt: skip
            print(f"load average {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
        finally:
            server.stop()


if __name__ == "__main__":
    main()
