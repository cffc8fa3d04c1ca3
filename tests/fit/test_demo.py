"""`stoker demo` as a newcomer runs it (issue 41), in a child process as `make demo` starts it:

- on a clean slate: its own server on a fresh data directory it names, so a run the user already
  has in ~/.stoker (here one left "running" by a process that died) neither shows beside the
  demo's two runs nor fires an alert among them;
- the config each run records is what it trained: the epochs (the live run's included, sized in
  whole epochs) and steps, as Keras's own fit parameters say;
- none of our warnings: no runpy RuntimeWarning (the server started as `-m stoker_server.cli.main`),
  no Keras "shuffle=True ... will be ignored" (the demo's fit), no TensorFlow INFO lines from
  before absl's logging starts (oneDNN, the CUDA stubs), no server INFO lines (migrations).
  (xprof, in this venv but not in `make demo`'s, logs its own lines when the alert's profile is
  analysed; those are not asserted on here.)
"""

import os
import re
import subprocess
import sys
import time
import uuid
from pathlib import Path

import httpx

from stoker_server.cli.demo import STEPS_PER_EPOCH
from tests.harness.support import REPO, ServerProcess, free_port

OUR_NOISE = re.compile(
    r"RuntimeWarning|UserWarning|FutureWarning|DeprecationWarning|shuffle=True|"
    r"^I\d{4} .*\b(port|cudart_stub|cuda_platform)\.cc:|^INFO\b|Running upgrade",
    re.MULTILINE,
)


def _leave_a_stuck_run(data_dir: Path) -> None:
    """A run whose process died without its end: stored as running, in the user's own store."""
    server = ServerProcess(data_dir=data_dir).start()
    try:
        t0 = time.time() - 3600
        hello = {"type": "hello", "protocol": 1, "run_key": uuid.uuid4().hex,
                 "name": "fed-pipeline", "project": "stoker-demo"}  # fmt: skip
        batch = {"type": "batch", "seq": 1,
                 "steps": {"step": [0, 1], "t": [t0, t0 + 1], "dur": [1.0, 1.0]}}  # fmt: skip
        body = {"hello": hello, "batches": [batch]}
        response = httpx.post(f"{server.url}/api/v1/ingest", json=body, timeout=30)
        assert response.status_code == 200, response.text
        assert server.get("/api/v1/runs")["data"][0]["status"] == "running"
    finally:
        server.stop()


def test_demo_starts_clean_records_what_it_trains_and_warns_of_nothing_of_ours(
    tmp_path: Path,
) -> None:
    home = tmp_path / "home"
    _leave_a_stuck_run(home / ".stoker")
    env = {
        **os.environ, "HOME": str(home), "TMPDIR": str(tmp_path),
        "PYTHONWARNINGS": "default",  # as a user's Python shows warnings (pytest's filters aside)
    }  # fmt: skip
    env.pop("STOKER_SPOOL_DIR", None)  # the demo's agent spools in the demo's directory
    demo = subprocess.run(
        [sys.executable, "-m", "stoker_server.cli", "demo", "--port", str(free_port()),
         "--epochs", "1", "--live-minutes", "0.1", "--exit"],
        cwd=REPO, env=env, capture_output=True, text=True, timeout=240,
    )  # fmt: skip
    output = demo.stdout + demo.stderr
    assert demo.returncode == 0, output[-4000:]
    noise = [m.group(0) for m in OUR_NOISE.finditer(output)]
    assert not noise, (noise, output[-4000:])

    where = re.search(r"^  Runs +(\S+)/stoker\.db \(SQLite\)$", demo.stdout, re.MULTILINE)
    assert where, demo.stdout
    data_dir = Path(where.group(1))
    assert data_dir.parent == tmp_path and data_dir.name.startswith("stoker-demo-"), data_dir
    assert f"stoker serve --data-dir {data_dir}" in demo.stdout
    assert list((home / ".stoker").glob("stoker.db*")), "the user's own store is where it was"

    server = ServerProcess(data_dir=data_dir).start()
    try:
        listed = server.get("/api/v1/runs")["data"]
        runs = {run["name"]: run for run in listed}
        assert len(listed) == 2 and sorted(runs) == ["fed-pipeline", "starved-pipeline"], listed
        for name, run in runs.items():
            config, fit = run["config"], run["environment"]["fit_params"]
            assert config["epochs"] == fit["epochs"], (name, config, fit)
            assert config["steps_per_epoch"] == fit["steps"] == STEPS_PER_EPOCH, (name, fit)
            assert run["status"] == "finished", (name, run["status"])
            assert run["summary"]["steps"] == config["epochs"] * STEPS_PER_EPOCH, (name, run)
        assert runs["fed-pipeline"]["config"]["epochs"] == 1
        alerts = server.get("/api/v1/alerts")["data"]
        assert all(alert["run_id"] in {r["id"] for r in runs.values()} for alert in alerts), alerts
        assert not [a for a in alerts if "failed" in a["rule_name"].lower()], alerts
    finally:
        server.stop()
