"""Server outage during a real Keras training: slowdown while the server is down, and loss.

Starts `stoker serve`, runs `tests.harness.train_script` against it, stops the server for
`--outage-s` seconds mid-run, restarts it on the same data directory, and compares the
median step time during the outage with the median outside it. Prints records lost and
duplicated (both must be 0).

    .venv/bin/python -m bench.outage [--outage-s 60] [--batches 9000] [--batch-delay-s 0.02]
"""

import argparse
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from tests.harness.support import REPO, ServerProcess, wait_for


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--outage-s", type=float, default=60.0)
    parser.add_argument("--batches", type=int, default=9000)
    parser.add_argument("--batch-delay-s", type=float, default=0.02)
    args = parser.parse_args()

    with tempfile.TemporaryDirectory() as tmp:
        server = ServerProcess(data_dir=Path(tmp)).start()
        training = subprocess.Popen(
            [sys.executable, "-m", "tests.harness.train_script", "--server", server.url,
             "--name", "outage-bench", "--epochs", "1", "--batches", str(args.batches),
             "--batch-delay-s", str(args.batch_delay_s)],
            cwd=REPO,
        )  # fmt: skip

        def steps_stored() -> int:
            runs = server.get("/api/v1/runs")["data"]
            return runs[0]["summary"]["steps"] if runs else 0

        wait_for(lambda: steps_stored() > args.batches // 4, timeout_s=600, what="warm-up")
        server.stop()
        down_from = time.time()
        time.sleep(args.outage_s)
        training_alive = training.poll() is None
        server.start()
        down_until = time.time()
        exit_code = training.wait(timeout=3600)
        run = server.get("/api/v1/runs")["data"][0]
        wait_for(lambda: server.get(f"/api/v1/runs/{run['id']}")["status"] == "finished",
                 timeout_s=60, what="the run to finish")  # fmt: skip
        series = server.get(f"/api/v1/runs/{run['id']}/steps", max_points=200_000)
        server.stop()

    steps, starts, durations = series["step"], series["t"], series["dur"]
    during = [
        d for t, d in zip(starts[1:], durations[1:], strict=True) if down_from <= t < down_until
    ]
    outside = [
        d for t, d in zip(starts[1:], durations[1:], strict=True) if not down_from <= t < down_until
    ]
    lost = args.batches - len(set(steps))
    duplicated = len(steps) - len(set(steps))
    median_during = statistics.median(during) * 1000
    median_outside = statistics.median(outside) * 1000
    print(f"training exit code {exit_code}; alive through the outage: {training_alive}")
    outage_s = down_until - down_from
    print(f"outage {outage_s:.1f} s; steps during it {len(during)}, outside {len(outside)}")
    slowdown_pct = (median_during / median_outside - 1) * 100
    print(
        f"median step time outside {median_outside:.3f} ms, during {median_during:.3f} ms, "
        f"slowdown {slowdown_pct:+.2f} % (target within ±2 %)"
    )
    print(f"records lost {lost}, duplicated {duplicated} (both must be 0)")


if __name__ == "__main__":
    main()
