"""How accurate is the measured input wait on Keras 3's PyTorch backend?

The method of bench/input_wait_accuracy.py: truth is (step period of a scenario - step
period of the same source with no delay) / step period of the scenario; measured is Σ wait /
Σ step duration as `StokerCallback` (or `Monitor.iterate`) reports it, each pair judged on its
own, medians over `--pairs`. The step holds `--hold-ms` in a layer that sleeps (PyTorch on
the CPU runs each step on the training thread; the sleep leaves the CPU to the input's
threads, as a GPU would). Under PyTorch Keras's epoch iterator fetches each batch before
`on_train_batch_begin`: the agent measures the wait from the step's return to the next
batch-begin. Also checks that each fit is stored with Keras's batch count.

PyTorch from the package registry pulls its CUDA libraries (5.4 GB, 8 min to install here),
so it is not in `make test`. In a venv with torch, keras==3.15.1 and this repository
(`pip install -e .`): python -m bench.input_wait_accuracy_torch [--pairs 3] [--hold-ms 20]
"""

import argparse
import os
import statistics
import time
from collections.abc import Callable, Iterator
from typing import Any

os.environ["KERAS_BACKEND"] = "torch"
os.environ.setdefault("STOKER_SPOOL_DIR", "off")  # no server here: keep nothing on disk

import keras
import numpy as np
import torch

from bench.capturing import CapturingCallback, CapturingMonitor
from trainer_agent.capture.input_wait import StepRow

BATCH, FEATURES, STEPS = 32, 16, 40


class Hold(keras.layers.Layer):
    def __init__(self, hold_s: float, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.hold_s = hold_s

    def call(self, x: Any) -> Any:
        time.sleep(self.hold_s)
        return x


class Batches(keras.utils.PyDataset):
    def __init__(self, x: np.ndarray, delay_s: float, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.x, self.delay_s = x, delay_s

    def __len__(self) -> int:
        return len(self.x) // BATCH

    def __getitem__(self, i: int) -> tuple[np.ndarray, np.ndarray]:
        time.sleep(self.delay_s)
        b = self.x[i * BATCH : (i + 1) * BATCH]
        return b, b[:, :1]


class Slow(torch.utils.data.Dataset):
    def __init__(self, x: np.ndarray, delay_s: float) -> None:
        self.x, self.delay_s = torch.from_numpy(x), delay_s

    def __len__(self) -> int:
        return len(self.x) // BATCH

    def __getitem__(self, i: int) -> tuple[torch.Tensor, torch.Tensor]:
        time.sleep(self.delay_s)
        b = self.x[i * BATCH : (i + 1) * BATCH]
        return b, b[:, :1]


def generate(x: np.ndarray, delay_s: float) -> Iterator[tuple[np.ndarray, np.ndarray]]:
    for i in range(len(x) // BATCH):
        time.sleep(delay_s)
        b = x[i * BATCH : (i + 1) * BATCH]
        yield b, b[:, :1]


def loader(x: np.ndarray, delay_s: float) -> Any:
    # batch_size=None: each item is a batch; 2 worker threads would need processes, so 0.
    return torch.utils.data.DataLoader(Slow(x, delay_s), batch_size=None)


class Count(keras.callbacks.Callback):
    def on_train_begin(self, logs: Any = None) -> None:
        self.batches = 0

    def on_train_batch_begin(self, batch: int, logs: Any = None) -> None:
        self.batches += 1


def fit(model: Any, data: Any, **kwargs: Any) -> list[StepRow]:
    callback, count = CapturingCallback(), Count()
    model.fit(data, callbacks=[callback, count], verbose=0, **kwargs)
    if len(callback.rows) != count.batches:
        raise SystemExit(f"stored {len(callback.rows)} steps of {count.batches} batches")
    return [r for r in callback.rows if r.wait is not None and r.step >= 1]


def loop(model: Any, data: Any) -> list[StepRow]:
    """A plain PyTorch loop under Monitor.iterate (Keras's layers, torch's optimizer)."""
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    monitor = CapturingMonitor(start=True)
    for xb, yb in monitor.iterate(data):
        optimizer.zero_grad()
        loss = torch.mean((model(torch.as_tensor(xb)) - torch.as_tensor(yb)) ** 2)
        loss.backward()
        optimizer.step()
        monitor.log(loss=loss)
    monitor.close()
    return [r for r in monitor.rows if r.step >= 1]


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--pairs", type=int, default=3)
    parser.add_argument("--hold-ms", type=float, default=20.0)
    args = parser.parse_args()
    model = keras.Sequential([keras.Input((FEATURES,)), Hold(args.hold_ms / 1e3),
                              keras.layers.Dense(1)])  # fmt: skip
    model.compile(optimizer="sgd", loss="mse")
    x = np.random.default_rng(0).normal(size=(STEPS * BATCH, FEATURES)).astype("float32")

    def period(rows: list[StepRow]) -> float:
        return sum(r.dur for r in rows) / len(rows)

    fit(model, x, y=x[:, :1], batch_size=BATCH)  # builds, warms up
    rows = fit(model, x, y=x[:, :1], batch_size=BATCH, epochs=2)
    compute = period(rows)
    print(f"Keras {keras.__version__} on torch {torch.__version__}; fed step period C "
          f"{compute * 1e3:.1f} ms (arrays, 2 epochs: every fit stored with Keras's batch "
          f"count); load average {os.getloadavg()[0]:.2f}")  # fmt: skip
    # A serial source that takes C per batch makes a step wait half its period; four threads
    # that take 4 x 2.5 C deliver a batch every 2.5 C: 60 %.
    scenarios: list[tuple[str, Callable[[float], list[StepRow]], float]] = [
        ("PyDataset 4 threads, ~60 %", lambda d: fit(model, Batches(x, 4 * d, workers=4)),
         2.5 * compute),
        ("PyDataset in the loop, ~50 %", lambda d: fit(model, Batches(x, d)), compute),
        ("generator, ~50 %", lambda d: fit(model, generate(x, d)), compute),
        ("DataLoader, ~50 %", lambda d: fit(model, loader(x, d)), compute),
        ("plain PyTorch loop, Monitor.iterate, ~50 %", lambda d: loop(model, loader(x, d)),
         compute),
    ]  # fmt: skip
    print(f"{'scenario':44} {'period ms':>10} {'twin ms':>8} {'truth %':>8} "
          f"{'measured %':>11} {'error pp':>9}")  # fmt: skip
    errors = []
    for name, run, delay_s in scenarios:
        periods, twins, truths, shares = [], [], [], []
        for _ in range(args.pairs):
            rows, twin = run(delay_s), run(0.0)
            periods.append(period(rows))
            twins.append(period(twin))
            truths.append((period(rows) - period(twin)) / period(rows))
            shares.append(sum(r.wait or 0.0 for r in rows) / sum(r.dur for r in rows))
        error = statistics.median(m - t for m, t in zip(shares, truths, strict=True)) * 100
        errors.append(abs(error))
        print(f"{name:44} {statistics.median(periods) * 1e3:10.1f} "
              f"{statistics.median(twins) * 1e3:8.1f} {statistics.median(truths) * 100:8.1f} "
              f"{statistics.median(shares) * 100:11.1f} {error:+9.1f}", flush=True)  # fmt: skip
    print(f"max |error|: {max(errors):.1f} pp (target ≤ 5 pp)")


if __name__ == "__main__":
    main()
