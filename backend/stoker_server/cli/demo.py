"""`stoker demo`: a real server and a real Keras training streaming into it.

The demo trains the same small model twice on a learnable synthetic task: once behind a
pipeline fed properly (decoded in parallel into a cache before training, prefetched), then
behind a slow, serial input pipeline (the GPU, or here the CPU, starves), so the two runs can
be watched and compared.
Both datasets go through `cb.wrap`, so input wait is measured; the starved run gets the
highly input-bound verdict, its advice and an alert, the fed one does not. The starved run
stays live for a few minutes (or until Ctrl-C) so that it can be watched, and its alert
captures a profile of its steps by itself (the demo rule's action).

It starts on a clean slate: its own server on a fresh data directory, so that no other run
(an earlier demo's, the user's own in ~/.stoker) shows beside its two or fires an alert among
them, unless asked for (`--data-dir`, `--server`). It says where it keeps what. The data, the
model and both pipelines are in demo_pipelines.py, which also runs the starved one as a plain
script for `stoker tune`.
"""

import os
import re
import socket
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any

import httpx

from stoker_server.cli.demo_pipelines import BATCH_SIZE, SAMPLES, STEPS_PER_EPOCH
from stoker_server.core.settings import Settings
from trainer_agent.figures import share_text

DEFAULT_PORT = 8470
# Without --port, the demo takes the first free port from DEFAULT_PORT on (another Stoker
# server, the user's own, may hold 8470).
PORTS_TRIED = 20


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


def port_is_free(host: str, port: int) -> bool:
    with socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET) as sock:
        try:
            sock.bind((host, port))
        except OSError:
            return False
    return True


def first_free_port(host: str, start: int, tries: int = PORTS_TRIED) -> int | None:
    return next((p for p in range(start, start + tries) if port_is_free(host, p)), None)


def start_server(settings: Settings) -> subprocess.Popen[bytes]:
    """Start `stoker serve` for `settings` in a child process; return once it answers.

    The child logs warnings and errors only (the demo says what matters itself), and reads
    its database from the flags alone: not from a STOKER_DATABASE_URL the user's shell may
    hold for their own server."""
    url = f"http://{settings.host}:{settings.port}"
    command = [
        sys.executable, "-m", "stoker_server.cli", "serve",
        "--host", settings.host, "--port", str(settings.port),
        "--data-dir", str(settings.data_dir),
    ]  # fmt: skip
    if settings.database_url:
        command += ["--database-url", settings.database_url]
    if settings.no_auth:
        command += ["--no-auth"]
    env = {k: v for k, v in os.environ.items() if k != "STOKER_DATABASE_URL"}
    env.setdefault("STOKER_LOG_LEVEL", "warning")
    server = subprocess.Popen(command, env=env, stdout=subprocess.DEVNULL)
    deadline = time.monotonic() + 60
    while not _healthy(url):
        if server.poll() is not None or time.monotonic() > deadline:
            server.kill()
            raise SystemExit(f"stoker demo: the Stoker server did not start on {url}")
        time.sleep(0.2)
    return server


@dataclass(frozen=True)
class DemoPlace:
    """Where the demo's runs go: its own server (`settings`) or one already running (`url`)."""

    url: str
    settings: Settings | None
    fresh: bool  # a data directory made for this demo, empty at its start
    lines: tuple[str, ...]  # where it keeps what, as printed at the start


def demo_place(
    *,
    host: str,
    port: int | None,
    data_dir: Path | None,
    database_url: str | None,
    server: str | None,
    no_auth: bool = False,
) -> DemoPlace:
    """Decide (and say) where the demo runs: by default its own server on a fresh directory."""
    if server:
        url = server.rstrip("/")
        return DemoPlace(
            url=url, settings=None, fresh=False,
            lines=(
                f"Server    {url}/ (already running: the demo's runs join its other runs, "
                "in project stoker-demo)",
                "Data      wherever that server keeps its runs",
            ),
        )  # fmt: skip
    chosen = port if port is not None else first_free_port(host, DEFAULT_PORT)
    if chosen is None:
        raise SystemExit(
            f"stoker demo: ports {DEFAULT_PORT}-{DEFAULT_PORT + PORTS_TRIED - 1} are all in use; "
            "pass --port"
        )
    fresh = data_dir is None and not database_url
    directory = Path(tempfile.mkdtemp(prefix="stoker-demo-")) if fresh else data_dir
    settings = Settings(
        host=host, port=chosen, data_dir=directory or Path.home() / ".stoker",
        database_url=database_url or None,
    )  # fmt: skip
    if no_auth:  # the flag turns it on; without it STOKER_NO_AUTH decides
        settings = settings.model_copy(update={"no_auth": True})
    url = f"http://{host}:{chosen}"
    lines = [f"Server    {url}/ (the demo's own; Ctrl-C stops it)"]
    if chosen != DEFAULT_PORT and port is None:
        lines.append(f"          (port {DEFAULT_PORT} is in use, by another Stoker server perhaps)")
    where = settings.data_dir
    if database_url:
        lines.append("Runs      in the database you named (--database-url): its runs show too")
    else:
        lines.append(f"Runs      {where / 'stoker.db'} (SQLite)")
    lines.append(f"Profiles  {where / 'profiles'}/")
    if fresh:
        lines += [
            f"Spool     {where / 'spool'}/ (what the agent has not yet delivered)",
            "          A fresh directory: only the demo's runs show (your own, in ~/.stoker, do",
            f"          not). See them again later: stoker serve --data-dir {where}",
        ]
    elif not database_url:
        lines.append("          (the directory you named: runs already there show too)")
    return DemoPlace(url=url, settings=settings, fresh=fresh, lines=tuple(lines))


# TensorFlow logs these C++ INFO lines before absl's logging is initialised, when
# TF_CPP_MIN_LOG_LEVEL cannot hide them yet: the banner line and "I0000 ... file.cc:N] ...".
_EARLY_TF_INFO = re.compile(
    r"^(WARNING: All log messages before absl::InitializeLog\(\) is called are written to "
    r"STDERR|I\d{4} \d\d:\d\d:[\d.]+ +\d+ [\w.]+:\d+\] .*)$"
)


def import_tensorflow_quietly() -> ModuleType:
    """`import tensorflow`, without the INFO lines it logs while TF_CPP_MIN_LOG_LEVEL cannot
    hide them yet (oneDNN, CUDA stubs). Everything else it writes to stderr is kept."""
    sys.stderr.flush()
    saved = os.dup(2)
    with tempfile.TemporaryFile() as captured:
        os.dup2(captured.fileno(), 2)
        try:
            import tensorflow as tf
        finally:
            os.dup2(saved, 2)
            os.close(saved)
            captured.seek(0)
            lines = captured.read().decode(errors="replace").splitlines(keepends=True)
            sys.stderr.write("".join(line for line in lines if not _EARLY_TF_INFO.match(line)))
            sys.stderr.flush()
    return tf


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


def settled_alerts(server_url: str, run_id: int, *, timeout_s: float = 15.0) -> list[Any]:
    """The run's alerts once those still firing as it ended have resolved (each says why: "the
    run ended"), or as they are after `timeout_s`."""
    deadline = time.monotonic() + timeout_s
    while True:
        query = {"run_id": run_id}
        alerts: list[Any] = _api("GET", server_url, "/alerts", params=query, timeout=10).json()[
            "data"
        ]
        if all(a["state"] == "resolved" for a in alerts) or time.monotonic() > deadline:
            return alerts
        time.sleep(0.5)


def report_run(server_url: str, run_id: int | None) -> None:
    """Print the run's final verdict, its evidence and advice, and its alerts."""
    if run_id is None:
        return
    if not wait_until_ended(server_url, run_id):
        print("  (the run's end has not reached the server yet: this verdict may change)")
    try:
        diagnosis = _api("GET", server_url, f"/runs/{run_id}/diagnosis", timeout=10).json()
        alerts = settled_alerts(server_url, run_id)
    except (httpx.HTTPError, KeyError, ValueError) as error:
        print(f"  (could not read the diagnosis: {error})", flush=True)
        return
    share = diagnosis.get("input_wait_share")
    figure = "" if share is None else f", input wait {share_text(share)}"
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


# Batches of the starved pipeline timed to size the live run in whole epochs.
PROBE_BATCHES = 16


def live_epochs(live_s: float, epoch_s: float) -> int:
    """Whole epochs that take about `live_s` at `epoch_s` each (at least one)."""
    return max(1, round(live_s / epoch_s)) if epoch_s > 0 else 1


def epoch_seconds(dataset: Any) -> float:
    """An epoch's time, from PROBE_BATCHES batches of `dataset` (after its first, which waits
    for the shuffle buffer to fill): the starved run's steps wait on their input almost all
    of the time, so its input sets their pace."""
    batches = iter(dataset)
    next(batches)
    start = time.perf_counter()
    for _ in range(PROBE_BATCHES):
        next(batches)
    return (time.perf_counter() - start) / PROBE_BATCHES * STEPS_PER_EPOCH


def train_demo_runs(server_url: str, *, epochs: int, live_s: float = 0.0) -> None:
    """The fed run for `epochs` epochs, then the starved one: `epochs` epochs too, or, with
    `live_s`, as many whole epochs as take about that long, so that it can be watched live.
    Each run's config says the epochs and steps it is given."""
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    tf = import_tensorflow_quietly()

    from stoker_server.cli import demo_pipelines
    from trainer_agent import StokerCallback

    validation = demo_pipelines.validation()
    fed, starved = demo_pipelines.fed, demo_pipelines.starved
    for name, make_dataset in (("fed-pipeline", fed), ("starved-pipeline", starved)):
        live = live_s > 0 and name == "starved-pipeline"
        model = demo_pipelines.model()
        run_epochs = live_epochs(live_s, epoch_seconds(make_dataset())) if live else epochs
        callback = StokerCallback(
            run_name=name,
            project=DEMO_PROJECT,
            server=server_url,
            config={
                "pipeline": name.split("-")[0],
                "epochs": run_epochs,
                "steps_per_epoch": STEPS_PER_EPOCH,
                "batch_size": BATCH_SIZE,
                "examples": SAMPLES,
            },
            tags=["demo"],
        )
        # The callback lets go of its run session when fit() ends; its sender knows the run id.
        kept: dict[str, Any] = {}
        keep = tf.keras.callbacks.LambdaCallback(
            on_train_begin=lambda logs, kept=kept, cb=callback: kept.update(session=cb.run_session)
        )
        if live:
            print(
                f"\n  Training {name}: {run_epochs} epochs of {STEPS_PER_EPOCH} steps, about "
                f"{live_s / 60:g} minutes, or until Ctrl-C.\n  Watch it at {server_url}/ : it "
                "starves on its input, its alert fires within a minute and captures a 20-step "
                "profile by itself.\n",
                flush=True,
            )
        else:
            print(f"Training {name}: {run_epochs} epochs of {STEPS_PER_EPOCH} steps", flush=True)
        model.fit(
            callback.wrap(make_dataset()),
            validation_data=validation,
            epochs=run_epochs,
            callbacks=[callback, keep],
            verbose=0 if live else 2,
            shuffle=False,  # the datasets shuffle themselves; Keras cannot shuffle a tf.data
        )
        run_id = getattr(getattr(kept.get("session"), "sender", None), "run_id", None)
        report_run(server_url, run_id or _last_run_id(server_url, name))
        if name == "starved-pipeline":
            print(f"  Measure that advice before editing a line:\n    {TUNE_COMMAND}\n", flush=True)


def _last_run_id(server_url: str, name: str) -> int | None:
    try:
        runs = _api("GET", server_url, "/runs", timeout=10).json()["data"]
    except (httpx.HTTPError, KeyError, ValueError):
        return None
    return next((r["id"] for r in runs if r["name"] == name), None)


def run_demo(
    place: DemoPlace,
    *,
    epochs: int,
    keep_serving: bool,
    live_minutes: float = DEFAULT_LIVE_MINUTES,
) -> int:
    print("\nStoker demo", flush=True)
    for line in place.lines:
        print(f"  {line}", flush=True)
    server = start_server(place.settings) if place.settings is not None else None
    if server is None and not _healthy(place.url):
        print(f"stoker demo: no Stoker server answers at {place.url}", file=sys.stderr)
        return 1
    if place.fresh and place.settings is not None:
        # The agent's spool (records not yet delivered) beside the demo's runs.
        os.environ.setdefault("STOKER_SPOOL_DIR", str(place.settings.data_dir / "spool"))
    url = place.url
    # The tokens its own server needs (set, or made beyond loopback), or those set for the
    # server it streams into.
    with_token = use_tokens(place.settings or Settings())
    print(f"\n  Stoker is running. Open {url}/{with_token} in your browser.\n", flush=True)
    no_driver = nvidia_driver_status()
    if no_driver is not None:
        print(
            "  No NVIDIA driver was found (NVML: "
            f"{no_driver}), so the model trains on the CPU and the run pages show no GPU "
            "charts (utilization, memory, temperature). Step time and input wait are measured "
            "all the same, and the diagnosis works from them.\n",
            flush=True,
        )
        # TensorFlow's own "failed call to cuInit" error says the same, less plainly.
        os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
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
            try:
                server.wait(timeout=10)
            except subprocess.TimeoutExpired:
                server.kill()
                server.wait()
    return 0
