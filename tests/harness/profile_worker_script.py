"""A Keras fit on the CPU monitored by Stoker, in its own process, until a file appears.

For the profiler-capture tests that need a training process of their own (it exits while its trace
waits in the spool) or several (two workers of one run: the same `STOKER_RUN_KEY`, each its
own `STOKER_RANK`). Prints the run's id once the server welcomed it.

    python -m tests.harness.profile_worker_script --server URL --stop-file PATH [--name NAME]
        [--fault profile_start]
"""

import argparse
import os
import sys
from pathlib import Path
from typing import Any

import numpy as np

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import tensorflow as tf

from tests.harness import faults
from tests.harness.gpu_like import held_model
from trainer_agent import StokerCallback

FEATURES = 8
HOLD_S = 0.005


class StopOnFile(tf.keras.callbacks.Callback):
    def __init__(self, path: Path, callback: StokerCallback) -> None:
        super().__init__()
        self.path = path
        self.callback = callback
        self.announced = False

    def on_train_batch_end(self, batch: int, logs: Any = None) -> None:
        session = self.callback.run_session
        if not self.announced and session is not None and session.sender.run_id is not None:
            self.announced = True
            print(f"run_id {session.sender.run_id}", flush=True)
        if self.path.exists():
            self.model.stop_training = True


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--server", required=True)
    parser.add_argument("--stop-file", type=Path, required=True)
    parser.add_argument("--name", default="profiled")
    parser.add_argument("--fault", choices=[faults.PROFILE_START], help="(tests/harness/faults.py)")
    args = parser.parse_args()
    if args.fault:
        faults.install(args.fault)
    x = np.random.default_rng(0).random((256, FEATURES), dtype=np.float32)
    y = np.random.default_rng(1).random((256, 1), dtype=np.float32)
    data = tf.data.Dataset.from_tensor_slices((x, y)).batch(16).repeat()
    callback = StokerCallback(run_name=args.name, server=args.server)
    model = held_model(FEATURES, HOLD_S)
    model.fit(
        callback.wrap(data), epochs=1, steps_per_epoch=1_000_000, verbose=0,
        callbacks=[callback, StopOnFile(args.stop_file, callback)],
    )  # fmt: skip
    print("fit ended", flush=True)
    sys.stdout.flush()


if __name__ == "__main__":
    main()
