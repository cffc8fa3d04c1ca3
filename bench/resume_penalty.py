"""Is a training step slower right after the process sat idle? No Stoker involved.

A starved step waits for its batch with the CPU idle, then computes. On small and shared
machines that compute takes longer than the same step run back to back (caches gone cold,
worker threads asleep, the vCPU descheduled). The input-wait truth of
`bench/input_wait_accuracy.py` (period - cached period) counts that slowdown; the agent
measures the time a step is blocked on input, so the slowdown is what it cannot see.

Steps of one compiled Keras train function on cached data, each preceded by a sleep of
0, 5, 20 or 40 ms in a random order; the figure is each step's own duration.

With `--spinner`, a `nice 19` busy loop runs in another process meanwhile, so the machine's
CPUs never sit idle (a VM's vCPUs never halt): if the slowdown stays, it is not the
hypervisor waking a halted vCPU.

Usage: .venv/bin/python -m bench.resume_penalty [--steps 150] [--spinner]
"""

import argparse
import os
import random
import statistics
import subprocess
import sys
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np
import tensorflow as tf

IDLE_S = [0.0, 0.005, 0.02, 0.04]


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=150, help="steps per idle length")
    parser.add_argument("--spinner", action="store_true", help="keep the CPUs busy at nice 19")
    args = parser.parse_args()
    spinner = None
    if args.spinner:
        busy_loop = [sys.executable, "-c", "while True: pass"]
        spinner = subprocess.Popen(["nice", "-n", "19", *busy_loop])
    try:
        measure(args.steps)
    finally:
        if spinner is not None:
            spinner.kill()


def measure(steps: int) -> None:
    # The model and batch of bench/input_wait_accuracy.py.
    x = np.random.default_rng(0).normal(size=(40, 64, 256)).astype("float32")
    data = tf.data.Dataset.from_tensor_slices((x, x[..., :1].copy())).cache().repeat()
    model = tf.keras.Sequential(
        [tf.keras.Input(shape=(256,)),
         tf.keras.layers.Dense(1024, activation="relu"),
         tf.keras.layers.Dense(1024, activation="relu"),
         tf.keras.layers.Dense(1)]
    )  # fmt: skip
    model.compile(optimizer="sgd", loss="mse")
    model.make_train_function()
    iterator = iter(data)
    for _ in range(30):  # trace, warm up
        model.train_function(iterator)
    took: dict[float, list[float]] = {idle: [] for idle in IDLE_S}
    for _ in range(steps):
        for idle in random.sample(IDLE_S, len(IDLE_S)):
            if idle:
                time.sleep(idle)
            started = time.perf_counter()
            logs = model.train_function(iterator)
            float(logs["loss"])  # the step's result is on the host
            took[idle].append(time.perf_counter() - started)
    print(f"load average {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    base = statistics.median(took[0.0])
    for idle, durations in took.items():
        median = statistics.median(durations)
        print(
            f"idle {idle * 1e3:4.0f} ms before the step: step {median * 1e3:6.2f} ms median "
            f"({(median - base) * 1e3:+.2f} ms), mean {statistics.fmean(durations) * 1e3:6.2f} ms"
        )


if __name__ == "__main__":
    main()
