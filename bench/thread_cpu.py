"""CPU time by thread class and paired medians with their spread: shared by the overhead
benchmarks on every backend (bench/agent_overhead.py, bench/wrapper_cost.py)."""

import os
import statistics
import threading

THREAD_CLASSES = ("training", "backend", "stoker")


def thread_cpu_ns() -> dict[int, int]:
    """Each thread of this process (native id) and the CPU time it has used, in ns
    (/proc/self/task/*/schedstat: every thread, TensorFlow's and XLA's native ones too)."""
    times = {}
    for tid in os.listdir("/proc/self/task"):
        try:
            with open(f"/proc/self/task/{tid}/schedstat") as stat:
                times[int(tid)] = int(stat.read().split()[0])
        except (OSError, ValueError, IndexError):
            continue  # the thread just ended
    return times


def stoker_thread_ids() -> set[int]:
    """Stoker's threads: sender, sampler, uploads, and the WebSocket client's reader thread
    (websockets names it after its function)."""
    return {
        t.native_id
        for t in threading.enumerate()
        if (t.name.startswith("stoker-") or "(recv_events)" in t.name) and t.native_id
    }


def by_class(before: dict[int, int], after: dict[int, int], stoker: set[int]) -> dict[str, int]:
    """CPU ns used between two snapshots: the training (main) thread, Stoker's threads and
    every other thread (the backend's: TensorFlow's inter-op pool and tf.data, XLA, ...)."""
    main = threading.main_thread().native_id
    used = dict.fromkeys(THREAD_CLASSES, 0)
    for tid, ns in after.items():
        spent = ns - before.get(tid, 0)
        kind = "training" if tid == main else "stoker" if tid in stoker else "backend"
        used[kind] += spent
    return used


def paired(values: dict[str, list[float]], config: str, base: str = "baseline") -> list[float]:
    return [v - b for v, b in zip(values[config], values[base], strict=True)]


def spread_us(values: list[float]) -> str:
    """Median and interquartile range, in µs."""
    if len(values) < 2:
        return f"{values[0] * 1e6:+8.1f} (one round)"
    q1, median, q3 = statistics.quantiles(values, n=4, method="inclusive")
    return f"{median * 1e6:+8.1f} ({q1 * 1e6:+.1f}..{q3 * 1e6:+.1f})"
