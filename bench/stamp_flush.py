"""What turning input stamps into step rows costs per step (on the run's sender thread).

Before each flush (every second; every 50 ms while a browser watches) the sender thread reads
the model's stamp ring (`StampRing.read`, in trainer_agent/capture/stamped_iterator.py),
matches the steps to the elements they consumed (`WaitResolver.resolve`, through
trainer_agent/capture/fit_stamps.py) and records one row per step. This times that path
alone, in CPU time, on a real ring variable filled as the train function's stamps fill it:
one-step executions, `--per-read` of them per read (1,000: a second of 1 ms steps; 50: 50 ms
while watched). No fit runs, so the figure is not buried in TensorFlow's noise on a loaded
machine.

Usage: .venv/bin/python -m bench.stamp_flush [--reads 200] [--per-read 1000]
"""

import argparse
import os
import statistics
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np

from trainer_agent.capture.input_wait import Execution, WaitResolver
from trainer_agent.capture.recorder import Recorder
from trainer_agent.capture.stamped_iterator import StampRing


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--reads", type=int, default=200)
    parser.add_argument("--per-read", type=int, default=1000, help="one-step executions a read")
    args = parser.parse_args()
    reads, per_read = args.reads, args.per_read
    ring = StampRing()
    ring.started()  # one iterator: its fetches are numbered from 1
    rows = np.zeros((ring.size, 4))
    recorder = Recorder(10**7)
    resolver = WaitResolver()
    wall0, perf0 = time.time(), time.perf_counter()

    def flush(k: int) -> float:
        """Stamp the next elements as the train function would (not timed), then time one
        flush."""
        start = k * per_read
        for i in range(start, start + per_read):
            fetch = i + 1
            rows[fetch % ring.size] = (wall0 + i * 1e-3, wall0 + i * 1e-3 + 1e-4, 1, fetch)
        ring._rows.assign(rows)
        executions = [
            Execution(
                first_step=i, n=1, begin=perf0 + i * 1e-3, end=perf0 + (i + 1) * 1e-3,
                epoch_start=i == 0, returned=perf0 + (i + 1) * 1e-3,
            )
            for i in range(start, start + per_read)
        ]  # fmt: skip
        started = time.process_time()
        stamps = ring.read(time.time() - time.perf_counter(), after=resolver.cursor)
        recorder.steps.extend(resolver.resolve(executions, stamps))
        return (time.process_time() - started) / per_read

    flush(0)
    per_step = sorted(flush(k) for k in range(1, reads + 1))
    print(
        f"read + resolve + record, {per_read} one-step executions per read, {reads} reads: "
        f"CPU per step median {statistics.median(per_step) * 1e6:.2f} µs, "
        f"10th percentile {per_step[len(per_step) // 10] * 1e6:.2f} µs "
        f"(load average {os.getloadavg()[0]:.1f})"
    )


if __name__ == "__main__":
    main()
