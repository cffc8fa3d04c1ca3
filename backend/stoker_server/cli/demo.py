"""`stoker demo`: a real server and a real Keras training streaming into it.

The demo trains the same small model twice on a learnable synthetic task: once behind a
pipeline fed properly (parallel map, cache, prefetch), then behind a slow, serial input
pipeline (the GPU, or here the CPU, starves), so the two runs can be watched and compared.
Both datasets go through `cb.wrap`, so input wait is measured; the starved run gets the
highly input-bound verdict, its advice and an alert, the fed one does not. The starved run
stays live for a few minutes (or until Ctrl-C) so that it can be watched, and its alert
captures a profile of its steps by itself (the demo rule's action).
"""

import os
import subprocess
import sys
import time
from typing import Any

import httpx

from stoker_server.core.settings import Settings


def _healthy(url: str) -> bool:
    try:
        return httpx.get(f"{url}/healthz", timeout=1.0).status_code == 200
    except httpx.HTTPError:
        return False


# The demo's REST calls (its alert rule, the runs' verdicts): the admin token when the server
# needs one (use_tokens).
_HEADERS: dict[str, str] = {}


def use_tokens(settings: Settings) -> str:
    """Hand the demo's training (the agent) and its REST calls the tokens the server needs:
    those set in the environment, or made for a server bound beyond loopback. Returns what
    the UI's URL needs after it (`?token=<viewer token>`, or nothing)."""
    from urllib.parse import quote

    from stoker_server.core.auth import Role, tokens_in_clear

    tokens = tokens_in_clear(settings)
    if Role.agent in tokens:
        os.environ["STOKER_AGENT_TOKEN"] = tokens[Role.agent]
    reader = tokens.get(Role.admin) or tokens.get(Role.viewer)
    if reader:
        _HEADERS["Authorization"] = f"Bearer {reader}"
    viewer = tokens.get(Role.viewer)
    return f"?token={quote(viewer, safe='')}" if viewer else ""


def _api(method: str, server_url: str, path: str, **options: Any) -> httpx.Response:
    return httpx.request(method, f"{server_url}/api/v1{path}", headers=_HEADERS, **options)


def start_server(settings: Settings) -> subprocess.Popen[bytes] | None:
    """Start `stoker serve` in a child process, or reuse a server already answering there."""
    url = f"http://{settings.host}:{settings.port}"
    if _healthy(url):
        print(f"Using the Stoker server already running at {url}", flush=True)
        return None
    command = [
        sys.executable, "-m", "stoker_server.cli.main", "serve",
        "--host", settings.host, "--port", str(settings.port),
        "--data-dir", str(settings.data_dir),
    ]  # fmt: skip
    if settings.database_url:
        command += ["--database-url", settings.database_url]
    if settings.no_auth:
        command += ["--no-auth"]
    server = subprocess.Popen(command)
    deadline = time.monotonic() + 60
    while not _healthy(url):
        if server.poll() is not None or time.monotonic() > deadline:
            server.kill()
            raise SystemExit(f"the Stoker server did not start on {url}")
        time.sleep(0.2)
    return server


DEMO_PROJECT = "stoker-demo"
DEMO_RULE = {
    "name": "Demo: input-bound for 5 s",
    "metric": "input_wait_share",
    "comparison": ">=",
    "threshold": 0.2,
    "for_s": 5.0,
    "keep_firing_for_s": 2.0,
    "only_while_stepping": True,
    "scope": "project",
    "project": DEMO_PROJECT,
    # When it fires, the agent captures this many steps of TensorFlow profile: no click.
    "profile_steps": 20,
}
DEFAULT_LIVE_MINUTES = 3.0


def nvidia_driver_status() -> str | None:
    """None when NVML loads (an NVIDIA driver is present), else why it does not."""
    try:
        import pynvml

        pynvml.nvmlInit()
        pynvml.nvmlShutdown()
        return None
    except Exception as error:  # NVMLError_LibraryNotFound, DriverNotLoaded, ImportError...
        return str(error) or type(error).__name__


def ensure_demo_rule(server_url: str) -> None:
    """A short alert rule scoped to the demo project, so an alert shows within the demo.
    The default rules (60 s input-bound, 30 s low utilization) are longer than a demo run."""
    try:
        rules = _api("GET", server_url, "/alert-rules", timeout=5).json()["data"]
        known = next((r for r in rules if r["name"] == DEMO_RULE["name"]), None)
        if known is None:
            _api("POST", server_url, "/alert-rules", json=DEMO_RULE, timeout=5)
        elif not known.get("profile_steps"):  # made by a demo from before the profile action
            patch = {"profile_steps": DEMO_RULE["profile_steps"]}
            _api("PATCH", server_url, f"/alert-rules/{known['id']}", json=patch, timeout=5)
    except (httpx.HTTPError, KeyError, ValueError) as error:
        print(f"  (could not create the demo alert rule: {error})", flush=True)


def wait_until_ended(server_url: str, run_id: int, *, timeout_s: float = 60.0) -> bool:
    """Wait until the server has stored the run's end (the agent delivers it after fit()
    returns, in the background). An ended run's diagnosis is judged on its stored steps, so
    from then on it is final."""
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            run = _api("GET", server_url, f"/runs/{run_id}", timeout=10).json()
            if run.get("status") != "running":
                return True
        except (httpx.HTTPError, ValueError):
            pass
        if time.monotonic() > deadline:
            return False
        time.sleep(0.2)


def report_run(server_url: str, run_id: int | None) -> None:
    """Print the run's final verdict, its evidence and advice, and its alerts."""
    if run_id is None:
        return
    if not wait_until_ended(server_url, run_id):
        print("  (the run's end has not reached the server yet: this verdict may change)")
    try:
        diagnosis = _api("GET", server_url, f"/runs/{run_id}/diagnosis", timeout=10).json()
        query = {"run_id": run_id}
        alerts = _api("GET", server_url, "/alerts", params=query, timeout=10).json()["data"]
    except (httpx.HTTPError, KeyError, ValueError) as error:
        print(f"  (could not read the diagnosis: {error})", flush=True)
        return
    share = diagnosis.get("input_wait_share")
    figure = "" if share is None else f", input wait {share * 100:.1f} %"
    if diagnosis.get("source") == "fallback":
        figure += ", inferred: input wait not measured"
    words = diagnosis.get("verdict_label") or diagnosis["verdict"]
    print(f"\n  Verdict: {words} ({diagnosis.get('window_label', '')}{figure})", flush=True)
    for item in diagnosis["evidence"]:
        print(f"    - {item['text']}")
    for line in diagnosis["advice"]:
        print(f"    > {line}")
    fired = [a for a in alerts if a["fired_at"]]
    for alert in fired:
        print(f"  Alert: {alert['message']}")
        if alert.get("profile_id"):
            print(f"    Profile #{alert['profile_id']} was captured when it fired (Run page).")
    if not fired:
        print("  No alert fired for this run.")
    print(f"  Run page: {server_url}/#/runs/{run_id}\n", flush=True)


def train_demo_runs(server_url: str, *, epochs: int, live_s: float = 0.0) -> None:
    """The fed run for `epochs` epochs, then the starved one: `epochs` epochs too, or, with
    `live_s`, for that many seconds (until Ctrl-C), so that it can be watched live."""
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    import numpy as np
    import tensorflow as tf

    from trainer_agent import StokerCallback

    rng = np.random.default_rng(0)
    samples, held_out, features, classes = 4096, 512, 64, 4
    centers = rng.normal(size=(classes, features)).astype("float32")
    all_labels = rng.integers(0, classes, size=samples + held_out)
    noise = rng.normal(scale=5.0, size=(samples + held_out, features))  # not trivially separable
    all_inputs = (centers[all_labels] + noise).astype("float32")
    inputs, labels = all_inputs[:samples], all_labels[:samples]
    # Held out for validation: val_loss and val_accuracy are what runs are compared by.
    validation = tf.data.Dataset.from_tensor_slices(
        (all_inputs[samples:], all_labels[samples:])
    ).batch(256)

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

    class StopAt(tf.keras.callbacks.Callback):
        """Ends the live run once its time is up."""

        def __init__(self, deadline: float) -> None:
            super().__init__()
            self.deadline = deadline

        def on_train_batch_end(self, batch: int, logs: Any = None) -> None:
            if time.monotonic() >= self.deadline:
                self.model.stop_training = True

    for name, make_dataset in (("fed-pipeline", fed), ("starved-pipeline", starved)):
        live = live_s > 0 and name == "starved-pipeline"
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
        # The callback lets go of its run session when fit() ends; its sender knows the run id.
        kept: dict[str, Any] = {}
        keep = tf.keras.callbacks.LambdaCallback(
            on_train_begin=lambda logs, kept=kept, cb=callback: kept.update(session=cb.run_session)
        )
        callbacks: list[Any] = [callback, keep]
        run_epochs = epochs
        if live:
            callbacks.append(StopAt(time.monotonic() + live_s))
            run_epochs = 1_000_000  # until its time is up (or Ctrl-C)
            until = time.strftime("%H:%M:%S", time.localtime(time.time() + live_s))
            print(
                f"\n  Training {name}, live for {live_s / 60:g} minutes (until {until}) or until "
                f"Ctrl-C.\n  Watch it at {server_url}/ : it starves on its input, its alert "
                "fires within a minute and captures a 20-step profile by itself.\n",
                flush=True,
            )
        else:
            print(f"Training {name} ...", flush=True)
        model.fit(
            callback.wrap(make_dataset()),
            validation_data=validation,
            epochs=run_epochs,
            callbacks=callbacks,
            verbose=0 if live else 2,
        )
        run_id = getattr(getattr(kept.get("session"), "sender", None), "run_id", None)
        report_run(server_url, run_id or _last_run_id(server_url, name))


def _last_run_id(server_url: str, name: str) -> int | None:
    try:
        runs = _api("GET", server_url, "/runs", timeout=10).json()["data"]
    except (httpx.HTTPError, KeyError, ValueError):
        return None
    return next((r["id"] for r in runs if r["name"] == name), None)


def run_demo(
    settings: Settings,
    *,
    epochs: int,
    keep_serving: bool,
    live_minutes: float = DEFAULT_LIVE_MINUTES,
) -> int:
    url = f"http://{settings.host}:{settings.port}"
    with_token = use_tokens(settings)
    server = start_server(settings)
    print(f"\n  Stoker is running. Open {url}/{with_token} in your browser.\n", flush=True)
    no_driver = nvidia_driver_status()
    if no_driver is not None:
        print(
            "  No NVIDIA driver was found (NVML: "
            f"{no_driver}), so the GPU panels (utilization, memory, temperature) stay "
            "empty and the model trains on the CPU. Step time and input wait are measured "
            "all the same, and the diagnosis works from them.\n",
            flush=True,
        )
    ensure_demo_rule(url)
    try:
        train_demo_runs(url, epochs=epochs, live_s=max(0.0, live_minutes) * 60)
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
