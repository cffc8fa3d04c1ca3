"""What does the detectors' window cost per step row at ingest? (In process, no I/O.)

Feeds one run's `RunWindow` (and its worker's, rank 0, as ingest does) with batches shaped
like bench.ingest's (5,000 steps each, 0.05 s apart by the agent's clock, so each batch is a
backlog of window chunks), reading both windows every 4 batches as a detector tick would.
Prints CPU microseconds per step row, the best of a few repeats.

Usage: .venv/bin/python -m bench.window_fold [--batches 40] [--rows 5000]
"""

import argparse
import time
from typing import Any

from stoker_server.diagnosis.window import RunWindow


def _batch(first: int, n: int) -> dict[str, Any]:
    steps = list(range(first, first + n))
    return {
        "step": steps,
        "t": [1.7e9 + s * 0.05 for s in steps],
        "dur": [0.05 + (s % 7) * 1e-3 for s in steps],
        "wait": [0.004 + (s % 3) * 1e-3 for s in steps],
        "batch_size": [256] * n,
    }


def measure(batches: list[dict[str, Any]], repeats: int = 3) -> float:
    best = float("inf")
    for _ in range(repeats):
        window = RunWindow(1, 30.0)
        started = time.process_time()
        for k, batch in enumerate(batches):
            window.add_steps(now=float(k), rank=0, **batch)
            if k % 4 == 3:
                window.step_cv()
                window.workers[0].step_cv()
        window.step_cv()
        window.workers[0].step_cv()
        best = min(best, time.process_time() - started)
    return best / sum(len(b["step"]) for b in batches) * 1e6


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--batches", type=int, default=40)
    parser.add_argument("--rows", type=int, default=5000)
    args = parser.parse_args()
    batches = [_batch(k * args.rows, args.rows) for k in range(args.batches)]
    print(f"window add_steps + fold, run and worker: {measure(batches):.3f} us per step row")


if __name__ == "__main__":
    main()
