"""Load: many agents streaming steps and device samples, many live browsers watching.

Each simulated agent sends like trainer_agent's sender (one batch in flight, then a
100 ms pause; every batch holds all steps made meanwhile), flushing five times as often as
the agent's default `flush_interval_s` of 0.5 s so that live latency is measured tightly.

Real WebSocket clients against a real `stoker serve` on loopback. Prints committed rows/s,
ack latency, live latency (agent step end → browser message), server RSS over time, and
errors. The issue's long form is the default; `--duration-s 60` for a quick look.

    .venv/bin/python -m bench.load [--agents 32] [--steps-per-s 1000] [--browsers 50]
                                   [--slow-browsers 5] [--duration-s 600]
"""

import argparse
import asyncio
import json
import statistics
import tempfile
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path

import psutil
from websockets.asyncio.client import connect

from tests.harness.support import ServerProcess

FLUSH_INTERVAL_S = 0.1


@dataclass
class Figures:
    rows_acked: int = 0
    ack_latency_s: list[float] = field(default_factory=list)
    live_latency_s: list[float] = field(default_factory=list)  # per step (see browser())
    live_latency_weight: list[float] = field(default_factory=list)
    newest_latency_s: list[float] = field(default_factory=list)  # newest step of a message
    live_messages: int = 0
    notices: int = 0
    errors: list[str] = field(default_factory=list)
    rss_mb: list[tuple[float, float]] = field(default_factory=list)


def percentile(values: list[float], q: float, weights: list[float] | None = None) -> float:
    if not values:
        return float("nan")
    if weights is None:
        ordered = sorted(values)
        return ordered[min(len(ordered) - 1, int(q * len(ordered)))]
    pairs = sorted(zip(values, weights, strict=True))
    target, seen = q * sum(weights), 0.0
    for value, weight in pairs:
        seen += weight
        if seen >= target:
            return value
    return pairs[-1][0]


async def agent(
    url: str, index: int, steps_per_s: int, stop_at: float, figures: Figures, run_ids: list[int]
) -> None:
    """Behaves like trainer_agent's sender: stop-and-wait on acks, every batch carrying all
    the steps made since the previous one, then `FLUSH_INTERVAL_S` of sleep. A slow server
    therefore gets fewer, larger batches, as it does from real agents."""
    hello = {
        "type": "hello",
        "protocol": 1,
        "run_key": uuid.uuid4().hex,
        "name": f"load-{index}",
        "project": "load",
        "host": f"h{index}",
    }
    async with connect(f"{url}/api/v1/agent", max_size=None) as ws:
        await ws.send(json.dumps(hello))
        welcome = json.loads(await ws.recv())
        run_ids.append(welcome["run_id"])
        step_s = 1.0 / steps_per_s
        started = time.time()
        seq = sent = 0
        last_device = 0.0
        while time.monotonic() < stop_at:
            await asyncio.sleep(FLUSH_INTERVAL_S)
            now = time.time()
            made = int((now - started) * steps_per_s)  # steps finished by now
            if made <= sent:
                continue
            seq += 1
            steps = list(range(sent, made))
            batch = {
                "type": "batch",
                "seq": seq,
                "steps": {
                    "step": steps,
                    "t": [started + s * step_s for s in steps],
                    "dur": [step_s] * len(steps),
                    "wait": [step_s * 0.1] * len(steps),
                },
            }
            if now - last_device >= 1.0:
                last_device = now
                batch["device"] = {"t": [now], "gpu": [0], "util": [80.0], "mem_used": [4e9]}
            await ws.send(json.dumps(batch))
            while True:
                reply = json.loads(await ws.recv())
                if reply.get("type") == "error":
                    figures.errors.append(str(reply))
                if reply.get("seq") == seq:
                    break
            figures.ack_latency_s.append(time.time() - now)
            figures.rows_acked += len(steps)
            sent = made


async def browser(
    url: str, run_ids: list[int], index: int, slow: bool, stop_at: float, figures: Figures
) -> None:
    async with connect(f"{url}/api/v1/live", max_size=None) as ws:
        while not run_ids:
            await asyncio.sleep(0.1)
        await ws.send(json.dumps({"type": "subscribe", "run_id": run_ids[index % len(run_ids)]}))
        if slow:
            # Never reads: the server must drop for this client, never stall ingest.
            await asyncio.sleep(max(0.0, stop_at - time.monotonic()))
            return
        while time.monotonic() < stop_at:
            try:
                raw = await asyncio.wait_for(ws.recv(), timeout=1.0)
            except TimeoutError:
                continue
            message = json.loads(raw)
            figures.live_messages += 1
            if message["type"] == "steps":
                data = message["data"]
                now = time.time()
                newest = now - (data["t"][-1] + data["dur"][-1])
                oldest = now - (data["t"][0] + data["dur"][0])
                figures.newest_latency_s.append(newest)
                # Every step's latency, not only the newest one's: the message's steps ended
                # evenly between its oldest and newest, so four evenly placed points stand in
                # for them, each weighing a quarter of the message.
                k = len(data["t"])
                for q in (0.125, 0.375, 0.625, 0.875):
                    figures.live_latency_s.append(newest + (oldest - newest) * q)
                    figures.live_latency_weight.append(k / 4)
            elif message["type"] == "notice":
                figures.notices += 1


async def watch_rss(pid: int, stop_at: float, figures: Figures, started: float) -> None:
    process = psutil.Process(pid)
    while time.monotonic() < stop_at:
        figures.rss_mb.append((time.monotonic() - started, process.memory_info().rss / 2**20))
        await asyncio.sleep(5.0)


async def run(args: argparse.Namespace, server: ServerProcess) -> Figures:
    figures = Figures()
    started = time.monotonic()
    stop_at = started + args.duration_s
    run_ids: list[int] = []
    assert server.process is not None
    tasks = [
        agent(server.ws_url, i, args.steps_per_s, stop_at, figures, run_ids)
        for i in range(args.agents)
    ]
    tasks += [
        browser(server.ws_url, run_ids, i, i < args.slow_browsers, stop_at, figures)
        for i in range(args.browsers)
    ]
    tasks.append(watch_rss(server.process.pid, stop_at, figures, started))
    results = await asyncio.gather(*tasks, return_exceptions=True)
    figures.errors += [repr(r) for r in results if isinstance(r, BaseException)]
    return figures


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--agents", type=int, default=32)
    parser.add_argument("--steps-per-s", type=int, default=1000)
    parser.add_argument("--browsers", type=int, default=50)
    parser.add_argument("--slow-browsers", type=int, default=5)
    parser.add_argument("--duration-s", type=float, default=600)
    parser.add_argument("--database-url", default=None)
    args = parser.parse_args()

    with tempfile.TemporaryDirectory() as tmp:
        extra = ["--database-url", args.database_url] if args.database_url else []
        server = ServerProcess(data_dir=Path(tmp), extra_args=extra).start()
        try:
            figures = asyncio.run(run(args, server))
        finally:
            server.stop()
        db_bytes = sum(f.stat().st_size for f in Path(tmp).glob("stoker.db*"))

    offered = args.agents * args.steps_per_s
    print(
        f"agents {args.agents} x {args.steps_per_s} steps/s = {offered} steps/s offered, "
        f"{args.browsers} browsers ({args.slow_browsers} never read), {args.duration_s:.0f} s"
    )
    print(
        f"committed rows/s      {figures.rows_acked / args.duration_s:,.0f} "
        f"(mean batch {figures.rows_acked / max(1, len(figures.ack_latency_s)):.0f} steps)"
    )
    print(
        f"ack latency   p50 {percentile(figures.ack_latency_s, 0.5) * 1000:7.1f} ms   "
        f"p99 {percentile(figures.ack_latency_s, 0.99) * 1000:7.1f} ms"
    )
    live, weight = figures.live_latency_s, figures.live_latency_weight
    print(
        f"live latency  p50 {percentile(live, 0.5, weight) * 1000:7.1f} ms   "
        f"p95 {percentile(live, 0.95, weight) * 1000:7.1f} ms   "
        f"p99 {percentile(live, 0.99, weight) * 1000:7.1f} ms   (every step: its end to the "
        f"browser, including the wait for the next agent flush; target p95 < 250 ms)"
    )
    newest = figures.newest_latency_s
    print(
        f"  newest step p50 {percentile(newest, 0.5) * 1000:7.1f} ms   "
        f"p95 {percentile(newest, 0.95) * 1000:7.1f} ms   (server and network only)"
    )
    print(f"live messages {figures.live_messages:,}, drop notices {figures.notices}")
    if figures.rss_mb:
        warm = [mb for t, mb in figures.rss_mb if t >= min(60.0, args.duration_s / 3)]
        print(
            "server RSS MB over time: "
            + ", ".join(
                f"{t:.0f}s:{mb:.0f}"
                for t, mb in figures.rss_mb[:: max(1, len(figures.rss_mb) // 12)]
            )
        )
        if len(warm) >= 2:
            print(
                f"RSS after warm-up: first {warm[0]:.0f} MB, last {warm[-1]:.0f} MB, "
                f"growth {warm[-1] - warm[0]:+.0f} MB; median {statistics.median(warm):.0f} MB"
            )
    print(f"database size {db_bytes / 2**20:.1f} MB")
    print(f"errors {len(figures.errors)}" + (f": {figures.errors[:3]}" if figures.errors else ""))


if __name__ == "__main__":
    main()
