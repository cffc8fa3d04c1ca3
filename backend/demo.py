"""`stoker demo`: a real server and a real Keras training streaming into it.

The demo trains the same small model twice on a learnable synthetic task: once behind
a slow, serial input pipeline (the GPU, or here the CPU, starves), once behind a pipeline
fed properly (parallel map, cache, prefetch), so the two runs can be watched and compared.
"""

import os
import subprocess
import sys
import time

import httpx

from backend.settings import Settings


def _healthy(url: str) -> bool:
    try:
        return httpx.get(f"{url}/healthz", timeout=1.0).status_code == 200
    except httpx.HTTPError:
        return False


def start_server(settings: Settings) -> subprocess.Popen[bytes] | None:
    """Start `stoker serve` in a child process, or reuse a server already answering there."""
    url = f"http://{settings.host}:{settings.port}"
    if _healthy(url):
        print(f"Using the Stoker server already running at {url}", flush=True)
        return None
    command = [
        sys.executable, "-m", "backend.cli", "serve",
        "--host", settings.host, "--port", str(settings.port),
        "--data-dir", str(settings.data_dir),
    ]  # fmt: skip
    if settings.database_url:
        command += ["--database-url", settings.database_url]
    server = subprocess.Popen(command)
    deadline = time.monotonic() + 60
    while not _healthy(url):
        if server.poll() is not None or time.monotonic() > deadline:
            server.kill()
            raise SystemExit(f"the Stoker server did not start on {url}")
        time.sleep(0.2)
    return server


def train_demo_runs(server_url: str, *, epochs: int) -> None:
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    import numpy as np
    import tensorflow as tf

    from trainer_agent import StokerCallback

    rng = np.random.default_rng(0)
    samples, features, classes = 4096, 64, 4
    centers = rng.normal(size=(classes, features)).astype("float32")
    labels = rng.integers(0, classes, size=samples)
    inputs = (centers[labels] + rng.normal(scale=1.5, size=(samples, features))).astype("float32")

    def slow_decode(x: tf.Tensor, y: tf.Tensor) -> tuple[tf.Tensor, tf.Tensor]:
        # Stands in for costly per-example decoding/augmentation on the host CPU.
        def work(v: np.ndarray) -> np.ndarray:
            time.sleep(0.0008)
            return v

        x = tf.numpy_function(work, [x], tf.float32)
        x.set_shape([features])
        return x, y

    def starved() -> tf.data.Dataset:
        ds = tf.data.Dataset.from_tensor_slices((inputs, labels)).shuffle(samples)
        return ds.map(slow_decode).batch(64)

    def fed() -> tf.data.Dataset:
        ds = tf.data.Dataset.from_tensor_slices((inputs, labels))
        ds = ds.map(slow_decode, num_parallel_calls=tf.data.AUTOTUNE).cache()
        return ds.shuffle(samples).batch(64).prefetch(tf.data.AUTOTUNE)

    for name, make_dataset in (("starved-pipeline", starved), ("fed-pipeline", fed)):
        model = tf.keras.Sequential(
            [
                tf.keras.Input(shape=(features,)),
                tf.keras.layers.Dense(256, activation="relu"),
                tf.keras.layers.Dense(256, activation="relu"),
                tf.keras.layers.Dense(classes),
            ]
        )
        model.compile(
            optimizer="adam",
            loss=tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True),
            metrics=["accuracy"],
        )
        callback = StokerCallback(
            run_name=name,
            project="stoker-demo",
            server=server_url,
            config={"batch_size": 64, "pipeline": name.split("-")[0], "epochs": epochs},
            tags=["demo"],
        )
        print(f"Training {name} ...", flush=True)
        model.fit(make_dataset(), epochs=epochs, callbacks=[callback], verbose=2)


def run_demo(settings: Settings, *, epochs: int, keep_serving: bool) -> int:
    url = f"http://{settings.host}:{settings.port}"
    server = start_server(settings)
    print(f"\n  Stoker is running. Open {url}/ in your browser.\n", flush=True)
    try:
        train_demo_runs(url, epochs=epochs)
        print(f"\n  Demo training finished. Runs are at {url}/", flush=True)
        if keep_serving and server is not None:
            print("  The server keeps running; press Ctrl-C to stop it.", flush=True)
            server.wait()
    except KeyboardInterrupt:
        pass
    finally:
        if server is not None and server.poll() is None:
            server.terminate()
            server.wait(timeout=10)
    return 0
