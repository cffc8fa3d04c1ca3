"""How accurate is the measured input wait on Keras 3's JAX backend?

The JAX twin of bench/input_wait_accuracy.py (which imports TensorFlow; this one must run
where TensorFlow is not installed). Same method: truth is (step period of a scenario - step
period of its twin whose batches come at once) / step period of the scenario; measured is
Σ wait / Σ step duration as `StokerCallback` (or `Monitor.iterate`) reports it. Scenario
and twin alternate, `--pairs` per round; the table gives medians over rounds x pairs, the
error the median of the pairs' errors.

The step is GPU-like (tests/harness/gpu_like_jax.py): a `jax.pure_callback` holds it for
`--hold-ms` without the CPU once the batch is there, on the runtime's thread, while Python
dispatches asynchronously. The input's delays sleep. Delays are set from the step period C
measured first: a source that delivers a batch every C / (1 - w) makes the step wait a
share w.

Usage: KERAS_BACKEND=jax .venv/jax/bin/python -m bench.input_wait_accuracy_jax
       [--steps 40] [--pairs 3] [--rounds 2] [--hold-ms 20] [--only NAME]
"""

import argparse
import os
import statistics
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

os.environ["KERAS_BACKEND"] = "jax"
os.environ.setdefault("STOKER_SPOOL_DIR", "off")  # no server here: keep nothing on disk

import jax
import jax.numpy as jnp
import numpy as np

from bench.capturing import CapturingCallback, CapturingMonitor
from tests.harness.gpu_like_jax import Batches, generator, held_model
from trainer_agent.capture.input_wait import StepRow

BATCH = 32
FEATURES = 64
TARGET_PP = 5.0


@dataclass
class Scenario:
    name: str
    wait_share: float
    kind: str = "threads"  # threads | sequential | generator | monitor
    workers: int = 4
    steps_per_execution: int = 1
    epochs: int = 1


SCENARIOS = [
    Scenario("arrays in memory (fed)", 0.0, kind="arrays"),
    Scenario("PyDataset 4 threads, ~60 %", 0.6),
    Scenario("PyDataset 4 threads, ~80 %", 0.8),
    Scenario("PyDataset 4 threads, ~12 %", 0.12),
    Scenario("PyDataset 4 threads, hides 2 C", 0.0, kind="hidden"),
    Scenario("PyDataset in the loop, ~50 %", 0.5, kind="sequential"),
    Scenario("generator, ~50 %", 0.5, kind="generator"),
    Scenario("steps_per_execution 4, threads ~50 %", 0.5, steps_per_execution=4),
    Scenario("3 epochs, threads ~40 %", 0.4, epochs=3),
    Scenario("plain JAX loop, Monitor.iterate, ~60 %", 0.6, kind="monitor"),
]


def source_delay_s(scenario: Scenario, compute_s: float) -> float:
    """The sleep per batch that makes the source deliver one every C / (1 - w)."""
    if scenario.kind == "hidden":
        return 2 * compute_s * scenario.workers / 4  # 4 threads deliver at 2x the step's rate
    if not scenario.wait_share or scenario.kind == "arrays":
        return 0.0
    period = compute_s / (1 - scenario.wait_share)
    return period * (scenario.workers if scenario.kind in ("threads",) else 1)


def run_once(scenario: Scenario, model: Any, x: np.ndarray, delay_s: float) -> list[StepRow]:
    if scenario.kind == "monitor":
        return run_loop(x, delay_s, model.hold_s)
    callback = CapturingCallback()
    fit: dict[str, Any] = {"epochs": scenario.epochs, "callbacks": [callback], "verbose": 0}
    if scenario.kind == "arrays":
        model.fit(x, x[:, :1], batch_size=BATCH, shuffle=False, **fit)
    elif scenario.kind == "generator":
        model.fit(generator(x, BATCH, delay_s, scenario.epochs),
                  steps_per_epoch=len(x) // BATCH, **fit)  # fmt: skip
    else:
        workers = 1 if scenario.kind == "sequential" else scenario.workers
        model.fit(Batches(x, BATCH, delay_s, workers=workers), **fit)
    return [r for r in callback.rows if r.wait is not None and r.step >= 1]


_LOOP_STEPS: dict[float, Callable[..., Any]] = {}


def run_loop(x: np.ndarray, delay_s: float, hold_s: float) -> list[StepRow]:
    """A plain JAX training loop (no Keras) whose step holds like a device."""
    if hold_s not in _LOOP_STEPS:
        import time

        def hold(first: np.ndarray) -> np.ndarray:
            time.sleep(hold_s)
            return np.zeros((), np.float32)

        @jax.jit
        def step(w: jax.Array, xb: jax.Array, yb: jax.Array) -> tuple[jax.Array, jax.Array]:
            held = jax.pure_callback(hold, jax.ShapeDtypeStruct((), jnp.float32), xb[0, 0])
            xb = xb + jax.lax.stop_gradient(held)
            loss, grad = jax.value_and_grad(lambda w: jnp.mean((xb @ w - yb) ** 2))(w)
            return w - 0.01 * grad, loss

        _LOOP_STEPS[hold_s] = step
    step = _LOOP_STEPS[hold_s]
    monitor = CapturingMonitor(start=True)
    w = jnp.zeros((FEATURES, 1))
    for xb, yb in monitor.iterate(generator(x, BATCH, delay_s)):
        w, loss = step(w, xb, yb)
        monitor.log(loss=loss)
    jax.block_until_ready(w)
    monitor.close()
    return [r for r in monitor.rows if r.step >= 1]


def period_s(rows: list[StepRow]) -> float:
    return sum(r.dur for r in rows) / len(rows)


def wait_share(rows: list[StepRow]) -> float:
    return sum(r.wait or 0.0 for r in rows) / sum(r.dur for r in rows)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=40, help="steps per epoch")
    parser.add_argument("--pairs", type=int, default=3)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--hold-ms", type=float, default=20.0)
    parser.add_argument("--only", default="")
    parser.add_argument(
        "--matmul", type=int, default=0,
        help="N > 0: the step is real XLA work (N x N products), dispatched asynchronously",
    )  # fmt: skip
    args = parser.parse_args()
    hold_s = args.hold_ms / 1e3
    x = np.random.default_rng(0).normal(size=(args.steps * BATCH, FEATURES)).astype("float32")
    scenarios = [s for s in SCENARIOS if args.only in s.name]
    if args.matmul:  # the plain loop's step is the sleeping hold
        scenarios = [s for s in scenarios if s.kind != "monitor"]
    models: dict[int, Any] = {}
    compute: dict[int, float] = {}
    fed = Scenario("compute only", 0.0, kind="arrays")
    for spe in sorted({s.steps_per_execution for s in scenarios}):
        models[spe] = held_model(FEATURES, hold_s, steps_per_execution=spe, matmul=args.matmul)
        models[spe].hold_s = hold_s
        for _ in range(2):
            run_once(fed, models[spe], x, 0.0)
        compute[spe] = statistics.median(period_s(run_once(fed, models[spe], x, 0.0))
                                         for _ in range(3))  # fmt: skip
    device = f"XLA work {args.matmul}²" if args.matmul else f"device hold {args.hold_ms:.0f} ms"
    print(f"Keras 3 on JAX {jax.__version__} ({jax.default_backend()}), {device}; "
          f"load average {os.getloadavg()[0]:.2f}")  # fmt: skip
    for spe, c in compute.items():
        print(f"fed step period C (steps_per_execution {spe}): {c * 1e3:.1f} ms")
    print(f"{'scenario':42} {'period ms':>10} {'twin ms':>8} {'truth %':>8} "
          f"{'measured %':>11} {'error pp':>9}")  # fmt: skip
    errors = []
    for scenario in scenarios:
        model, c = models[scenario.steps_per_execution], compute[scenario.steps_per_execution]
        delay_s = source_delay_s(scenario, c)
        periods, twins, truths, shares = [], [], [], []
        for _ in range(args.rounds * args.pairs):
            rows = run_once(scenario, model, x, delay_s)
            twin = run_once(scenario, model, x, 0.0)
            period, twin_period = period_s(rows), period_s(twin)
            periods.append(period)
            twins.append(twin_period)
            truths.append((period - twin_period) / period)
            shares.append(wait_share(rows))
        error = statistics.median(m - t for m, t in zip(shares, truths, strict=True)) * 100
        errors.append(abs(error))
        print(f"{scenario.name:42} {statistics.median(periods) * 1e3:10.1f} "
              f"{statistics.median(twins) * 1e3:8.1f} {statistics.median(truths) * 100:8.1f} "
              f"{statistics.median(shares) * 100:11.1f} {error:+9.1f}", flush=True)  # fmt: skip
    print(f"max |error|: {max(errors):.1f} pp (target ≤ {TARGET_PP:.0f} pp); "
          f"median {statistics.median(errors):.1f} pp")  # fmt: skip


if __name__ == "__main__":
    main()
