"""Two `stoker serve` processes on one PostgreSQL: combined ingest, live latency
across servers, and one server killed while the other keeps serving.

One throwaway PostgreSQL, servers A and B on loopback ports sharing it. Phases:

1. ingest: `--agents` WebSocket agents (bench.ingest's) on A alone, then the same number split
   over A and B: committed step rows/s of each, and their ratio.
2. live: real agent processes (`tests.harness.loop_script`: trainer_agent's `Monitor` and sender,
   the
   defaults) split over A and B, and live browsers (`/api/v1/live` clients) on both servers,
   each subscribed to every run. Latency of a step = its arrival on a browser's socket - the
   step's end (t + dur), by (server the agent sends to -> server the browser reads from).
3. watched from B only: one agent on A, one browser on B and none on A.
4. kill: an agent on each server and a browser on B; A is killed (SIGKILL) mid-run. Meanwhile
   B's runs list is read in a loop, B's browser times B's agent's steps, and B's stored steps
   are counted. A's agent spools; A is restarted after `--outage-s` on the same port and the
   agent sends what it spooled; what its run's end left in the spool is sent with
   `stoker upload` to B. Prints whether every step of both runs was stored once.

    .venv/bin/python -m bench.two_servers [--agents 8] [--seconds 10] [--live-steps 500]
                                          [--outage-s 10]
"""

import argparse
import asyncio
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
from websockets.asyncio.client import connect

from bench.ingest import TARGET_ROWS_PER_S, _agent, _frame
from tests.harness.support import REPO, PostgresServer, ServerProcess, upload_spool, wait_for

STEP_S = 0.02


def load() -> str:
    return " ".join(f"{x:.2f}" for x in os.getloadavg())


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))] if ordered else float("nan")


def p50_p95(values: list[float]) -> str:
    return (
        f"p50 {percentile(values, 0.5) * 1e3:.1f} ms, p95 {percentile(values, 0.95) * 1e3:.1f} ms"
    )


# --- browsers ---------------------------------------------------------------------------------
@dataclass
class Seen:
    """What the browsers received: latency per (agent server, browser server), steps per
    (browser, run)."""

    latency: dict[tuple[str, str], list[float]] = field(default_factory=lambda: defaultdict(list))
    arrivals: list[tuple[float, str, str, float]] = field(default_factory=list)
    steps: dict[tuple[int, int], set[int]] = field(default_factory=lambda: defaultdict(set))
    subscribed: dict[int, set[int]] = field(default_factory=lambda: defaultdict(set))


async def browser(
    index: int, server: ServerProcess, label: str, prefix: str, seen: Seen, stop: asyncio.Event
) -> None:
    """A live client of `server` (named `label`) that subscribes to every run named
    `prefix-*` as it appears; a run's name says which server its agent sends to."""
    origins: dict[int, str] = {}
    async with connect(f"{server.ws_url}/api/v1/live", max_size=None) as ws:
        while not stop.is_set():
            try:
                raw = await asyncio.wait_for(ws.recv(), timeout=0.2)
            except TimeoutError:
                continue
            arrived = time.time()
            message = json.loads(raw)
            if message["type"] == "run":
                run = message["run"]
                name = run["name"]
                if name.startswith(prefix + "-") and run["id"] not in origins:
                    origins[run["id"]] = name.split("-")[-2]
                    await ws.send(json.dumps({"type": "subscribe", "run_id": run["id"]}))
                    seen.subscribed[index].add(run["id"])
            elif message["type"] == "steps" and message["run_id"] in origins:
                data = message["data"]
                pair = (origins[message["run_id"]], label)
                for step, t, dur in zip(data["step"], data["t"], data["dur"], strict=True):
                    seen.latency[pair].append(arrived - (t + dur))
                    seen.arrivals.append((arrived, *pair, arrived - (t + dur)))
                    seen.steps[(index, message["run_id"])].add(step)


class Browsers:
    """Live clients on their own event loop thread, so the bench's own waits never delay a
    message's arrival time."""

    def __init__(self, clients: list[tuple[ServerProcess, str]], prefix: str) -> None:
        self.seen = Seen()
        self._loop = asyncio.new_event_loop()
        self._stop = asyncio.Event()
        self._thread = threading.Thread(target=self._run, args=(clients, prefix), daemon=True)
        self._thread.start()

    def _run(self, clients: list[tuple[ServerProcess, str]], prefix: str) -> None:
        async def main() -> None:
            self._stop = asyncio.Event()
            await asyncio.gather(
                *(browser(i, s, label, prefix, self.seen, self._stop)
                  for i, (s, label) in enumerate(clients)),
                return_exceptions=True,
            )  # fmt: skip

        self._loop.run_until_complete(main())

    def close(self) -> None:
        self._loop.call_soon_threadsafe(self._stop.set)
        self._thread.join(timeout=10)


# --- agents -----------------------------------------------------------------------------------
@dataclass
class Agent:
    name: str
    process: subprocess.Popen[bytes]
    spool: Path
    log: Path

    def spooled_bytes(self) -> int:
        return sum(p.stat().st_size for p in self.spool.rglob("*") if p.is_file())


def start_agent(server: ServerProcess, name: str, steps: int, start_file: Path, tmp: Path) -> Agent:
    """A real agent process: `Monitor` over `steps` steps of `STEP_S`, its spool in `tmp`."""
    spool, log = tmp / f"spool-{name}", tmp / f"agent-{name}.log"
    env = {**os.environ, "STOKER_SPOOL_DIR": str(spool)}
    process = subprocess.Popen(
        [sys.executable, "-m", "tests.harness.loop_script", "--server", server.url, "--name", name,
         "--steps", str(steps), "--step-s", str(STEP_S), "--interval-s", "1",
         "--start-file", str(start_file)],
        cwd=REPO, env=env, stdout=log.open("wb"), stderr=subprocess.STDOUT,
    )  # fmt: skip
    return Agent(name, process, spool, log)


def runs_named(server: ServerProcess, prefix: str) -> dict[str, dict]:
    runs = server.get("/api/v1/runs", limit=1000)["data"]
    return {r["name"]: r for r in runs if r["name"].startswith(prefix + "-")}


def wait_runs(server: ServerProcess, prefix: str, count: int) -> None:
    wait_for(lambda: len(runs_named(server, prefix)) >= count, timeout_s=120,
             what=f"{count} runs {prefix}-*")  # fmt: skip


def wait_subscribed(browsers: Browsers, clients: int, runs: int) -> None:
    def ready() -> bool:
        subscribed = browsers.seen.subscribed
        return len(subscribed) == clients and all(len(s) >= runs for s in subscribed.values())

    wait_for(ready, timeout_s=60, what="every browser subscribed to every run")


def finish(agents: list[Agent], timeout_s: float = 600) -> None:
    for agent in agents:
        agent.process.wait(timeout=timeout_s)


def wait_finished(server: ServerProcess, prefix: str, count: int, steps: int) -> dict:
    """The runs once all `count` ended with `steps` steps each; after 120 s, as they are
    (the caller reports what is missing)."""
    deadline = time.monotonic() + 120
    while True:
        runs = runs_named(server, prefix)
        ended = [r for r in runs.values() if r["status"] != "running"]
        if len(ended) == count and all(r["summary"]["steps"] == steps for r in ended):
            return runs
        if time.monotonic() > deadline:
            state = [(n, r["status"], r["summary"]["steps"]) for n, r in runs.items()]
            print(f"   (not complete after 120 s: {state})")
            return runs
        time.sleep(0.2)


# --- phases -----------------------------------------------------------------------------------
def settle(server: ServerProcess) -> None:
    """Wait until the server has stored what the last phase sent (its writer is idle: a runs
    list answers within 100 ms twice in a row)."""
    quick = 0
    deadline = time.monotonic() + 120
    while quick < 2 and time.monotonic() < deadline:
        started = time.perf_counter()
        server.get("/api/v1/runs")
        quick = quick + 1 if time.perf_counter() - started < 0.1 else 0
        time.sleep(0.5)


async def split_load(servers: list[ServerProcess], agents: int, seconds: float) -> list[dict]:
    """bench.ingest's load with its agents dealt over `servers`, all from one start: the
    frames are built first (building them while another server's agents run would stall
    those agents)."""
    batch, window = 1000, 2
    frames = int(seconds * TARGET_ROWS_PER_S * 2 / agents / batch) + 10
    payloads = [_frame(seq, (seq - 1) * batch, batch) for seq in range(1, frames + 1)]
    outs: list[dict[str, Any]] = [{"latencies": [], "rows": 0, "last_ack": 0.0} for _ in servers]
    start = time.perf_counter()
    await asyncio.gather(
        *(_agent(f"{servers[i % len(servers)].ws_url}/api/v1/agent", payloads, batch, window,
                 start + seconds, outs[i % len(servers)]) for i in range(agents))
    )  # fmt: skip
    for out in outs:
        out["elapsed"] = out["last_ack"] - start
    return outs


def rate(result: dict) -> float:
    return result["rows"] / result["elapsed"] if result["rows"] else 0.0


def phase_ingest(a: ServerProcess, b: ServerProcess, args: argparse.Namespace, tmp: Path) -> None:
    one = asyncio.run(split_load([a], args.agents, args.seconds))[0]

    split = asyncio.run(split_load([a, b], args.agents, args.seconds))
    one_rate = rate(one)
    split_rows = sum(r["rows"] for r in split)
    split_rate = split_rows / max(r["elapsed"] for r in split)
    acks = [x for r in split for x in r["latencies"]]
    print(f"\n1. ingest ({args.agents} agents x 1,000-step batches, {args.seconds:.0f} s)  "
          f"load {load()}")  # fmt: skip
    print(f"   A alone, {args.agents} agents          {one_rate:>10,.0f} rows/s   "
          f"ack p50 {statistics.median(one['latencies']) * 1e3:6.1f} ms")  # fmt: skip
    print(f"   A + B, {args.agents // 2} + {args.agents - args.agents // 2} agents        "
          f"{split_rate:>10,.0f} rows/s   ack p50 {statistics.median(acks) * 1e3:6.1f} ms   "
          f"(A {rate(split[0]):,.0f}, B {rate(split[1]):,.0f})")  # fmt: skip
    print(f"   combined / one server      {split_rate / one_rate:.2f}")


def print_latency(seen: Seen, pairs: list[tuple[str, str]]) -> None:
    for pair in pairs:
        values = seen.latency.get(pair, [])
        if not values:
            print(f"   agent on {pair[0]} -> browser on {pair[1]}    no steps received")
            continue
        print(f"   agent on {pair[0]} -> browser on {pair[1]}    {len(values):6d} step arrivals   "
              f"p50 {percentile(values, 0.5) * 1e3:7.1f} ms   "
              f"p95 {percentile(values, 0.95) * 1e3:7.1f} ms")  # fmt: skip


def phase_live(a: ServerProcess, b: ServerProcess, args: argparse.Namespace, tmp: Path) -> None:
    prefix, start = "live", tmp / "start-live"
    agents = [start_agent(s, f"{prefix}-{label}-{i}", args.live_steps, start, tmp)
              for s, label in ((a, "A"), (b, "B")) for i in range(2)]  # fmt: skip
    wait_runs(a, prefix, len(agents))
    clients = [(a, "A"), (a, "A"), (b, "B"), (b, "B")]
    browsers = Browsers(clients, prefix)
    wait_subscribed(browsers, len(clients), len(agents))
    time.sleep(1.5)  # each agent takes its server's `watch` command at its next send (<= 1 s)
    start.touch()
    finish(agents)
    runs = wait_finished(a, prefix, len(agents), args.live_steps)
    time.sleep(1.0)
    browsers.close()
    seen = browsers.seen
    print(f"\n2. live: 2 agents on A + 2 on B ("
          f"{args.live_steps} steps of {STEP_S * 1e3:.0f} ms "
          f"each),\n   2 browsers on A + 2 on B, each subscribed to all 4 runs; "
          f"load {load()}")  # fmt: skip
    print_latency(seen, [("A", "A"), ("A", "B"), ("B", "B"), ("B", "A")])
    complete = [
        len(seen.steps[(i, run["id"])]) for i in range(len(clients)) for run in runs.values()
    ]
    print(f"   steps each browser received live per run: min {min(complete)}, "
          f"max {max(complete)} of {args.live_steps} stored")  # fmt: skip


def phase_watched_elsewhere(
    a: ServerProcess, b: ServerProcess, args: argparse.Namespace, tmp: Path
) -> None:
    prefix, start = "far", tmp / "start-far"
    agents = [start_agent(a, f"{prefix}-A-0", args.live_steps, start, tmp)]
    wait_runs(a, prefix, 1)
    browsers = Browsers([(b, "B")], prefix)
    wait_subscribed(browsers, 1, 1)
    time.sleep(1.5)
    start.touch()
    finish(agents)
    wait_finished(a, prefix, 1, args.live_steps)
    time.sleep(1.0)
    browsers.close()
    print(f"\n3. one agent on A watched only by a browser on B  load {load()}")
    print_latency(browsers.seen, [("A", "B")])


def phase_kill(a: ServerProcess, b: ServerProcess, args: argparse.Namespace, tmp: Path) -> None:
    prefix, start = "kill", tmp / "start-kill"
    # A's agent keeps training for a while after A is back (a restart takes seconds).
    steps = int((args.outage_s + 45) / STEP_S)
    on_a = start_agent(a, f"{prefix}-A-0", steps, start, tmp)
    on_b = start_agent(b, f"{prefix}-B-0", steps, start, tmp)
    wait_runs(b, prefix, 2)
    browsers = Browsers([(b, "B")], prefix)
    wait_subscribed(browsers, 1, 2)
    time.sleep(1.5)
    start.touch()
    wait_for(lambda: runs_named(b, prefix)[f"{prefix}-A-0"]["summary"]["steps"] > 100,
             timeout_s=120, what="A's agent storing steps")  # fmt: skip
    stored_before = {n: r["summary"]["steps"] for n, r in runs_named(b, prefix).items()}
    a.kill()
    killed_at = time.time()
    reads: list[float] = []
    errors = 0
    spooled = 0
    with httpx.Client(base_url=b.url, timeout=10) as client:
        while time.time() - killed_at < args.outage_s:
            started = time.perf_counter()
            try:
                client.get("/api/v1/runs").raise_for_status()
                reads.append(time.perf_counter() - started)
            except httpx.HTTPError:
                errors += 1
            spooled = max(spooled, on_a.spooled_bytes())
            time.sleep(0.1)
    stored_during = {n: r["summary"]["steps"] for n, r in runs_named(b, prefix).items()}
    a_status = runs_named(b, prefix)[f"{prefix}-A-0"]["status"]
    a.start()
    restarted_at = time.time()
    finish([on_a, on_b])
    runs = wait_finished(b, prefix, 2, steps)
    drained_s = time.time() - restarted_at
    time.sleep(1.0)
    browsers.close()
    b_live = [lat for at, origin, _, lat in browsers.seen.arrivals
              if origin == "B" and killed_at <= at < restarted_at]  # fmt: skip
    series = {
        name: b.get(f"/api/v1/runs/{run['id']}/steps", max_points=200_000)["step"]
        for name, run in runs.items()
    }
    print(f"\n4. A killed (SIGKILL) for {args.outage_s:.0f} s; an agent on each server "
          f"({steps} steps of {STEP_S * 1e3:.0f} ms)  load {load()}")  # fmt: skip
    print(f"   B reads during the outage   {len(reads)} runs lists, {errors} errors, "
          f"{p50_p95(reads)}")  # fmt: skip
    b_name, a_name = f"{prefix}-B-0", f"{prefix}-A-0"
    print(f"   B ingest during the outage  {stored_during[b_name] - stored_before[b_name]} steps "
          f"of B's agent stored; A's agent's run {stored_during[a_name] - stored_before[a_name]} "
          f"steps (status on B: {a_status})")  # fmt: skip
    print(f"   B live during the outage    {len(b_live)} step arrivals from B's agent, "
          f"{p50_p95(b_live)}")  # fmt: skip
    print(f"   A's agent                   spooled up to {spooled:,} bytes on disk while A was "
          f"down; exit code {on_a.process.returncode}; after A's restart its run was complete "
          f"in {drained_s:.1f} s, spool left {on_a.spooled_bytes():,} bytes")  # fmt: skip
    left = on_a.spooled_bytes()
    if left:  # the run ended before its agent reached A again: `stoker upload`, here to B
        upload_spool(on_a.spool, b.url)
        uploaded = b.get(f"/api/v1/runs/{runs[on_a.name]['id']}/steps", max_points=200_000)
        series[on_a.name + " + upload"] = uploaded["step"]
    for name, stored in series.items():
        lost, duplicated = steps - len(set(stored)), len(stored) - len(set(stored))
        print(f"   {name:27s} {len(set(stored))} of {steps} steps stored, "
              f"lost {lost}, duplicated {duplicated}")  # fmt: skip
    for line in on_a.log.read_text(errors="replace").splitlines():
        if "Stoker" in line and "NVML" not in line:
            print(f"   A's agent said              {line[:200]}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--agents", type=int, default=8, help="ingest phase agents")
    parser.add_argument("--seconds", type=float, default=10.0, help="ingest phase length")
    parser.add_argument("--live-steps", type=int, default=500)
    parser.add_argument("--outage-s", type=float, default=10.0)
    parser.add_argument("--phases", default="1234", help="which phases to run, e.g. 24")
    args = parser.parse_args()
    # A `timeout` or Ctrl-C still stops the servers and PostgreSQL (the finally below).
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    postgres = PostgresServer().start()
    servers: list[ServerProcess] = []
    try:
        with tempfile.TemporaryDirectory(prefix="stoker-two-") as name:
            tmp = Path(name)
            env = {"STOKER_DATABASE_URL": postgres.create_database()}
            a = ServerProcess(data_dir=tmp / "a", env=env).start()
            servers.append(a)
            b = ServerProcess(data_dir=tmp / "b", env=env).start()
            servers.append(b)
            print(f"two servers on one PostgreSQL: A {a.url}, B {b.url}; "
                  f"{os.cpu_count()} cores, load average {load()}")  # fmt: skip
            phases = {"1": phase_ingest, "2": phase_live, "3": phase_watched_elsewhere,
                      "4": phase_kill}  # fmt: skip
            for phase in args.phases:
                phases[phase](a, b, args, tmp)
            print(f"\nload average at the end {load()}")
            for server in servers:
                server.stop()
    finally:
        for server in servers:
            server.kill()
        postgres.stop()


if __name__ == "__main__":
    main()
