"""What the train-function wrapper and its `next()` timing cost a step on Keras 3's JAX and
PyTorch backends, measured as bench/agent_overhead.py measures TensorFlow.

1. Python calls per step, counted (sys.setprofile): the wrapper and, under JAX, the
   `FetchTimer` around each `next()` (tests/unit/test_train_function.py guards the counts).
2. Their own time on the training thread: a train function and iterator that do nothing,
   called directly and through the wrapper, interleaved in every round; µs per step, the
   median (IQR) of the paired difference over rounds.
3. Real fits on the backend Keras runs (KERAS_BACKEND): a small MLP (about 1 ms a step here)
   on arrays, long one-epoch fits, plain twice (the A/A noise) and with StokerCallback
   (no server: it spools nothing, `STOKER_SPOOL_DIR=off`), interleaved; wall and CPU time per
   step by thread (training, backend, Stoker), paired medians and IQR over rounds.

Usage (in `make test-jax`'s venv; torch: `pip install` its CPU wheel there):
    KERAS_BACKEND=jax .venv/jax/bin/python -m bench.wrapper_cost [--rounds 5] [--steps 2000]
    KERAS_BACKEND=torch .venv/jax/bin/python -m bench.wrapper_cost
"""

import argparse
import os
import random
import statistics
import sys
import time
from typing import Any

os.environ.setdefault("STOKER_SPOOL_DIR", "off")

from bench.thread_cpu import (
    THREAD_CLASSES,
    by_class,
    paired,
    spread_us,
    stoker_thread_ids,
    thread_cpu_ns,
)
from trainer_agent.capture import train_function

SKIP = 50
CONFIGS = ("baseline", "baseline-again", "stoker")


class _Array:
    shape = (32, 8)


class _Batches:
    batch = (_Array(), _Array())

    def __iter__(self) -> "_Batches":
        return self

    def __next__(self) -> Any:
        return self.batch


def calls_per_step(call: Any, outside: set[Any], steps: int = 2000) -> float:
    counted = 0

    def profile(frame: Any, event: str, arg: Any) -> None:
        nonlocal counted
        if event == "call":
            caller = frame.f_back
            ours = "trainer_agent" in frame.f_code.co_filename
            called_by_us = caller is not None and "trainer_agent" in caller.f_code.co_filename
            if (ours or called_by_us) and frame.f_code not in outside:
                counted += 1
        elif event == "c_call" and "trainer_agent" in frame.f_code.co_filename:
            counted += 1

    sys.setprofile(profile)
    try:
        for _ in range(steps):
            call()
    finally:
        sys.setprofile(None)
    return counted / steps


def wrapper_parts(rounds: int, steps: int) -> None:
    """Counts and own time of the JAX and PyTorch wrappers, on fakes (no backend needed)."""

    def jax_function(state: Any, iterator: Any) -> Any:
        next(iterator)
        return state

    def torch_function(data: Any) -> None:
        return None

    def returned(now: float, fetched: Any) -> None:
        return None

    batches = _Batches()
    jax = train_function._jax_wrapper(jax_function, returned)
    torch = train_function._returns_wrapper(torch_function, returned)
    outside = {jax_function.__code__, torch_function.__code__, returned.__code__}
    outside.add(_Batches.__next__.__code__)
    cases = {
        "JAX (wrapper + FetchTimer)": (
            lambda: jax(None, batches),
            lambda: jax_function(None, batches),
        ),
        "PyTorch (wrapper)": (lambda: torch(1), lambda: torch_function(1)),
    }
    print("the wrapper alone, on a train function and iterator that do nothing:")
    for name, (wrapped, direct) in cases.items():
        calls = calls_per_step(wrapped, outside)
        differences = []
        for _ in range(rounds * 10):
            took = {}
            for label, call in random.sample([("wrapped", wrapped), ("direct", direct)], 2):
                started = time.thread_time_ns()
                for _ in range(steps):
                    call()
                took[label] = (time.thread_time_ns() - started) / 1e9 / steps
            differences.append(took["wrapped"] - took["direct"])
        print(f"  {name:28s} {calls:5.2f} Python calls/step, {spread_us(differences)} µs/step")


def fits(rounds: int, steps: int) -> None:
    """Long fits of a small MLP on arrays: plain twice and with StokerCallback."""
    import keras
    import numpy as np

    from trainer_agent import StokerCallback

    backend = keras.config.backend()
    rng = np.random.default_rng(0)
    x = rng.normal(size=(steps * 32, 32)).astype("float32")
    y = rng.normal(size=(steps * 32, 4)).astype("float32")

    class Timer(keras.callbacks.Callback):
        def on_train_batch_begin(self, batch: int, logs: Any = None) -> None:
            if batch == SKIP:
                self.start, self.threads = time.perf_counter(), thread_cpu_ns()
            self.last = batch

        def on_epoch_end(self, epoch: int, logs: Any = None) -> None:
            n = self.last + 1 - SKIP
            self.wall_s = (time.perf_counter() - self.start) / n
            used = by_class(self.threads, thread_cpu_ns(), stoker_thread_ids())
            self.cpu_s = {kind: ns / 1e9 / n for kind, ns in used.items()}

    def model() -> Any:
        m = keras.Sequential(
            [keras.Input((32,)), keras.layers.Dense(64, activation="relu"), keras.layers.Dense(4)]
        )
        m.compile(optimizer="sgd", loss="mse")
        return m

    models = {config: model() for config in CONFIGS}
    wall: dict[str, list[float]] = {c: [] for c in CONFIGS}
    cpu: dict[str, dict[str, list[float]]] = {k: {c: [] for c in CONFIGS} for k in THREAD_CLASSES}

    def fit(config: str) -> Any:
        timer = Timer()
        callbacks: list[Any] = [timer]
        if config == "stoker":
            callbacks.append(StokerCallback(run_name="bench-wrapper", server="http://127.0.0.1:9"))
        models[config].fit(x, y, batch_size=32, epochs=1, callbacks=callbacks, verbose=0)
        return timer

    for config in CONFIGS:  # compile, warm up
        fit(config)
    for _ in range(rounds):
        for config in random.sample(CONFIGS, len(CONFIGS)):
            timer = fit(config)
            wall[config].append(timer.wall_s)
            for kind in THREAD_CLASSES:
                cpu[kind][config].append(timer.cpu_s[kind])
    base = statistics.median(wall["baseline"])
    print(
        f"\nKeras {keras.__version__} on {backend}: {steps} steps a fit (batch 32, 32-64-4 MLP, "
        f"arrays), {rounds} rounds, baseline step {base * 1e3:.3f} ms; µs per step, median (IQR)"
        " of the paired difference to the baseline"
    )
    print(
        f"{'configuration':15} {'wall':>22}" + "".join(f" {'CPU ' + k:>22}" for k in THREAD_CLASSES)
    )
    for config in CONFIGS[1:]:
        line = f"{config:15} {spread_us(paired(wall, config)):>22}"
        line += "".join(f" {spread_us(paired(cpu[k], config)):>22}" for k in THREAD_CLASSES)
        print(line)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--steps", type=int, default=2000, help="steps per fit")
    args = parser.parse_args()
    load = os.getloadavg()
    print(f"load average at start: {load[0]:.2f} {load[1]:.2f} {load[2]:.2f}")
    wrapper_parts(args.rounds, 2000)
    if os.environ.get("KERAS_BACKEND") in ("jax", "torch"):
        fits(args.rounds, args.steps)
    load = os.getloadavg()
    print(f"load average at end: {load[0]:.2f} {load[1]:.2f} {load[2]:.2f}")


if __name__ == "__main__":
    main()
