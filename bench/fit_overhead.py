"""What does StokerCallback add to each `fit()` call, besides its per-step cost?

Many short CPU fits of one tiny model, 2 to 128 steps each, in three configurations
interleaved in a random order within each round:
  plain     no callback
  stoker    StokerCallback streaming to a real `stoker serve` started here; fits follow each
            other back to back, so a fit's background drain overlaps the next fit (a fit per
            epoch, active learning, RL loops)
  settled   the same, but `trainer_agent.flush()` runs after the timed fit, so each fit
            starts with no earlier run still draining
Whole-fit wall time is fitted against the step count by least squares per configuration:
the intercept is the fixed cost of a fit, the slope its cost per step. Stoker's fixed cost
per fit is its intercept minus plain's, its per-step cost its slope minus plain's. The
median paired difference at each step count is printed beside them, and the time the hooks
that open and end a run take on the training thread (on_train_begin, on_train_end).

With `--pairs N` it prints instead the per-fit measurement, a fit as users who call fit()
many times make it: N back-to-back pairs of 5-step fits of a `tf.data` pipeline, each a
plain fit and a monitored one next to each other (in a random order), in three
configurations shuffled within each round:
  stoker        a new `StokerCallback` and `cb.wrap(dataset)` for every fit (what `autolog`
                and `stoker run` do), streaming to a real `stoker serve` on loopback
  stoker-reused one callback and one wrapped dataset for every fit
  tensorboard   a new `TensorBoard(update_freq="batch")` for every fit, to a temporary logdir
The figure is the median paired difference to the plain fit, in ms, and Stoker's ratio to
TensorBoard's; beside it, where Stoker's time goes on the training thread (`wrap`,
`on_train_begin`, `on_train_end`: wall and the thread's own CPU time, and their Python calls,
counted in extra fits after the timed ones; the rest is Keras's own per-fit work made slower,
e.g. the iterators of the wrapped pipeline, and the agent's threads competing for the GIL
and the cores), and the CPU a fit costs each thread class (training, TensorFlow's, Stoker's)
and the server. Then the same fits in a row: `--in-a-row` rounds of 5 monitored fits back to
back (a new callback each) against 5 plain ones, each block timed whole (every run's drain
but the last overlaps the next fit, as when a script fits many times), per fit.

Usage: .venv/bin/python -m bench.fit_overhead [--rounds 30] [--steps 2,8,32,128]
       .venv/bin/python -m bench.fit_overhead --pairs 25 [--pipeline batches|cached]
           [--in-a-row 10]
"""

import argparse
import os
import random
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np
import tensorflow as tf

import trainer_agent
from bench.thread_cpu import THREAD_CLASSES, by_class, stoker_thread_ids, thread_cpu_ns
from tests.harness.support import ServerProcess
from tests.harness.training_thread import StokerCalls
from trainer_agent import StokerCallback

BATCH = 8
TARGET_FIXED_MS = 30.0
# --pairs: the per-fit measurement (back-to-back short fits) and its target.
PAIR_STEPS = 5
TARGET_PAIR_MS = 5.0  # issue 37: <= 5 ms a fit on a cache/repeat/prefetch pipeline


class TimedStokerCallback(StokerCallback):
    """StokerCallback, timing `wrap` and the two hooks that open and end a run (wall, and
    this thread's CPU time), or counting their Python calls (`counted`)."""

    begin_s: list[float] = []
    end_s: list[float] = []
    wrap_s: list[float] = []
    begin_cpu_s: list[float] = []
    end_cpu_s: list[float] = []
    counted: StokerCalls | None = None

    def wrap(self, dataset):
        started = time.perf_counter()
        wrapped = super().wrap(dataset)
        TimedStokerCallback.wrap_s.append(time.perf_counter() - started)
        return wrapped

    def _timed(self, hook, walls, cpus, logs):
        counted = TimedStokerCallback.counted
        if counted is not None:
            with counted.counting():
                hook(logs)
            return
        started, cpu_started = time.perf_counter(), time.thread_time()
        hook(logs)
        cpus.append(time.thread_time() - cpu_started)
        walls.append(time.perf_counter() - started)

    def on_train_begin(self, logs=None):
        timed = TimedStokerCallback
        self._timed(super().on_train_begin, timed.begin_s, timed.begin_cpu_s, logs)

    def on_train_end(self, logs=None):
        timed = TimedStokerCallback
        self._timed(super().on_train_end, timed.end_s, timed.end_cpu_s, logs)


def least_squares(points: list[tuple[int, float]]) -> tuple[float, float]:
    """(intercept, slope) of time against steps."""
    xs = np.array([p[0] for p in points], dtype=float)
    ys = np.array([p[1] for p in points], dtype=float)
    slope, intercept = np.polyfit(xs, ys, 1)
    return float(intercept), float(slope)


def tiny_model() -> tf.keras.Model:
    model = tf.keras.Sequential(
        [
            tf.keras.Input((8,)),
            tf.keras.layers.Dense(16, activation="relu"),
            tf.keras.layers.Dense(1),
        ]
    )
    model.compile(optimizer="sgd", loss="mse")
    return model


def server_cpu_s(server: ServerProcess) -> float:
    """CPU seconds the server process has used so far."""
    import psutil

    assert server.process is not None
    times = psutil.Process(server.process.pid).cpu_times()
    return float(times.user + times.system)


def quartiles_ms(values: list[float]) -> str:
    q1, median, q3 = statistics.quantiles(values, n=4)
    return f"{median * 1e3:+6.1f} ms (IQR {q1 * 1e3:+.1f}..{q3 * 1e3:+.1f})"


def pairs_main(
    pairs: int, server: ServerProcess | None = None, pipeline: str = "batches", in_a_row: int = 10
) -> None:
    """The per-fit measurement: back-to-back pairs of 5-step fits, plain against monitored,
    then `in_a_row` rounds of blocks of fits in a row.

    `pipeline`: "batches" (`from_tensor_slices(...).batch(8)`, five batches) or "cached"
    (`from_tensor_slices(...).batch(64).cache().repeat().prefetch(2)`, five steps a fit: the
    shape users' pipelines have). `server`: one already running (its caller stops it)."""
    work = Path(tempfile.mkdtemp(prefix="stoker-fit-pairs-"))
    own_server = server is None
    if server is None:
        os.environ["STOKER_SPOOL_DIR"] = str(work / "spool")
        server = ServerProcess(data_dir=work / "server").start()
    batch = 64 if pipeline == "cached" else BATCH
    x = np.random.default_rng(0).normal(size=(PAIR_STEPS * batch, 8)).astype("float32")
    dataset = tf.data.Dataset.from_tensor_slices((x, x.sum(axis=1, keepdims=True))).batch(batch)
    steps_per_epoch = None
    if pipeline == "cached":
        dataset = dataset.cache().repeat().prefetch(2)
        steps_per_epoch = PAIR_STEPS
    model = tiny_model()
    reused = TimedStokerCallback(server=server.url)
    reused_data = reused.wrap(dataset)
    configs = ("stoker", "stoker-reused", "tensorboard")
    # This process's CPU time during each fit, by configuration and thread class.
    cpu: dict[str, dict[str, list[float]]] = {
        c: {k: [] for k in THREAD_CLASSES} for c in ("plain", *configs)
    }

    def fit(config: str) -> float:
        before = thread_cpu_ns()
        started = time.perf_counter()
        data, callbacks = dataset, []
        if config == "stoker":
            callback = TimedStokerCallback(server=server.url)
            data, callbacks = callback.wrap(dataset), [callback]
        elif config == "stoker-reused":
            data, callbacks = reused_data, [reused]
        elif config == "tensorboard":
            logdir = str(work / "tensorboard")
            callbacks = [tf.keras.callbacks.TensorBoard(log_dir=logdir, update_freq="batch")]
        model.fit(data, epochs=1, verbose=0, callbacks=callbacks, steps_per_epoch=steps_per_epoch)
        took = time.perf_counter() - started
        used = by_class(before, thread_cpu_ns(), stoker_thread_ids())
        for kind in THREAD_CLASSES:
            cpu[config][kind].append(used[kind] / 1e9)
        return took

    differences: dict[str, list[float]] = {c: [] for c in configs}
    plain: list[float] = []
    try:
        for config in ("plain", *configs) * 3:  # tracing, the first connection, imports
            fit(config)
        trainer_agent.flush()
        timed = TimedStokerCallback
        for spans in (timed.begin_s, timed.end_s, timed.wrap_s, timed.begin_cpu_s, timed.end_cpu_s):
            spans.clear()
        for by_thread in cpu.values():
            for values in by_thread.values():
                values.clear()
        server_cpu_started = server_cpu_s(server)
        load_before = os.getloadavg()
        for _ in range(pairs):
            for config in random.sample(configs, len(configs)):
                order = random.sample(["plain", config], 2)
                took = {name: fit(name) for name in order}
                differences[config].append(took[config] - took["plain"])
                plain.append(took["plain"])
        load_after = os.getloadavg()
        trainer_agent.flush()
        server_cpu = server_cpu_s(server) - server_cpu_started
        row = _in_a_row(fit, in_a_row) if in_a_row else None
        timed.counted = StokerCalls()
        for _ in range(5):
            fit("stoker")
        calls = timed.counted.calls / 5
        timed.counted = None
        trainer_agent.flush()
    finally:
        if own_server:
            server.stop()

    shape = "batch(64).cache().repeat().prefetch(2)" if pipeline == "cached" else f"batch {batch}"
    print(
        f"{pairs} back-to-back pairs of {PAIR_STEPS}-step fits per configuration "
        f"({shape}, a 2-layer MLP, tf.data), {os.cpu_count()} CPUs, "
        f"load average {load_before[0]:.2f} before, {load_after[0]:.2f} after"
    )
    print(f"plain fit: median {statistics.median(plain) * 1e3:.1f} ms")
    medians = {c: statistics.median(differences[c]) for c in configs}

    def added_cpu_ms(config: str, kind: str) -> float:
        return (statistics.median(cpu[config][kind]) - statistics.median(cpu["plain"][kind])) * 1e3

    for config in configs:
        threads = ", ".join(f"{kind} {added_cpu_ms(config, kind):+.2f}" for kind in THREAD_CLASSES)
        print(
            f"{config:14s} adds {quartiles_ms(differences[config])} per fit; "
            f"this process's CPU ms by thread: {threads}"
        )
    print(
        f"the server's CPU: {server_cpu / (2 * pairs) * 1e3:.1f} ms per monitored fit "
        "(it shares this machine's cores)"
    )
    tensorboard = medians["tensorboard"]
    for config in ("stoker", "stoker-reused"):
        verdict = "ok" if medians[config] <= TARGET_PAIR_MS / 1e3 else "MISSED"
        ratio = medians[config] / tensorboard if tensorboard > 0 else float("nan")
        print(
            f"{config}: {medians[config] * 1e3:.1f} ms per fit (target <= "
            f"{TARGET_PAIR_MS:.0f} ms: {verdict}), {ratio:.1f}x TensorBoard's "
            f"{tensorboard * 1e3:.1f} ms"
        )
    if row is not None:
        print(row)
    print("on the training thread, both stoker configurations together (wall; thread CPU):")
    for name, values, cpus in (
        ("wrap (stoker only)", timed.wrap_s, None),
        ("on_train_begin", timed.begin_s, timed.begin_cpu_s),
        ("on_train_end", timed.end_s, timed.end_cpu_s),
    ):
        if values:
            line = (
                f"  {name:19s} median {statistics.median(values) * 1e3:6.2f} ms, "
                f"p90 {sorted(values)[int(0.9 * (len(values) - 1))] * 1e3:6.2f} ms"
            )
            if cpus:
                line += f"; CPU median {statistics.median(cpus) * 1e3:.2f} ms"
            print(line)
    print(f"  Python calls in on_train_begin + on_train_end (counted): {calls:.0f} per fit")


def _in_a_row(fit: Callable[[str], float], rounds: int, block: int = 5) -> str:
    """Blocks of `block` fits in a row, monitored (a new callback each) against plain, in a
    random order per round; each block timed whole, what the last run still sends left to
    drain before the next block (untimed)."""
    added = []
    for _ in range(rounds):
        took = {}
        for config in random.sample(["plain", "stoker"], 2):
            trainer_agent.flush()
            started = time.perf_counter()
            for _ in range(block):
                fit(config)
            took[config] = (time.perf_counter() - started) / block
        added.append(took["stoker"] - took["plain"])
    trainer_agent.flush()
    return (
        f"stoker, {block} fits in a row ({rounds} rounds): adds {quartiles_ms(added)} per fit "
        f"(target <= {TARGET_PAIR_MS:.0f} ms: "
        f"{'ok' if statistics.median(added) <= TARGET_PAIR_MS / 1e3 else 'MISSED'})"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=30)
    parser.add_argument("--steps", default="2,8,32,128")
    parser.add_argument(
        "--pairs", type=int, default=0, help="pairs of 5-step fits (the per-fit cost) instead"
    )
    parser.add_argument(
        "--pipeline", choices=("batches", "cached"), default="batches", help="with --pairs"
    )
    parser.add_argument(
        "--in-a-row", type=int, default=10, help="with --pairs: rounds of 5 fits in a row"
    )
    args = parser.parse_args()
    if args.pairs:
        pairs_main(args.pairs, pipeline=args.pipeline, in_a_row=args.in_a_row)
        return
    step_counts = [int(s) for s in args.steps.split(",")]

    work = Path(tempfile.mkdtemp(prefix="stoker-fit-overhead-"))
    os.environ["STOKER_SPOOL_DIR"] = str(work / "spool")
    server = ServerProcess(data_dir=work / "server").start()
    rng = np.random.default_rng(0)
    data = {
        n: (x := rng.normal(size=(n * BATCH, 8)).astype("float32"), x.sum(axis=1, keepdims=True))
        for n in step_counts
    }
    model = tiny_model()

    def fit(config: str, steps: int) -> float:
        x, y = data[steps]
        callbacks = [] if config == "plain" else [TimedStokerCallback(server=server.url)]
        started = time.perf_counter()
        model.fit(x, y, batch_size=BATCH, epochs=1, verbose=0, callbacks=callbacks)
        elapsed = time.perf_counter() - started
        if config == "settled":
            trainer_agent.flush()
        return elapsed

    configs = ("plain", "stoker", "settled")
    try:
        for config in configs:  # tracing, the first connection, imports
            for steps in step_counts:
                fit(config, steps)
        trainer_agent.flush()
        TimedStokerCallback.begin_s.clear()
        TimedStokerCallback.end_s.clear()
        times: dict[str, list[tuple[int, float]]] = {c: [] for c in configs}
        pairs: dict[str, dict[int, list[float]]] = {
            c: {n: [] for n in step_counts} for c in configs
        }
        load_before = os.getloadavg()
        for _ in range(args.rounds):
            order = [(c, n) for c in configs for n in step_counts]
            random.shuffle(order)
            measured = {(c, n): fit(c, n) for c, n in order}
            for (c, n), elapsed in measured.items():
                times[c].append((n, elapsed))
                pairs[c][n].append(elapsed - measured[("plain", n)])
        trainer_agent.flush()
        load_after = os.getloadavg()
    finally:
        server.stop()

    plain_intercept, plain_slope = least_squares(times["plain"])
    print(f"fits: {args.rounds} rounds x {len(step_counts)} step counts {step_counts} x {configs}")
    print(
        f"load average before {load_before[0]:.2f}, after {load_after[0]:.2f} "
        f"({os.cpu_count()} CPUs)"
    )
    print(f"plain fit: {plain_intercept * 1e3:.1f} ms fixed + {plain_slope * 1e6:.0f} µs/step")
    for config in ("stoker", "settled"):
        intercept, slope = least_squares(times[config])
        fixed_ms = (intercept - plain_intercept) * 1e3
        print(
            f"{config:8s} fixed cost per fit {fixed_ms:6.1f} ms "
            f"(target <= {TARGET_FIXED_MS:.0f} ms: "
            f"{'ok' if fixed_ms <= TARGET_FIXED_MS else 'MISSED'}), per step "
            f"{(slope - plain_slope) * 1e6:6.1f} µs"
        )
        paired = ", ".join(
            f"{n} steps {statistics.median(pairs[config][n]) * 1e3:+.1f} ms" for n in step_counts
        )
        print(f"         median paired difference to plain: {paired}")
    for name, values in (
        ("on_train_begin", TimedStokerCallback.begin_s),
        ("on_train_end", TimedStokerCallback.end_s),
    ):
        print(
            f"{name}: median {statistics.median(values) * 1e3:.2f} ms, "
            f"p90 {sorted(values)[int(0.9 * (len(values) - 1))] * 1e3:.2f} ms "
            "on the training thread"
        )


if __name__ == "__main__":
    main()
