"""What the training thread spends per step turning input stamps into step rows.

Every ~50 steps (or once a second) the callback reads the stamp ring (`StampRing.read`, in
trainer_agent/capture/stamped_iterator.py),
matches the steps to the elements they consumed (`WaitResolver.resolve`) and records one row
per step. This times that path alone, in CPU time, on a real ring variable filled as the
stamping stage fills it: one-step executions, 50 per read, as on sub-millisecond steps. No
fit runs, so the figure is not buried in TensorFlow's noise on a loaded machine.

Usage: .venv/bin/python -m bench.stamp_flush [--reads 400]
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

STEPS_PER_READ = 50


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--reads", type=int, default=400)
    reads = parser.parse_args().reads
    ring = StampRing()
    ring.started()  # one iterator: its fetches are numbered from 1
    rows = np.zeros((ring.size, 4))
    recorder = Recorder(10**7)
    resolver = WaitResolver()
    wall0, perf0 = time.time(), time.perf_counter()

    def flush(k: int) -> float:
        """Stamp the next 50 elements as the stage would (not timed), then time one flush."""
        start = k * STEPS_PER_READ
        for i in range(start, start + STEPS_PER_READ):
            fetch = i + 1
            rows[fetch % ring.size] = (wall0 + i * 1e-3, wall0 + i * 1e-3 + 1e-4, 1, fetch)
        ring._rows.assign(rows)
        executions = [
            Execution(
                first_step=i, n=1, begin=perf0 + i * 1e-3, end=perf0 + (i + 1) * 1e-3,
                epoch_start=i == 0, returned=perf0 + (i + 1) * 1e-3,
            )
            for i in range(start, start + STEPS_PER_READ)
        ]  # fmt: skip
        started = time.process_time()
        stamps = ring.read(time.time() - time.perf_counter(), after=resolver.cursor)
        recorder.steps.extend(
            [
                (row.step, row.start, row.dur, row.wait, row.batch_size)
                for row in resolver.resolve(executions, stamps)
            ]
        )
        return (time.process_time() - started) / STEPS_PER_READ

    flush(0)
    per_step = sorted(flush(k) for k in range(1, reads + 1))
    print(
        f"read + resolve + record, {STEPS_PER_READ} one-step executions per read, {reads} reads: "
        f"CPU per step median {statistics.median(per_step) * 1e6:.2f} µs, "
        f"10th percentile {per_step[len(per_step) // 10] * 1e6:.2f} µs "
        f"(load average {os.getloadavg()[0]:.1f})"
    )


if __name__ == "__main__":
    main()
