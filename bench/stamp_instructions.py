"""Instructions the input-wait stamps add to each fetch, counted by callgrind: exact where
timing is noise.

On this project's 2-core VM a stamped call and a plain one differ by about as much as two
plain ones (the wall and CPU benches read +/- 40 µs around a ~25 µs effect), so this counts
instead. One tiny train-like `tf.function` (a fetch from a cached, prefetched dataset and a
32x32 update) is called N times with the plain iterator and N times with the iterator
`StampRing.stamped` gives the train function (trainer_agent/capture/stamped_iterator.py), each
run under `valgrind --tool=callgrind` in its own process, counting only the N calls (a
client request starts and stops the count after 300 warm-up calls; Python's collector is off
inside). Every thread is counted, TensorFlow's executor threads included, which is where the
stamps' ops run. Idle spinning of TensorFlow's thread pools (Eigen's steal and queue polls)
is counted apart: it is a pool with nothing to do, and it varies from run to run.

Each variant runs at two N; the per-call figure is the slope between them, so the tracing,
the warm-up and the process's start drop out.

    python -m bench.stamp_instructions            # N = 500 and 1500, about 5 minutes here
    python -m bench.stamp_instructions --calls 300 900

Needs valgrind (Debian package `valgrind`, with `valgrind/callgrind.h`) and gcc.
"""

import argparse
import ctypes
import os
import re
import subprocess
import sys
import tempfile
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

WARM_CALLS = 300
# Exclusive costs of a thread pool looking for work: Eigen's NonBlockingThreadPool spins and
# steals before it sleeps (and TLS lookups of its thread id).
SPIN = re.compile(
    r"GlobalSteal|RunQueue<.*>::(PopBack|Empty)|MaybeGetTask|Task::operator=|"
    r"ThreadPoolTempl<.*>::(Steal|LocalSteal|WaitForWork|WorkerLoop)|NonEmptyQueueIndex|"
    r"__tls_get_addr|EventCount"
)
WINDOW_C = """
#include <valgrind/callgrind.h>
void window_start(void) { CALLGRIND_ZERO_STATS; CALLGRIND_START_INSTRUMENTATION; }
void window_stop(void) { CALLGRIND_STOP_INSTRUMENTATION; CALLGRIND_DUMP_STATS_AT("window"); }
"""


def child(variant: str, calls: int, window_lib: str) -> None:
    """Under callgrind: `calls` calls of the tiny step, counted."""
    import gc

    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
    import numpy as np
    import tensorflow as tf

    from trainer_agent.capture.stamped_iterator import StampRing

    window = ctypes.CDLL(window_lib)
    x = np.random.default_rng(0).normal(size=(1024, 32)).astype("float32")
    dataset = (
        tf.data.Dataset.from_tensor_slices(x)
        .batch(16, drop_remainder=True).cache().repeat().prefetch(tf.data.AUTOTUNE)
    )  # fmt: skip
    w = tf.Variable(tf.random.normal([32, 32]))

    @tf.function
    def step(iterator: object) -> None:
        batch = next(iterator)  # type: ignore[call-overload]
        w.assign_sub(0.001 * tf.matmul(batch, tf.matmul(batch, w), transpose_a=True))

    iterator = iter(dataset)
    if variant == "stamped":
        ring = StampRing()
        ring.started()
        iterator = ring.stamped(iterator)
    for _ in range(WARM_CALLS):
        step(iterator)
    gc.collect()
    gc.disable()
    window.window_start()
    for _ in range(calls):
        step(iterator)
    window.window_stop()


def counted(out_file: Path) -> tuple[int, int]:
    """(all instructions, the thread pools' idle spinning among them) of one count."""
    annotated = subprocess.run(
        ["callgrind_annotate", "--threshold=100", str(out_file)],
        capture_output=True, text=True, check=True,
    ).stdout  # fmt: skip
    total = spin = 0
    for line in annotated.splitlines():
        match = re.match(r"\s*([\d,]+) \([ \d.]+%\)\s+(.*)", line)
        if not match:
            continue
        n, name = int(match.group(1).replace(",", "")), match.group(2)
        if "PROGRAM TOTALS" in name:
            total = n
        elif SPIN.search(name):
            spin += n
    return total, spin


def run_counted(
    variant: str, calls: int, repeat: int, window_lib: Path, out_dir: Path
) -> tuple[int, int]:
    prefix = out_dir / f"{variant}.{calls}.{repeat}"
    subprocess.run(
        [
            "valgrind", "--tool=callgrind", "--instr-atstart=no",
            f"--callgrind-out-file={prefix}.%p",
            sys.executable, "-m", "bench.stamp_instructions",
            "--child", variant, str(calls), str(window_lib),
        ],
        check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        cwd=Path(__file__).resolve().parent.parent,
    )  # fmt: skip
    (window,) = out_dir.glob(f"{variant}.{calls}.{repeat}.*.1")  # the dump at the window's end
    return counted(window)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--calls", type=int, nargs=2, default=(500, 1500), metavar=("N1", "N2"))
    parser.add_argument("--repeats", type=int, default=2, help="counts of each variant and N")
    parser.add_argument("--child", nargs=3, metavar=("VARIANT", "CALLS", "LIB"))
    options = parser.parse_args()
    if options.child:
        variant, calls, lib = options.child
        child(variant, int(calls), lib)
        return
    low, high = options.calls
    repeats = range(options.repeats)
    with tempfile.TemporaryDirectory(prefix="stoker-callgrind-") as tmp:
        out_dir = Path(tmp)
        (out_dir / "window.c").write_text(WINDOW_C)
        window_lib = out_dir / "libwindow.so"
        subprocess.run(
            ["gcc", "-O2", "-shared", "-fPIC", "-o", str(window_lib), str(out_dir / "window.c")],
            check=True,
        )
        jobs = [(v, n, r) for r in repeats for v in ("plain", "stamped") for n in (low, high)]
        with ThreadPoolExecutor(max_workers=os.cpu_count() or 1) as pool:
            futures = {job: pool.submit(run_counted, *job, window_lib, out_dir) for job in jobs}
            counts = {job: future.result() for job, future in futures.items()}

    def per_call(variant: str, repeat: int) -> tuple[float, float]:
        """(work, spinning) a call: the slope between the two N."""
        (t_low, s_low), (t_high, s_high) = (
            counts[(variant, low, repeat)],
            counts[(variant, high, repeat)],
        )
        calls = high - low
        return ((t_high - s_high) - (t_low - s_low)) / calls, (s_high - s_low) / calls

    print(f"instructions a call, all threads (slope between {low} and {high} calls)")
    for r in repeats:
        (plain_work, plain_spin), (work, spin) = per_call("plain", r), per_call("stamped", r)
        alone = []  # the same difference read at each N alone: how far to trust the slope
        for n in (low, high):
            (ts, ss), (tp, sp) = counts[("stamped", n, r)], counts[("plain", n, r)]
            alone.append(f"{((ts - ss) - (tp - sp)) / n:+,.0f}")
        print(
            f"  count {r + 1}: plain {plain_work:,.0f} work, {plain_spin:,.0f} pool spinning;"
            f" the stamps add {work - plain_work:+,.0f} work ({' and '.join(alone)} read at"
            f" {low} and {high} calls alone), {spin - plain_spin:+,.0f} spinning"
        )


if __name__ == "__main__":
    main()
