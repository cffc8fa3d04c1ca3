"""What does Stoker cost a training step? The same CPU Keras fit with and without it.

Configurations, interleaved in a random order within each trial, one fresh model each:
  baseline     no extra callback
  stoker       StokerCallback + cb.wrap(dataset), GPU sampling every 1 s against the fake
               NVML (tests/harness/fake_nvml.c), streaming to a real `stoker serve`
  callback     StokerCallback alone (no wrap)
  tensorboard  keras.callbacks.TensorBoard(update_freq="batch")
A minimal timer callback (the same in every configuration) measures the steady-state step
period from batch 10 to the end of the epoch, in wall-clock time and in this process's CPU
time (all threads: the agent's threads and TensorFlow's), so per-run start and flush costs
are not spread over the steps; they are reported separately as the fixed cost of a fit.
Figures are medians over trials of the paired difference to the baseline of the same
trial. CPU time is far less disturbed by other processes on a shared machine.

On a small shared machine whole fits differ by several hundred µs per step, more than the
costs being measured, so Stoker's cost is also measured part by part, each part precisely:
  stage        the wrapped pipeline through Keras's real train function, steps alternating
               with the unwrapped one in a random order, thousands of paired steps
  hooks        the batch hooks called directly (recording a step, reading the stamp ring)
  threads      CPU time of the agent's own threads (sender, samplers) during the fits
Their sum is Stoker's cost per step: the figure the targets are checked against.

With `--tiny` it measures instead what sub-millisecond steps pay: one-sample steps (batch 1)
of a small MLP, `--tiny-steps` per fit, the same interleaved configurations but TensorBoard,
and the stage's cost on a one-sample element through the train function; per step in µs
and as a share of the plain step.

Usage: .venv/bin/python -m bench.agent_overhead [--trials 25] [--paired-steps 3000]
       .venv/bin/python -m bench.agent_overhead --tiny [--trials 10] [--tiny-steps 3000]
"""

import argparse
import os
import random
import statistics
import tempfile
import threading
import time
from pathlib import Path

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np
import tensorflow as tf

from tests.harness.fake_nvml import FakeNvml, build
from tests.harness.support import ServerProcess
from trainer_agent import StokerCallback

SKIP = 50  # steps before the timed window (tracing, warm-up, the agent's start)


def agent_threads_cpu_s() -> float:
    """CPU time used so far by the agent's threads that are alive: sender, sampler, and the
    WebSocket client's reader thread (websockets names it after its function)."""
    total = 0.0
    for thread in threading.enumerate():
        ours = thread.name.startswith("stoker-") or "(recv_events)" in thread.name
        if ours and thread.ident is not None:
            try:
                total += time.clock_gettime(time.pthread_getcpuclockid(thread.ident))
            except OSError:  # the thread just ended
                continue
    return total


class Timer(tf.keras.callbacks.Callback):
    """Wall-clock and process CPU time per step, from batch SKIP to the end of the epoch, and
    the agent threads' CPU time per step over the same window."""

    def __init__(self) -> None:
        super().__init__()
        self.start = self.start_cpu = self.start_agent = 0.0
        self.period_s = self.cpu_s = self.agent_cpu_s = 0.0
        self._batch = 0

    def on_train_batch_begin(self, batch: int, logs: object = None) -> None:
        if batch == SKIP:
            self.start, self.start_cpu = time.perf_counter(), time.process_time()
            self.start_agent = agent_threads_cpu_s()
        self._batch = batch

    def on_epoch_end(self, epoch: int, logs: object = None) -> None:
        # Runs before Stoker's own epoch and train end: its threads are still alive.
        steps = self._batch + 1 - SKIP
        self.period_s = (time.perf_counter() - self.start) / steps
        self.cpu_s = (time.process_time() - self.start_cpu) / steps
        self.agent_cpu_s = (agent_threads_cpu_s() - self.start_agent) / steps


MODELS = {
    # name: (input features, hidden widths, batch size, steps per fit)
    "small MLP": (32, [256, 256], 64, 600),
    "wide": (512, [1024, 1024], 128, 150),
}
# --tiny: one-sample steps (as in keras.io's attention-MIL example, batch_size=1).
TINY = (32, [64], 1)


def make_model(features: int, widths: list[int]) -> tf.keras.Model:
    layers = [tf.keras.Input(shape=(features,))]
    layers += [tf.keras.layers.Dense(w, activation="relu") for w in widths]
    model = tf.keras.Sequential([*layers, tf.keras.layers.Dense(1)])
    model.compile(optimizer="sgd", loss="mse")
    return model


def dataset(features: int, batch: int, steps: int) -> tf.data.Dataset:
    x = np.random.default_rng(0).normal(size=(steps, batch, features)).astype("float32")
    return tf.data.Dataset.from_tensor_slices((x, x[..., :1].copy()))


def run_fit(config: str, model: tf.keras.Model, ds: tf.data.Dataset, server: str, logdir: str):
    timer = Timer()
    callbacks: list[tf.keras.callbacks.Callback] = [timer]
    data = ds
    if config in ("stoker", "callback"):
        cb = StokerCallback(run_name=f"bench-{config}", server=server, sample_interval_s=1.0)
        callbacks.append(cb)
        if config == "stoker":
            data = cb.wrap(ds)
    elif config == "tensorboard":
        callbacks.append(tf.keras.callbacks.TensorBoard(log_dir=logdir, update_freq="batch"))
    started = time.perf_counter()
    model.fit(data, epochs=1, callbacks=callbacks, verbose=0)
    return timer.period_s, timer.cpu_s, time.perf_counter() - started, timer.agent_cpu_s


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--trials", type=int, default=25)
    parser.add_argument(
        "--paired-steps", type=int, default=3000, help="paired steps for the stage's cost"
    )
    parser.add_argument("--tiny", action="store_true", help="one-sample steps instead")
    parser.add_argument("--tiny-steps", type=int, default=3000, help="steps per --tiny fit")
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="stoker-bench-"))
    fake = FakeNvml(build(work / "nvml"), work / "nvml-control.txt")
    fake.write(gpu0={"util": 90})
    fake.preload()
    os.environ["STOKER_SPOOL_DIR"] = str(work / "spool")
    server = ServerProcess(data_dir=work / "server").start()
    if args.tiny:
        try:
            tiny_main(server.url, work, args.trials, args.tiny_steps, args.paired_steps)
        finally:
            server.stop()
        return
    configs = ["baseline", "stoker", "callback", "tensorboard"]
    parts: dict[str, dict[str, float]] = {}
    tensorboard: dict[str, float] = {}
    step_s: dict[str, float] = {}
    print(f"load average at start: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    try:
        for name, (features, widths, batch, steps) in MODELS.items():
            ds = dataset(features, batch, steps)
            models = {c: make_model(features, widths) for c in configs}
            for config in configs:  # warm-up: trace every model once
                run_fit(config, models[config], ds, server.url, str(work / "tb"))
            periods: dict[str, list[float]] = {c: [] for c in configs}
            cpus: dict[str, list[float]] = {c: [] for c in configs}
            totals: dict[str, list[float]] = {c: [] for c in configs}
            agent_threads: list[float] = []
            for _ in range(args.trials):
                for config in random.sample(configs, len(configs)):
                    logdir = str(work / "tb")
                    period, cpu, total, agent = run_fit(
                        config, models[config], ds, server.url, logdir
                    )
                    periods[config].append(period)
                    cpus[config].append(cpu)
                    totals[config].append(total)
                    if config == "stoker":
                        agent_threads.append(agent)
            report(name, steps, configs, periods, cpus, totals)
            parts[name] = {
                "stage": stage_cost(features, widths, batch, args.paired_steps),
                "threads": statistics.median(agent_threads),
            }
            tensorboard[name] = statistics.median(paired(periods, "tensorboard"))
            step_s[name] = statistics.median(periods["baseline"])
        hooks, ring_reads = hook_costs(server.url)
        report_parts(parts, hooks, ring_reads, tensorboard, step_s)
        print(f"load average at end: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    finally:
        server.stop()


def tiny_main(server: str, work: Path, trials: int, steps: int, pairs: int) -> None:
    """Sub-millisecond steps: one-sample batches, interleaved fits, paired medians per step."""
    features, widths, batch = TINY
    configs = ["baseline", "stoker", "callback"]
    ds = dataset(features, batch, steps)
    models = {c: make_model(features, widths) for c in configs}
    print(f"load average at start: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    for config in configs:  # warm-up: trace every model once
        run_fit(config, models[config], ds, server, str(work / "tb"))
    periods: dict[str, list[float]] = {c: [] for c in configs}
    cpus: dict[str, list[float]] = {c: [] for c in configs}
    totals: dict[str, list[float]] = {c: [] for c in configs}
    agent_threads: list[float] = []
    for _ in range(trials):
        for config in random.sample(configs, len(configs)):
            period, cpu, total, agent = run_fit(
                config, models[config], ds, server, str(work / "tb")
            )
            periods[config].append(period)
            cpus[config].append(cpu)
            totals[config].append(total)
            if config == "stoker":
                agent_threads.append(agent)
    base = statistics.median(periods["baseline"])
    print(
        f"\none-sample steps (batch {batch}, MLP {features}-{'-'.join(map(str, widths))}-1, "
        f"tf.data), {steps} steps per fit, {trials} trials, timed from step {SKIP}: "
        f"baseline step {base * 1e3:.3f} ms wall, "
        f"{statistics.median(cpus['baseline']) * 1e3:.3f} ms CPU"
    )
    print(
        f"{'configuration':12} {'wall µs/step':>12} {'(IQR)':>17} {'% step':>7} {'CPU µs/step':>12}"
    )
    for config in configs[1:]:
        diffs, cpu_diffs = paired(periods, config), paired(cpus, config)
        w1, median, w3 = statistics.quantiles(diffs, n=4)
        print(
            f"{config:12} {median * 1e6:12.1f} {w1 * 1e6:8.0f}..{w3 * 1e6:<7.0f} "
            f"{median / base * 100:7.1f} {statistics.median(cpu_diffs) * 1e6:12.1f}"
        )
    threads_us = statistics.median(agent_threads) * 1e6
    print(f"agent threads' CPU during the stoker fits: {threads_us:.1f} µs/step")
    stage_cost(features, widths, batch, pairs)
    print(f"load average at end: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")


def hook_costs(server: str) -> tuple[float, float]:
    """The agent's own per-step work, timed directly: no fit, no noise from TensorFlow."""
    from trainer_agent.capture.callback import READ_EVERY_CALLS
    from trainer_agent.capture.input_wait import StampRing

    model = make_model(8, [8])
    callback = StokerCallback(run_name="bench-hooks", server=server)
    callback.set_model(model)
    callback.set_params({"epochs": 1, "steps": 10**6, "verbose": 0})
    callback.on_train_begin()
    logs = {"loss": 0.5}
    per_step = []
    for _ in range(7):
        started = time.perf_counter()
        for i in range(20_000):
            callback.on_train_batch_begin(i)
            callback.on_train_batch_end(i, logs)
        per_step.append((time.perf_counter() - started) / 20_000)
    callback.on_train_end()
    ring = StampRing()
    reads = []
    for _ in range(50):
        started = time.perf_counter()
        ring.read(0.0)
        reads.append(time.perf_counter() - started)
    hooks, read = statistics.median(per_step), statistics.median(reads)
    reads_per_step = read / READ_EVERY_CALLS
    print(
        f"\nhooks in isolation (batch begin + end, recording a step): "
        f"{hooks * 1e6:.1f} µs/step (target ≤ 20 µs); "
        f"reading the stamp ring: {read * 1e6:.0f} µs every {READ_EVERY_CALLS} steps "
        f"= {reads_per_step * 1e6:.1f} µs/step"
    )
    return hooks, reads_per_step


def stage_cost(features: int, widths: list[int], batch: int, pairs: int) -> float:
    """The stamping stage's cost per step inside Keras's real train function.

    One model, two endless iterators over the same data: plain (tf.data's own prefetch at
    the end) and wrapped. Steps alternate between them in a random order, so both see the
    same machine from one step to the next; the figure is the median paired difference.
    """
    from trainer_agent.capture.input_wait import StampRing

    model = make_model(features, widths)
    model.make_train_function()
    data = dataset(features, batch, 64).repeat()
    iterators = {"plain": iter(data), "wrapped": iter(StampRing().wrap(data))}
    for iterator in iterators.values():
        for _ in range(20):  # trace, warm up
            model.train_function(iterator)
    clock = time.perf_counter
    differences = []
    for _ in range(pairs):
        took = {}
        for name in random.sample(list(iterators), 2):
            started = clock()
            model.train_function(iterators[name])
            took[name] = clock() - started
        differences.append(took["wrapped"] - took["plain"])
    q1, median, q3 = statistics.quantiles(differences, n=4)
    error = 1.2533 * statistics.stdev(differences) / len(differences) ** 0.5
    print(
        f"stage through the train function ({pairs} paired steps): {median * 1e6:.1f} µs/step "
        f"(± {error * 1e6:.0f} standard error; single-pair IQR {q1 * 1e6:.0f}..{q3 * 1e6:.0f})"
    )
    return median


def report_parts(
    parts: dict[str, dict[str, float]],
    hooks: float,
    ring_reads: float,
    tensorboard: dict[str, float],
    step_s: dict[str, float],
) -> None:
    print("\nStoker's cost per step, part by part (the figures the targets are checked on):")
    print(
        f"{'model':10} {'stage':>8} {'hooks':>8} {'reads':>8} {'threads':>8} {'total µs':>9} "
        f"{'% step':>7}"
    )
    totals = {}
    for name, part in parts.items():
        totals[name] = total = part["stage"] + hooks + ring_reads + part["threads"]
        print(
            f"{name:10} {part['stage'] * 1e6:8.1f} {hooks * 1e6:8.1f} {ring_reads * 1e6:8.1f} "
            f"{part['threads'] * 1e6:8.1f} {total * 1e6:9.1f} {total / step_s[name] * 100:7.2f}"
        )
    small, wide = list(parts)
    print(
        f"small MLP: stoker/tensorboard {totals[small] / tensorboard[small]:.2f} "
        f"(TensorBoard {tensorboard[small] * 1e6:.0f} µs/step from the fits; target ≤ 0.25); "
        f"wide: {totals[wide] / step_s[wide] * 100:.2f} % of the step (target ≤ 1 %); "
        f"callback alone (hooks + threads, no wrap) "
        f"{(hooks + parts[small]['threads']) * 1e6:.1f} µs/step "
        f"(target ≤ 20 µs)"
    )


def paired(values: dict[str, list[float]], config: str) -> list[float]:
    return [v - b for v, b in zip(values[config], values["baseline"], strict=True)]


def report(
    name: str,
    steps: int,
    configs: list[str],
    periods: dict[str, list[float]],
    cpus: dict[str, list[float]],
    totals: dict[str, list[float]],
) -> None:
    base = statistics.median(periods["baseline"])
    base_cpu = statistics.median(cpus["baseline"])
    print(
        f"\n{name}: baseline step {base * 1e3:.2f} ms wall, {base_cpu * 1e3:.2f} ms CPU "
        f"({steps} steps per fit, timed from step {SKIP})"
    )
    print(
        f"{'configuration':12} {'wall µs/step':>12} {'(IQR)':>17} {'CPU µs/step':>12} "
        f"{'(IQR)':>17} {'fixed ms/fit':>12}"
    )
    wall, cpu = {}, {}
    for config in configs[1:]:
        diffs, cpu_diffs = paired(periods, config), paired(cpus, config)
        fixed = [
            (t - p * (steps - SKIP)) - (tb - pb * (steps - SKIP))
            for t, p, tb, pb in zip(
                totals[config], periods[config], totals["baseline"], periods["baseline"],
                strict=True,
            )
        ]  # fmt: skip
        wall[config], cpu[config] = statistics.median(diffs), statistics.median(cpu_diffs)
        w1, _, w3 = statistics.quantiles(diffs, n=4)
        c1, _, c3 = statistics.quantiles(cpu_diffs, n=4)
        print(
            f"{config:12} {wall[config] * 1e6:12.1f} {w1 * 1e6:8.0f}..{w3 * 1e6:<7.0f} "
            f"{cpu[config] * 1e6:12.1f} {c1 * 1e6:8.0f}..{c3 * 1e6:<7.0f} "
            f"{statistics.median(fixed) * 1e3:12.1f}"
        )
    for label, cost, step in (("wall", wall, base), ("CPU", cpu, base_cpu)):
        tb = cost["tensorboard"]
        ratio = cost["stoker"] / tb if tb > 0 else float("nan")
        print(
            f"{label}: stoker/tensorboard {ratio:.2f} (target ≤ 0.25, small MLP); "
            f"stoker {cost['stoker'] / step * 100:.2f} % of the step (target ≤ 1 %, wide); "
            f"callback alone {cost['callback'] * 1e6:.1f} µs (target ≤ 20 µs)"
        )


if __name__ == "__main__":
    main()
