"""What does Stoker cost a training step and a fit? One command, three step sizes, its own noise.

For each of three CPU models (about 0.8, 3 and 20 ms a step; `--models` picks some), long
one-epoch fits in six configurations, interleaved in a random order in every round:
  baseline, baseline-again   no extra callback, twice: their paired difference is the noise
                             floor (an A/A comparison) every other figure is read against
  stoker                     StokerCallback + cb.wrap(dataset), GPU sampling every 1 s against
                             the fake NVML (tests/harness/fake_nvml.c), streaming to a real
                             `stoker serve` on loopback
  stoker-unstamped           the same callback without `wrap`: no input-wait stamps in the
                             train function; `stoker` against it is what the stamps cost
  tensorboard                keras.callbacks.TensorBoard(update_freq="batch")
  empty-callback             a Keras callback whose batch hooks do nothing, timed as Stoker's
                             are (below): what any callback's hooks cost, and the floor of
                             that timing
each with `steps_per_execution` 1 and 32 (`--spe`), all on one model (two instances of one
architecture differ in speed here by more than Stoker costs: bench/LOG.md, sixth pass). A
timer callback (the same in every configuration) measures from step SKIP and 1.5 s into the
fit (WARM_S: after the agent's start, the sender's first flush, which is a cost of the fit
and printed as such) to the epoch's end: wall time per step, and CPU time per step by
thread from /proc/self/task/*/schedstat (ns): the training thread, Stoker's own threads
(sender, sampler, the WebSocket reader) and every other thread (TensorFlow's inter-op pool
and tf.data threads, where the stamps' ops run). Stoker's threads wake twice a second
whatever the step rate, so their CPU is also printed a second; the price this machine puts
on a wake is printed first (a VM's vCPU that sat idle resumes with cold caches). Figures are
medians over rounds of the paired difference to the baseline of the same round, with the
interquartile range (IQR) over rounds; the A/A row gives the same for two plain fits: a cost
inside that range is not resolved by this run.

Python's garbage collections in each window are counted too (`gc.callbacks`): a full
collection walks every object of the TensorFlow process (~130 ms here) and stalls whichever
thread set it off; Stoker's per-step objects once set one off every few seconds.

Stoker's own time on the training thread is also timed directly (`time.thread_time_ns()`
around its batch hooks), per step, beside the same timing of the empty callback's hooks: what
profiling the thread would attribute to Stoker, without the fit's noise. And counted: Stoker's
Python calls a step on the training thread (calls into its code and the calls its code makes,
tests/harness/training_thread.py), in one more fit per model, untimed.

Then the fixed cost of a fit: `--pairs` back-to-back pairs of 5-step fits of
`from_tensor_slices(...).batch(64).cache().repeat().prefetch(2)`, plain against monitored (a
new callback and `wrap` every fit, as autolog does) and against TensorBoard(batch)
(bench/fit_overhead.py's measurement), and `wrap()`'s own time on a freshly built pipeline
after the first call in the process, with the functions it traced (none expected).

Paired fits cannot resolve the wall cost on this VM (their A/A moves by more than Stoker
costs), so the wall figure that counts is bench/interleaved.py's, printed after them: Stoker's
arms interleaved in blocks of ~50 ms inside one fit, in several fresh processes (a traced
function has a speed of its own), and the steps its threads' windows slow.

Usage: .venv/bin/python -m bench.agent_overhead [--rounds 5] [--seconds 3] [--spe 1,32]
       [--models tiny,mlp,wide] [--pairs 15] [--interleaved-seconds 30]
       [--interleaved-processes 6]
"""

import argparse
import gc
import os
import random
import statistics
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np
import tensorflow as tf

from bench.thread_cpu import (
    THREAD_CLASSES,
    by_class,
    paired,
    spread_us,
    stoker_thread_ids,
    thread_cpu_ns,
)
from tests.harness.fake_nvml import FakeNvml, build
from tests.harness.support import ServerProcess
from tests.harness.training_thread import steps_counter
from trainer_agent import StokerCallback

SKIP = 50  # steps before the timed window (tracing, warm-up)
# Nor before this long into the fit: the agent's start (the sender's first flush, 1 s in, opens
# the connection and sends the hello) is a cost of the fit, not of its steps (`Fits.startup_s`).
WARM_S = 1.5
CONFIGS = (
    "baseline",
    "baseline-again",
    "stoker",
    "stoker-unstamped",
    "tensorboard",
    "empty-callback",
)


@dataclass
class Model:
    """A CPU model whose step takes about `step_ms` here."""

    name: str
    step_ms: float
    features: int
    widths: list[int]
    outputs: int
    batch: int


MODELS = {
    # The tiny steps: batch 16, 32 -> 32 -> 4, a cached and prefetched pipeline.
    "tiny": Model("tiny", 0.8, 32, [32], 4, 16),
    # The small MLP: 784 -> 256 -> 256 -> 10, batch 128.
    "mlp": Model("small MLP", 3.0, 784, [256, 256], 10, 128),
    "wide": Model("wide", 20.0, 512, [1024, 1024], 1, 128),
}


class Timer(tf.keras.callbacks.Callback):
    """Wall time and CPU time by thread per step, from the first step at or past SKIP and
    WARM_S into the fit to the end of the epoch (before Stoker's own epoch end, so its threads
    are still alive); and the CPU of Stoker's threads before that window: its start."""

    def __init__(self, steps_per_execution: int, warm_s: float = WARM_S) -> None:
        super().__init__()
        self.spe = steps_per_execution
        self.warm_s = warm_s
        self.wall_s = 0.0
        self.window_s = 0.0
        self.cpu_s: dict[str, float] = {}
        self.stoker_per_s = 0.0  # Stoker's threads' CPU a second of the window
        self.startup_s = 0.0  # Stoker's threads' CPU from the fit's start to the window's
        self._began = 0.0
        self._start = 0.0
        self._at_begin: dict[int, int] = {}
        self._threads: dict[int, int] = {}
        self._first = self._last = 0
        # Python's garbage collections in the window, by generation: how many, and their time.
        self.collections = [0, 0, 0]
        self.collected_s = [0.0, 0.0, 0.0]
        self._collecting_since = 0.0

    def on_train_begin(self, logs: Any = None) -> None:
        self._began = time.perf_counter()
        self._at_begin = thread_cpu_ns()
        gc.callbacks.append(self._collection)

    def _collection(self, phase: str, info: dict[str, Any]) -> None:
        if self._first == 0:
            return  # before the window
        if phase == "start":
            self._collecting_since = time.perf_counter()
        else:
            generation = info["generation"]
            self.collections[generation] += 1
            self.collected_s[generation] += time.perf_counter() - self._collecting_since

    def on_train_batch_begin(self, batch: int, logs: Any = None) -> None:
        if self._first == 0 and batch >= SKIP and time.perf_counter() - self._began >= self.warm_s:
            self._first = batch
            self._start = time.perf_counter()
            self._threads = thread_cpu_ns()
        self._last = batch

    def on_epoch_end(self, epoch: int, logs: Any = None) -> None:
        if self._collection in gc.callbacks:
            gc.callbacks.remove(self._collection)
        steps = self._last + self.spe - self._first
        elapsed = time.perf_counter() - self._start
        self.wall_s = elapsed / steps
        self.window_s = elapsed
        stoker = stoker_thread_ids()
        used = by_class(self._threads, thread_cpu_ns(), stoker)
        self.cpu_s = {kind: ns / 1e9 / steps for kind, ns in used.items()}
        self.stoker_per_s = used["stoker"] / 1e9 / elapsed
        self.startup_s = by_class(self._at_begin, self._threads, stoker)["stoker"] / 1e9


class TimedCallback(StokerCallback):
    """StokerCallback whose batch hooks (all of Stoker's per-step Python on the training
    thread: step timing, the ring read every ~400 steps or second, scalar logs) are timed in this
    thread's CPU time."""

    spent_ns = 0
    steps = 0

    def on_train_batch_begin(self, batch: int, logs: Any = None) -> None:
        started = time.thread_time_ns()
        super().on_train_batch_begin(batch, logs)
        TimedCallback.spent_ns += time.thread_time_ns() - started
        TimedCallback.steps += self._boundary.steps_per_execution

    def on_train_batch_end(self, batch: int, logs: Any = None) -> None:
        started = time.thread_time_ns()
        super().on_train_batch_end(batch, logs)
        TimedCallback.spent_ns += time.thread_time_ns() - started


class TimedEmpty(tf.keras.callbacks.Callback):
    """A callback whose batch hooks do nothing, timed as `TimedCallback` times Stoker's."""

    spent_ns = 0
    steps = 0

    def __init__(self, steps_per_execution: int) -> None:
        super().__init__()
        self.spe = steps_per_execution

    def on_train_batch_begin(self, batch: int, logs: Any = None) -> None:
        started = time.thread_time_ns()
        self._nothing(batch, logs)
        TimedEmpty.spent_ns += time.thread_time_ns() - started
        TimedEmpty.steps += self.spe

    def on_train_batch_end(self, batch: int, logs: Any = None) -> None:
        started = time.thread_time_ns()
        self._nothing(batch, logs)
        TimedEmpty.spent_ns += time.thread_time_ns() - started

    def _nothing(self, batch: int, logs: Any) -> None:
        return None


def make_model(model: Model, steps_per_execution: int) -> tf.keras.Model:
    layers = [tf.keras.Input(shape=(model.features,))]
    layers += [tf.keras.layers.Dense(w, activation="relu") for w in model.widths]
    keras_model = tf.keras.Sequential([*layers, tf.keras.layers.Dense(model.outputs)])
    keras_model.compile(optimizer="sgd", loss="mse", steps_per_execution=steps_per_execution)
    return keras_model


def dataset(model: Model, steps: int) -> tf.data.Dataset:
    rng = np.random.default_rng(0)
    x = rng.normal(size=(64 * model.batch, model.features)).astype("float32")
    y = rng.normal(size=(64 * model.batch, model.outputs)).astype("float32")
    ds = tf.data.Dataset.from_tensor_slices((x, y)).batch(model.batch, drop_remainder=True)
    return ds.cache().repeat().take(steps).prefetch(tf.data.AUTOTUNE)


@dataclass
class Fits:
    """Per configuration, per round: wall s/step and CPU s/step by thread class."""

    wall: dict[str, list[float]] = field(default_factory=lambda: {c: [] for c in CONFIGS})
    cpu: dict[str, dict[str, list[float]]] = field(
        default_factory=lambda: {c: {k: [] for k in THREAD_CLASSES} for c in CONFIGS}
    )
    own_s: list[float] = field(default_factory=list)
    empty_s: list[float] = field(default_factory=list)
    stoker_per_s: list[float] = field(default_factory=list)
    startup_s: list[float] = field(default_factory=list)
    # Python's full (generation 2) collections in each fit's window, and all collections' time.
    full_collections: dict[str, list[int]] = field(default_factory=lambda: {c: [] for c in CONFIGS})
    collected_s: dict[str, list[float]] = field(default_factory=lambda: {c: [] for c in CONFIGS})
    window_s: dict[str, list[float]] = field(default_factory=lambda: {c: [] for c in CONFIGS})
    calls_per_step = 0.0


def run_fit(
    config: str, keras_model: tf.keras.Model, ds: tf.data.Dataset, spe: int, server: str, tb: str
) -> Timer:
    timer = Timer(spe)
    callbacks: list[Any] = [timer]
    data = ds
    if config in ("stoker", "stoker-unstamped"):
        callback = TimedCallback(run_name="bench-overhead", server=server, sample_interval_s=1.0)
        callbacks.append(callback)
        if config == "stoker":
            data = callback.wrap(ds)
    elif config == "tensorboard":
        callbacks.append(tf.keras.callbacks.TensorBoard(log_dir=tb, update_freq="batch"))
    elif config == "empty-callback":
        callbacks.append(TimedEmpty(spe))
    keras_model.fit(data, epochs=1, callbacks=callbacks, verbose=0)
    return timer


def count_calls(keras_model: tf.keras.Model, ds: tf.data.Dataset, server: str) -> float:
    """Stoker's Python calls a step on the training thread in one fit (counted, untimed)."""
    callback = StokerCallback(run_name="bench-overhead-counted", server=server)
    counter = steps_counter(tf.keras.callbacks.Callback, SKIP)
    keras_model.fit(callback.wrap(ds), epochs=1, callbacks=[counter, callback], verbose=0)
    return counter.counter.calls / max(1, counter.steps)


def fit_steps(keras_model: tf.keras.Model, model: Model, spe: int, seconds: float) -> int:
    """Steps for a fit of about WARM_S + `seconds` here: timed on a plain fit (a step under
    `steps_per_execution` takes a fraction of the model's nominal one)."""
    guess = max(SKIP + 10 * spe, int(2e3 / model.step_ms)) // spe * spe
    started = time.perf_counter()
    keras_model.fit(dataset(model, guess), epochs=1, verbose=0)
    keras_model.fit(dataset(model, guess), epochs=1, verbose=0)  # the first one traced
    step_s = (time.perf_counter() - started) / 2 / guess
    return max(SKIP + 10 * spe, int((WARM_S + seconds) / step_s)) // spe * spe


def measure(model: Model, spe: int, rounds: int, seconds: float, server: str, work: Path) -> Fits:
    # One model for every configuration: two instances of one architecture differ in speed
    # here (an A/A pair of instances read +17.9 µs a 1.04 ms step, IQR -2.3..+33.2; two
    # configurations of one model -2.2, IQR -11.8..+2.5). The stamped fits trace their own
    # concrete function beside the plain one (another input type), so none sees another's.
    keras_model = make_model(model, spe)
    ds = dataset(model, fit_steps(keras_model, model, spe, seconds))
    for config in CONFIGS:  # trace each configuration's function, warm up
        run_fit(config, keras_model, ds, spe, server, str(work / "tb"))
    fits = Fits()
    for _ in range(rounds):
        for config in random.sample(CONFIGS, len(CONFIGS)):
            TimedCallback.spent_ns = TimedCallback.steps = 0
            TimedEmpty.spent_ns = TimedEmpty.steps = 0
            timer = run_fit(config, keras_model, ds, spe, server, str(work / "tb"))
            fits.wall[config].append(timer.wall_s)
            fits.full_collections[config].append(timer.collections[2])
            fits.collected_s[config].append(sum(timer.collected_s))
            fits.window_s[config].append(timer.window_s)
            for kind in THREAD_CLASSES:
                fits.cpu[config][kind].append(timer.cpu_s[kind])
            if config == "stoker":
                fits.stoker_per_s.append(timer.stoker_per_s)
                fits.startup_s.append(timer.startup_s)
                fits.own_s.append(TimedCallback.spent_ns / 1e9 / max(1, TimedCallback.steps))
            elif config == "empty-callback":
                fits.empty_s.append(TimedEmpty.spent_ns / 1e9 / max(1, TimedEmpty.steps))
    fits.calls_per_step = count_calls(keras_model, ds, server)
    return fits


def report(model: Model, spe: int, fits: Fits) -> None:
    base = statistics.median(fits.wall["baseline"])
    print(
        f"\n{model.name}, steps_per_execution {spe}: baseline step {base * 1e3:.3f} ms wall; "
        f"{len(fits.wall['baseline'])} rounds; µs per step, median (IQR) of the paired "
        "difference to the baseline"
    )
    header = f"{'configuration':17} {'wall':>22} {'% step':>7}"
    header += "".join(f" {'CPU ' + kind:>24}" for kind in THREAD_CLASSES)
    print(header)
    cpu = {kind: {c: fits.cpu[c][kind] for c in CONFIGS} for kind in THREAD_CLASSES}
    for config in CONFIGS[1:]:
        wall = paired(fits.wall, config)
        line = f"{config:17} {spread_us(wall):>22} {statistics.median(wall) / base * 100:+7.2f}"
        for kind in THREAD_CLASSES:
            line += f" {spread_us(paired(cpu[kind], config)):>24}"
        print(line)
    stamps = paired(fits.wall, "stoker", base="stoker-unstamped")
    stamps_cpu = {
        kind: spread_us(paired(cpu[kind], "stoker", "stoker-unstamped")) for kind in THREAD_CLASSES
    }
    print(
        f"the stamps (stoker against stoker-unstamped): wall {spread_us(stamps).strip()} µs/step "
        f"({statistics.median(stamps) / base * 100:+.2f} %); CPU "
        + ", ".join(f"{kind} {spread.strip()}" for kind, spread in stamps_cpu.items())
    )
    total = [
        sum(fits.cpu["stoker"][k][i] - fits.cpu["baseline"][k][i] for k in THREAD_CLASSES)
        for i in range(len(fits.own_s))
    ]
    noise = [
        sum(fits.cpu["baseline-again"][k][i] - fits.cpu["baseline"][k][i] for k in THREAD_CLASSES)
        for i in range(len(fits.own_s))
    ]
    own = statistics.median(fits.own_s) * 1e6
    empty = statistics.median(fits.empty_s) * 1e6
    print(
        f"Stoker's own code on the training thread (its hooks timed): {own:.1f} µs/step, an "
        f"empty callback's timed the same way {empty:.1f} (target ≤ 20); "
        f"{fits.calls_per_step:.2f} Python calls a step (counted); CPU all threads, stoker "
        f"{spread_us(total).strip()} µs/step against A/A {spread_us(noise).strip()} "
        "(target ≤ 30)"
    )
    collections = ", ".join(
        f"{config} {sum(fits.full_collections[config])} "
        f"({sum(fits.collected_s[config]) / sum(fits.window_s[config]) * 1e3:.2f} ms a second "
        "in all collections)"
        for config in CONFIGS
    )
    print(
        f"Python's full garbage collections in the windows ({sum(fits.window_s['baseline']):.0f} "
        f"s of each configuration; counted): {collections}"
    )
    print(
        f"Stoker's threads (sender, sampler): {statistics.median(fits.stoker_per_s) * 1e3:.1f} ms "
        "of CPU a second of the window, whatever the step rate (their wakes: a flush and a "
        f"sample a second); {statistics.median(fits.startup_s) * 1e3:.1f} ms in the fit's first "
        f"{WARM_S:g} s (the connection and hello: a cost per fit, left out of the per-step figures)"
    )


def steady_threads(server: str, seconds: float = 20.0, after_s: float = 5.0) -> tuple[float, float]:
    """Stoker's threads' CPU a second in one long fit of the small MLP, from `after_s` into
    it to its end (a user's fit runs minutes: its first seconds carry the connection, the
    hello and the first reads), and the fit's steps a second."""
    model = MODELS["mlp"]
    keras_model = make_model(model, 1)
    steps = fit_steps(keras_model, model, 1, seconds)
    timer = Timer(1, warm_s=after_s)
    callback = StokerCallback(run_name="bench-steady", server=server, sample_interval_s=1.0)
    data = callback.wrap(dataset(model, steps))
    keras_model.fit(data, epochs=1, callbacks=[timer, callback], verbose=0)
    return timer.stoker_per_s, 1 / timer.wall_s


def hooks_alone(server: str, steps: int = 20_000) -> float:
    """Stoker's batch hooks called directly, no fit (so no TensorFlow beside them): CPU time
    per step of this thread, the median of 7 rounds. The stamp ring is the model's and is
    read as in a fit, by the run's sender thread (it holds no stamps: the steps resolve
    without); this thread reads it only if the sender falls behind."""
    keras_model = make_model(MODELS["tiny"], 1)
    callback = StokerCallback(run_name="bench-hooks", server=server)
    callback.wrap(dataset(MODELS["tiny"], 10))
    callback.set_model(keras_model)
    callback.set_params({"epochs": 1, "steps": 10**7, "verbose": 0})
    callback.on_train_begin()
    logs = {"loss": 0.5}
    rounds = []
    step = 0
    for _ in range(7):
        started = time.thread_time_ns()
        for _ in range(steps):
            callback.on_train_batch_begin(step)
            callback.on_train_batch_end(step, logs)
            step += 1
        rounds.append((time.thread_time_ns() - started) / 1e9 / steps)
    callback.on_train_end()
    return statistics.median(rounds)


def wake_penalty_us(asleep_s: float = 0.05, rounds: int = 30) -> tuple[float, float]:
    """This machine's price for waking a thread: the CPU a sum of 1,000 floats takes on a
    thread that just ran, and on one that slept `asleep_s` before it (medians). Stoker's
    threads wake twice a second (a flush, a sample) and pay it at each wake; on this VM it
    is most of their CPU."""
    values = np.arange(1000.0)
    hot, cold = [], []
    for _ in range(rounds):
        values.sum()
        started = time.thread_time_ns()
        values.sum()
        hot.append(time.thread_time_ns() - started)
        time.sleep(asleep_s)
        started = time.thread_time_ns()
        values.sum()
        cold.append(time.thread_time_ns() - started)
    return statistics.median(hot) / 1e3, statistics.median(cold) / 1e3


def wrap_cost(server: str, calls: int = 20) -> tuple[float, float, int]:
    """`wrap()`'s own time on the first call in this process and the median over freshly
    built pipelines after it, and the graphs it traced after the first call."""
    from tensorflow.python.framework import func_graph

    def pipeline() -> tf.data.Dataset:
        x = np.zeros((640, 8), "float32")
        ds = tf.data.Dataset.from_tensor_slices((x, x[:, :1])).batch(64)
        return ds.cache().repeat().prefetch(2)

    started = time.perf_counter()
    StokerCallback(server=server).wrap(pipeline())
    first = time.perf_counter() - started
    traced = [0]
    original = func_graph.FuncGraph.__init__

    def counting(self: Any, *args: Any, **kwargs: Any) -> None:
        traced[0] += 1
        original(self, *args, **kwargs)

    times = []
    for _ in range(calls):
        ds = pipeline()
        callback = StokerCallback(server=server)
        func_graph.FuncGraph.__init__ = counting
        started = time.perf_counter()
        callback.wrap(ds)
        times.append(time.perf_counter() - started)
        func_graph.FuncGraph.__init__ = original
    return first, statistics.median(times), traced[0]


def fake_nvml(work: Path) -> None:
    """Build the fake NVML into `work` and load it into this process: the GPU sampler reads
    it every second as it would a GPU's. The run's spool goes under `work` too."""
    fake = FakeNvml(build(work / "nvml"), work / "nvml-control.txt")
    fake.write(gpu0={"util": 90})
    fake.preload()
    os.environ["STOKER_SPOOL_DIR"] = str(work / "spool")


def print_load(when: str) -> None:
    load = os.getloadavg()
    print(
        f"load average at {when}: {load[0]:.2f} {load[1]:.2f} {load[2]:.2f} ({os.cpu_count()} CPUs)"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--seconds", type=float, default=3.0, help="about this long per fit")
    parser.add_argument("--spe", default="1,32", help="steps_per_execution values")
    parser.add_argument("--models", default="tiny,mlp,wide")
    parser.add_argument("--pairs", type=int, default=15, help="pairs of 5-step fits")
    parser.add_argument(
        "--interleaved-seconds",
        type=float,
        default=30.0,
        help="the wall cost from arms interleaved inside fits of this length (0: skip)",
    )
    parser.add_argument(
        "--interleaved-processes", type=int, default=6, help="fresh processes per model for it"
    )
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="stoker-bench-"))
    fake_nvml(work)
    server = ServerProcess(data_dir=work / "server").start()
    print_load("start")
    hot, cold = wake_penalty_us()
    print(
        f"this machine's wake-up price: a sum of 1,000 floats takes {hot:.0f} µs of CPU on a "
        f"thread that just ran, {cold:.0f} µs right after 50 ms asleep"
    )
    try:
        first, again, traced = wrap_cost(server.url)
        print(
            f"wrap(): first call in the process {first * 1e3:.2f} ms; after it, on freshly "
            f"built pipelines, median {again * 1e3:.3f} ms (target ≤ 1 ms), {traced} "
            "functions traced"
        )
        print(
            f"Stoker's batch hooks alone (recording each step, the ring read as in a fit, on "
            "the sender thread): "
            f"{hooks_alone(server.url) * 1e6:.2f} µs/step of CPU (target ≤ 20)"
        )
        per_s, rate = steady_threads(server.url)
        print(
            f"Stoker's threads in a long fit (small MLP, from 5 s in to its end, 20 s): "
            f"{per_s * 1e3:.1f} ms of CPU a second at {rate:.0f} steps a second: "
            f"{per_s / rate * 1e6:.1f} µs a step"
        )
        for name in args.models.split(","):
            for spe in (int(s) for s in args.spe.split(",")):
                fits = measure(MODELS[name], spe, args.rounds, args.seconds, server.url, work)
                report(MODELS[name], spe, fits)
        if args.interleaved_seconds:
            from bench import interleaved

            for name in args.models.split(","):
                seconds, processes = args.interleaved_seconds, args.interleaved_processes
                interleaved.report(name, server, seconds, processes)
        if args.pairs:
            from bench.fit_overhead import pairs_main

            print()
            pairs_main(args.pairs, server=server, pipeline="cached")
    finally:
        server.stop()
    print_load("end")


if __name__ == "__main__":
    main()
