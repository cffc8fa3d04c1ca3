"""A custom training loop (no TensorFlow) reporting through `Monitor`; run by tests.

It steps until the stop file appears (or `--steps` steps), each step doing `--step-s` of
simulated work, so a test can change the fake GPU's values while it runs.

With `--start-file` it connects first and starts stepping once that file appears; it
prints `trained N` when its steps are done, before the run ends (and the agent drains).

Usage: python -m tests.harness.loop_script --server URL [--name N] [--stop-file PATH] [--steps N]
       [--step-s S] [--interval-s S] [--start-file PATH]
"""

import argparse
import itertools
import time
from pathlib import Path


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--server", required=True)
    parser.add_argument("--name", default="loop")
    parser.add_argument("--stop-file", type=Path)
    parser.add_argument("--steps", type=int, default=0, help="0: until the stop file appears")
    parser.add_argument("--step-s", type=float, default=0.01)
    parser.add_argument("--interval-s", type=float, default=0.1)
    parser.add_argument("--start-file", type=Path)
    args = parser.parse_args()

    from trainer_agent import Monitor

    steps = itertools.count() if args.steps == 0 else range(args.steps)
    done = 0
    with Monitor(run_name=args.name, server=args.server, sample_interval_s=args.interval_s) as mon:
        while args.start_file is not None and not args.start_file.exists():
            time.sleep(0.01)
        for step in mon.iterate(steps):
            if args.stop_file is not None and args.stop_file.exists():
                break
            time.sleep(args.step_s)  # the simulated training step
            mon.log(loss=1.0 / (step + 1))
            done += 1
        print(f"trained {done}", flush=True)


if __name__ == "__main__":
    main()
