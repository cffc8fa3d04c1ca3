"""What does an occasional sync cost a JAX loop? (step times under async dispatch)

`Monitor.log` converts the scalars of every `every_n_batches`-th step (default 50): a sync,
which stops Python from running ahead of the device. This times 200 steps of a small XLA step
(two 256² products, ~2 ms on a CPU) with no sync until the end, a sync every 50 steps and a
sync every step; medians over `--rounds`, the three interleaved.

Usage: .venv/jax/bin/python -m bench.jax_sync_cost [--rounds 7] [--size 256]
"""

import argparse
import statistics
import time

import jax
import jax.numpy as jnp
import numpy as np


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--size", type=int, default=256)
    parser.add_argument("--steps", type=int, default=200)
    args = parser.parse_args()
    rng = np.random.default_rng(0)
    a = jnp.asarray(rng.normal(size=(args.size, args.size)).astype("float32") / args.size)

    @jax.jit
    def step(w: jax.Array) -> tuple[jax.Array, jax.Array]:
        for _ in range(2):
            w = jnp.tanh(w @ a)
        return w, jnp.mean(w)

    state = [jnp.ones((args.size, args.size))]
    step(state[0])[0].block_until_ready()

    def run(every: int) -> float:
        w = state[0]
        began = time.perf_counter()
        for i in range(args.steps):
            w, loss = step(w)
            if every and i % every == every - 1:
                float(loss)  # what Monitor.log does on its n-th step
        w.block_until_ready()
        state[0] = w
        return (time.perf_counter() - began) / args.steps

    results: dict[int, list[float]] = {0: [], 50: [], 1: []}
    for _ in range(args.rounds):
        for every, times in results.items():
            times.append(run(every))
    base = statistics.median(results[0])
    print(f"JAX {jax.__version__} ({jax.default_backend()}), {args.size}² step")
    for every, times in results.items():
        ms = statistics.median(times) * 1e3
        label = "never (one at the end)" if every == 0 else f"every {every} steps"
        print(f"sync {label:24} {ms:7.3f} ms/step  {ms / (base * 1e3):5.2f}x")


if __name__ == "__main__":
    main()
