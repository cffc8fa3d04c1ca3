"""`stoker demo`: a real server and a real Keras training streaming into it.

The demo trains the same small model twice on a learnable synthetic task: once behind a
pipeline fed properly (parallel map, cache, prefetch), then behind a slow, serial input
pipeline (the GPU, or here the CPU, starves), so the two runs can be watched and compared.
Both datasets go through `cb.wrap`, so input wait is measured; the starved run gets the
highly input-bound verdict, its advice and an alert, the fed one does not. The starved run
stays live for a few minutes (or until Ctrl-C) so that it can be watched, and its alert
captures a profile of its steps by itself (the demo rule's action). The data, the model and
both pipelines are in demo_pipelines.py, which also runs the starved one as a plain script for
`stoker tune`.
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
# `stoker tune` on the starved pipeline, as a script of its own (demo_pipelines.py).
TUNE_COMMAND = "stoker tune --steps 200 -- python -m stoker_server.cli.demo_pipelines starved"


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
        rules = httpx.get(f"{server_url}/api/v1/alert-rules", timeout=5).json()["data"]
        known = next((r for r in rules if r["name"] == DEMO_RULE["name"]), None)
        if known is None:
            httpx.post(f"{server_url}/api/v1/alert-rules", json=DEMO_RULE, timeout=5)
        elif not known.get("profile_steps"):  # made by a demo from before the profile action
            url = f"{server_url}/api/v1/alert-rules/{known['id']}"
            httpx.patch(url, json={"profile_steps": DEMO_RULE["profile_steps"]}, timeout=5)
    except (httpx.HTTPError, KeyError, ValueError) as error:
        print(f"  (could not create the demo alert rule: {error})", flush=True)


def wait_until_ended(server_url: str, run_id: int, *, timeout_s: float = 60.0) -> bool:
    """Wait until the server has stored the run's end (the agent delivers it after fit()
    returns, in the background). An ended run's diagnosis is judged on its stored steps, so
    from then on it is final."""
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            run = httpx.get(f"{server_url}/api/v1/runs/{run_id}", timeout=10).json()
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
        diagnosis = httpx.get(f"{server_url}/api/v1/runs/{run_id}/diagnosis", timeout=10).json()
        alerts = httpx.get(
            f"{server_url}/api/v1/alerts", params={"run_id": run_id}, timeout=10
        ).json()["data"]
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
    import tensorflow as tf

    from stoker_server.cli import demo_pipelines
    from trainer_agent import StokerCallback

    validation = demo_pipelines.validation()
    fed, starved = demo_pipelines.fed, demo_pipelines.starved

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
        model = demo_pipelines.model()
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
        if name == "starved-pipeline":
            print(f"  Measure that advice before editing a line:\n    {TUNE_COMMAND}\n", flush=True)


def _last_run_id(server_url: str, name: str) -> int | None:
    try:
        runs = httpx.get(f"{server_url}/api/v1/runs", timeout=10).json()["data"]
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
    server = start_server(settings)
    print(f"\n  Stoker is running. Open {url}/ in your browser.\n", flush=True)
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
