"""Stoker's wall cost on the step, with arms interleaved inside one fit: what paired fits
cannot resolve here.

Two fits of one model run at speeds that drift apart by more than Stoker costs on a 2-core VM
(an A/A of paired fits read +11.8, -54.6 and +67.4 µs on a ~1 ms step: bench/LOG.md, sixth
pass). Here one long fit of one model runs its train-function calls in blocks of about 50 ms,
and the blocks rotate, in a random order per group, over these arms (and two per further
trace, below):
  baseline, baseline-again   Keras's own train function, no Stoker hooks (A/A: the noise)
  stoker                     Stoker's batch hooks and its train-function wrapper, whose
                             iterator is stamped (input wait): what a fit with `wrap` runs
  stoker-unstamped           Stoker's hooks, Keras's train function with the plain iterator
A gate callback (the only one Keras holds, in every arm) records each call's begin, then
runs Stoker's hooks or not, and hands the train function Stoker's wrapper or Keras's own. A
block's time is the median interval between its calls' begins, from its third call on (the
switch between two traced functions is left out); each arm's figure is the median over groups
of its block less the baseline's block of the same group, with a bootstrap 95 % interval. The
drift of the machine moves every arm of a group alike.

A traced function runs at a speed of its own, fixed when it is traced: the stamped fits run
another concrete function than the plain ones, and on the small MLP and the wide model one
process read the stamped arm 58-82 µs (small MLP) and 305-401 µs (wide) faster than the
plain one, another 23 µs slower. So each fit runs `--traces` traces of each function (4: three
more `tf.function`s of Keras's train step, each traced with the plain iterator and the stamped
one, each pair two more arms, "baseline-tK" and "stoker-tK"), and Stoker's path is read
across them: per group, the mean of the stamped arms less the mean of the plain ones. The
further plain traces against the first show how far a trace's own speed goes. And each fit
runs in a fresh process (`--processes`: a new model, new traces), the figure the median over
processes, with their spread.

What the arms cannot hold apart is Stoker's threads, which run in every arm. So a second,
ordinary fit (the callback and `wrap`, no gate) records each step's begin and the windows in
which the sender collects (its ring read and matching) and delivers (the WebSocket frame and
the wait for its acknowledgement) and the sampler samples: the steps that overlap a window are
compared with the median step just before it, and their excess, summed, is what the window
took from the training thread. A delivery's window holds the server's work on the frame: on
this machine the server shares the two cores with the training, so its CPU in that fit is
printed too.

Usage: .venv/bin/python -m bench.interleaved [--models tiny,mlp,wide] [--seconds 30]
       [--processes 6] [--traces 4]
"""

import argparse
import json
import os
import random
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np
import psutil
import tensorflow as tf

import trainer_agent
from bench.agent_overhead import (
    MODELS,
    Model,
    dataset,
    fake_nvml,
    fit_steps,
    make_model,
    print_load,
)
from tests.harness.support import ServerProcess
from trainer_agent import StokerCallback
from trainer_agent.capture.train_function import _tf_wrapper
from trainer_agent.delivery.sender import Sender
from trainer_agent.telemetry.samplers import Sampler

ARMS = ("baseline", "baseline-again", "stoker", "stoker-unstamped")
# TRACES > 1 adds, per further trace k of Keras's train function (another `tf.function` of the
# same step, so another trace of the plain iterator and of the stamped one), two arms:
# "baseline-tK" (its plain trace) and "stoker-tK" (Stoker's hooks and its stamped trace).
TRACES = 4


def trace_pairs(traces: int) -> list[tuple[str, str]]:
    """The (plain, stamped) arm of each of `traces` traces: ("baseline", "stoker") is the
    first's."""
    return [("baseline", "stoker")] + [(f"baseline-t{k}", f"stoker-t{k}") for k in range(1, traces)]


def arms_of(traces: int) -> tuple[str, ...]:
    """The arms of a fit with `traces` traces of each function (ARMS, then two per trace)."""
    return ARMS + tuple(arm for pair in trace_pairs(traces)[1:] for arm in pair)


# A block's length: short against the machine's drift, long against the switch between two
# traced functions (STOKER_BENCH_BLOCK_S: 0.2 and 0.4 s were tried, bench/LOG.md seventh pass).
BLOCK_S = float(os.environ.get("STOKER_BENCH_BLOCK_S", "0.05"))
SKIP_CALLS = 2  # calls of each block left out: the switch from another arm's function


class Begins(tf.keras.callbacks.Callback):
    """Each train-function call's begin (`perf_counter`)."""

    def __init__(self, steps: int) -> None:
        super().__init__()
        self.begins = np.zeros(steps + 1)
        self.calls = 0

    def on_train_batch_begin(self, batch: int, logs: Any = None) -> None:
        if self.calls < len(self.begins):
            self.begins[self.calls] = time.perf_counter()
        self.calls += 1


class Gate(Begins):
    """The one callback Keras holds: each call's begin (as `Begins`), and per block either
    Stoker's hooks and train-function wrapper or nothing of Stoker's."""

    def __init__(
        self,
        stoker: StokerCallback,
        calls: int,
        block: int,
        further: list[Callable[..., Any]] | None = None,
    ) -> None:
        super().__init__(calls)
        self.stoker = stoker
        self.block = block
        self.further = further or []  # further traces of Keras's train function
        self.traces = 1 + len(self.further)
        self.arms = arms_of(self.traces)
        groups = calls // (block * len(self.arms)) + 1
        self.order = [
            arm for _ in range(groups) for arm in random.sample(self.arms, len(self.arms))
        ]
        self._hooks = False
        self._keras: Callable[..., Any] = lambda *args: None
        self._stoker: Callable[..., Any] = lambda *args: None
        self._functions: dict[str, Callable[..., Any]] = {}
        self._function: Callable[..., Any] = self._keras

    def set_model(self, model: Any) -> None:
        super().set_model(model)
        self.stoker.set_model(model)

    def set_params(self, params: dict[str, Any]) -> None:
        super().set_params(params)
        self.stoker.set_params(params)

    def on_train_begin(self, logs: Any = None) -> None:
        self._keras = self.model.train_function
        self.stoker.on_train_begin(logs)
        self._stoker = self.model.train_function
        functions = {"baseline": self._keras, "baseline-again": self._keras}
        functions |= {"stoker": self._stoker, "stoker-unstamped": self._keras}
        # The wrapper Stoker puts around Keras's function, around each further trace's: its
        # iterator stamped into the same ring (the fit's own wrapper already watches it).
        stamps = self.stoker._stamps
        stamp = _SameRing(stamps.ring) if stamps is not None else None
        for keras, (plain, stamped) in zip(self.further, trace_pairs(self.traces)[1:], strict=True):
            functions[plain] = keras
            functions[stamped] = _tf_wrapper(keras, _Unwatched(), stamp)
        self._functions = functions
        self.model.train_function = self._train_function

    def _train_function(self, iterator: Any, *args: Any, **kwargs: Any) -> Any:
        return self._function(iterator, *args, **kwargs)

    def on_train_batch_begin(self, batch: int, logs: Any = None) -> None:
        super().on_train_batch_begin(batch, logs)
        arm = self.order[(self.calls - 1) // self.block]
        self._hooks = arm.startswith("stoker")
        self._function = self._functions[arm]
        if self._hooks:
            self.stoker.on_train_batch_begin(batch, logs)

    def on_train_batch_end(self, batch: int, logs: Any = None) -> None:
        if self._hooks:
            self.stoker.on_train_batch_end(batch, logs)

    def on_epoch_begin(self, epoch: int, logs: Any = None) -> None:
        self.stoker.on_epoch_begin(epoch, logs)

    def on_epoch_end(self, epoch: int, logs: Any = None) -> None:
        self.stoker.on_epoch_end(epoch, logs)

    def on_train_end(self, logs: Any = None) -> None:
        self.model.train_function = self._stoker
        self.stoker.on_train_end(logs)


class _SameRing:
    """A further trace's stamper: its iterator stamped into the fit's ring, no iterator of
    its own noted (the fit's wrapper noted it)."""

    def __init__(self, ring: Any) -> None:
        self.ring = ring

    def stamped(self, iterator: Any) -> Any:
        return self.ring.stamped(iterator)

    def failed(self, error: BaseException) -> None:
        raise RuntimeError("a further trace could not be stamped") from error


class _Unwatched:
    def watch(self, iterator: Any) -> None:
        pass


@dataclass
class ArmCost:
    """An arm's paired difference to the baseline, µs a call: median, bootstrap 95 % interval."""

    median_us: float
    low_us: float
    high_us: float


# The cost of Stoker's path averaged over the traces: per group, the mean of the stamped
# arms less the mean of the plain ones (each trace's speed of its own cancels out).
ACROSS_TRACES = "stoker-across-traces"


def arm_costs(
    begins: np.ndarray, order: list[str], block: int, traces: int = 1
) -> tuple[float, dict[str, ArmCost]]:
    """The baseline's call (s) and each arm's paired cost, from the calls' begin times; with
    further traces, also ACROSS_TRACES."""
    arms = arms_of(traces)
    groups: dict[int, dict[str, float]] = {}
    for index in range(len(begins) // block - 1):
        start = index * block + SKIP_CALLS
        intervals = np.diff(begins[start : (index + 1) * block])
        groups.setdefault(index // len(arms), {})[order[index]] = float(np.median(intervals))
    whole = [g for g in groups.values() if len(g) == len(arms)]
    base = statistics.median(g["baseline"] for g in whole)
    rng = np.random.default_rng(0)

    def cost(paired_s: list[float]) -> ArmCost:
        paired = np.array(paired_s) * 1e6
        resampled = np.median(rng.choice(paired, (2000, len(paired))), axis=1)
        low, high = np.percentile(resampled, [2.5, 97.5])
        return ArmCost(float(np.median(paired)), float(low), float(high))

    costs = {arm: cost([g[arm] - g["baseline"] for g in whole]) for arm in arms[1:]}
    pairs = trace_pairs(traces)
    if traces > 1:
        costs[ACROSS_TRACES] = cost(
            [statistics.fmean(g[stamped] - g[plain] for plain, stamped in pairs) for g in whole]
        )
    return base, costs


def interleaved_fit(
    model: Model, seconds: float, server: str, traces: int = TRACES
) -> tuple[int, float, dict[str, ArmCost]]:
    """One fit of about `seconds` whose blocks rotate over the arms (`steps_per_execution` 1:
    a call is a step), with `traces` traces of Keras's train function: the block's length in
    steps, the baseline's step (s), each arm's cost."""
    keras_model = make_model(model, 1)
    steps = fit_steps(keras_model, model, 1, seconds)
    further = []
    for _ in range(traces - 1):
        keras_model.make_train_function(force=True)
        further.append(keras_model.train_function)
    keras_model.make_train_function(force=True)  # the first trace's, what the fits start with

    def fit(steps: int, block: int) -> Gate:
        callback = StokerCallback(
            run_name="bench-interleaved", server=server, sample_interval_s=1.0
        )
        gate = Gate(callback, steps, block, further)
        data = callback.wrap(dataset(model, steps))
        keras_model.fit(data, epochs=1, callbacks=[gate], verbose=0)
        return gate

    probe = fit(max(200, int(2.0 / (model.step_ms / 1e3))), 8)
    step_s = float(np.median(np.diff(probe.begins[SKIP_CALLS : probe.calls])))
    block = max(8, round(BLOCK_S / step_s))
    fit(block * len(probe.arms) * 3, block)  # every function traced, warm
    gate = fit(steps, block)
    guard = gate.stoker._guard
    if guard.disabled:  # Stoker turned itself off: its arms would cost nothing
        raise RuntimeError(f"Stoker was disabled in the interleaved fit: {guard.reason}")
    base, costs = arm_costs(gate.begins[: gate.calls], gate.order, block, gate.traces)
    return block, base, costs


# The methods whose windows `threads_excess` reads: their class, and what they are.
WINDOWS: dict[str, tuple[type, str]] = {
    "_collect": (Sender, "the sender's collection (ring read, matching)"),
    "_deliver": (Sender, "the sender's delivery (frame, ack; the server's work)"),
    "sample_once": (Sampler, "the sampler's sample"),
}


@contextmanager
def windows_of(spans: list[tuple[str, float, float]]) -> Iterator[None]:
    """Record (name, start, end) of each sender collection and delivery and each sample."""
    targets = [(cls, name) for name, (cls, _) in WINDOWS.items()]
    originals = [getattr(cls, name) for cls, name in targets]

    def timed(name: str, original: Callable[..., Any]) -> Callable[..., Any]:
        def run(*args: Any, **kwargs: Any) -> Any:
            started = time.perf_counter()
            try:
                return original(*args, **kwargs)
            finally:
                spans.append((name, started, time.perf_counter()))

        return run

    for (cls, name), original in zip(targets, originals, strict=True):
        setattr(cls, name, timed(name, original))
    try:
        yield
    finally:
        for (cls, name), original in zip(targets, originals, strict=True):
            setattr(cls, name, original)


def threads_excess(
    model: Model, seconds: float, server: ServerProcess, after_s: float = 3.0
) -> tuple[float, dict[str, tuple[int, float, float]], float]:
    """One ordinary fit with Stoker: the step (s), and per kind of window (count, ms of wall
    inside them a second, the overlapping steps' excess in µs a step); the server's CPU a
    second over the same span."""
    keras_model = make_model(model, 1)
    steps = fit_steps(keras_model, model, 1, seconds + after_s)
    spans: list[tuple[str, float, float]] = []
    begins = Begins(steps)
    callback = StokerCallback(run_name="bench-threads", server=server.url, sample_interval_s=1.0)
    if server.process is None:
        raise RuntimeError("the server is not running")
    server_process = psutil.Process(server.process.pid)
    with windows_of(spans):
        server_cpu = server_process.cpu_times()
        keras_model.fit(
            callback.wrap(dataset(model, steps)), epochs=1, callbacks=[begins, callback], verbose=0
        )
        server_cpu_after = server_process.cpu_times()
    times = begins.begins[: begins.calls]
    times = times[times >= times[0] + after_s]
    intervals, starts = np.diff(times), times[:-1]
    span_s = starts[-1] - starts[0]
    lookback = max(16, int(0.05 / float(np.median(intervals))))
    kinds = {}
    for kind in WINDOWS:
        inside = excess = 0.0
        count = 0
        for name, start, end in spans:
            if name != kind or start < starts[0] or end > starts[-1]:
                continue
            first = int(np.searchsorted(starts, start, side="right")) - 1
            last = int(np.searchsorted(starts, end, side="right")) - 1
            before = intervals[max(0, first - lookback) : max(1, first - 2)]
            excess += float((intervals[first : last + 1] - np.median(before)).sum())
            inside += end - start
            count += 1
        kinds[kind] = (count, inside / span_s * 1e3, excess / len(intervals) * 1e6)
    server_s = (server_cpu_after.user + server_cpu_after.system) - (
        server_cpu.user + server_cpu.system
    )
    # The server's CPU over the whole fit (its start included): a second of the fit.
    whole_s = begins.begins[begins.calls - 1] - begins.begins[0]
    return float(np.median(intervals)), kinds, server_s / whole_s


def one_process(name: str, seconds: float, server: str, traces: int) -> None:
    """The child's part: one interleaved fit on a fresh model, its figures as a JSON line."""
    fake_nvml(Path(tempfile.mkdtemp(prefix="stoker-bench-")))
    block, base, costs = interleaved_fit(MODELS[name], seconds, server, traces)
    figures = {arm: [c.median_us, c.low_us, c.high_us] for arm, c in costs.items()}
    print(json.dumps({"block": block, "base_s": base, "arms": figures}))


def in_processes(
    name: str, seconds: float, server: str, processes: int, traces: int
) -> list[dict[str, Any]]:
    """`processes` interleaved fits, each in a fresh process: its own model and traces."""
    results = []
    for _ in range(processes):
        command = [sys.executable, "-m", "bench.interleaved", "--one", name]
        command += ["--seconds", str(seconds), "--server", server, "--traces", str(traces)]
        done = subprocess.run(command, capture_output=True, text=True)
        if done.returncode != 0:
            raise RuntimeError(f"an interleaved fit of {name} failed:\n{done.stderr[-3000:]}")
        results.append(json.loads(done.stdout.strip().splitlines()[-1]))
    return results


def report(
    name: str, server: ServerProcess, seconds: float, processes: int, traces: int = TRACES
) -> None:
    model = MODELS[name]
    results = in_processes(name, seconds, server.url, processes, traces)
    base = statistics.median(r["base_s"] for r in results)
    blocks = sorted({r["block"] for r in results})
    print(
        f"\n{model.name}: baseline step {base * 1e3:.3f} ms; {processes} processes (a fresh "
        f"model, {traces} traces of each function), each one {seconds:.0f} s fit in blocks of "
        f"{'/'.join(map(str, blocks))} steps; µs a step paired to the baseline: the median over "
        "processes (their IQR), then each process's median [its 95 % interval]"
    )
    medians = {}
    for arm in results[0]["arms"]:
        values = [r["arms"][arm][0] for r in results]
        medians[arm] = statistics.median(values)
        spread = statistics.quantiles(values, n=4, method="inclusive") if len(values) > 1 else []
        iqr = f" ({spread[0]:+.1f}..{spread[2]:+.1f})" if spread else ""
        each = ", ".join(
            f"{r['arms'][arm][0]:+.1f} [{r['arms'][arm][1]:+.1f}..{r['arms'][arm][2]:+.1f}]"
            for r in results
        )
        print(
            f"  {arm:17} {medians[arm]:+7.1f} "
            f"({medians[arm] / (base * 1e6) * 100:+.2f} %){iqr}: {each}"
        )
    stamps = medians["stoker"] - medians["stoker-unstamped"]
    print(f"  the stamps, first trace (stoker less stoker-unstamped): {stamps:+.1f} µs a step")
    path = medians["stoker"]
    if ACROSS_TRACES in medians:
        path = medians[ACROSS_TRACES]
        plains = [medians[arm] for arm in medians if arm.startswith("baseline-t")]
        print(
            f"  a trace's own speed: the further plain traces read {min(plains):+.1f}.."
            f"{max(plains):+.1f} µs against the first; Stoker's path over all {traces} traces "
            f"(stamped less plain, a group's mean): {path:+.1f} µs, the stamps in it "
            f"{path - medians['stoker-unstamped']:+.1f}"
        )
    step_s, kinds, server_per_s = threads_excess(model, min(seconds, 20.0), server)
    total = 0.0
    for kind, (count, inside_ms, excess_us) in kinds.items():
        total += excess_us
        print(
            f"  {WINDOWS[kind][1]}: {count} windows, {inside_ms:.2f} ms a second inside them; "
            f"the steps overlapping them took {excess_us:+.2f} µs a step more"
        )
    print(
        f"  Stoker in all: the step's path {path:+.1f} + the windows {total:+.1f} = "
        f"{path + total:+.1f} µs a step ({(path + total) / (base * 1e6) * 100:+.2f} % of "
        f"{base * 1e3:.3f} ms); the server's CPU {server_per_s * 1e3:.0f} ms a second (on "
        f"this machine, beside the training: {step_s * 1e3:.3f} ms steps)"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", default="tiny,mlp,wide")
    parser.add_argument("--seconds", type=float, default=30.0, help="each interleaved fit's length")
    parser.add_argument("--processes", type=int, default=6, help="fresh processes per model")
    parser.add_argument(
        "--traces", type=int, default=TRACES, help="traces of each function in a fit"
    )
    parser.add_argument("--one", help=argparse.SUPPRESS)  # a child: one model's fit
    parser.add_argument("--server", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.one:
        one_process(args.one, args.seconds, args.server, args.traces)
        return
    work = Path(tempfile.mkdtemp(prefix="stoker-bench-"))
    fake_nvml(work)
    server = ServerProcess(data_dir=work / "server").start()
    print_load("start")
    try:
        for name in args.models.split(","):
            report(name, server, args.seconds, args.processes, args.traces)
        trainer_agent.flush()  # the last fit's run reaches the server before it stops
    finally:
        server.stop()
    print_load("end")


if __name__ == "__main__":
    main()
