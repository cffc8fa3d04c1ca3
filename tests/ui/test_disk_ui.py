"""Disk use and retention in the UI, against a real `stoker serve` and, for the views,
real headless Chromium:

- GET /api/v1/disk measures the database, the profiles and the data directory's disk;
- the runs page shows those figures, and every page a banner while the disk is nearly full
  (a threshold set above the real free share) or full (a small tmpfs filled by ingest, rows
  refused with 507), which goes once there is room again; reads keep working meanwhile;
- the run page pins and unpins a run;
- a run compacted by retention says, once zoomed past its rollups, that finer detail is gone.

Screenshots go to test-artifacts/ui-disk-*.png.
"""

import re
import shutil
import subprocess
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from sqlalchemy import create_engine

from tests.conftest import DATABASES, require
from tests.harness.support import ServerProcess, run_coroutine, wait_for
from tests.server.test_disk_full import _mount, _send

expect = pytest.importorskip("playwright.sync_api").expect


def _ingest(
    server: ServerProcess, name: str, *, steps: int, samples: bool = False
) -> httpx.Response:
    """A finished run of `steps` steps of 50 ms through the HTTP ingest, as an agent sends it;
    with `samples`, a GPU reading every half second."""
    t0 = time.time() - 3600
    batch: dict[str, Any] = {
        "type": "batch", "seq": 1,
        "steps": {"step": list(range(steps)), "t": [t0 + i * 0.05 for i in range(steps)],
                  "dur": [0.05 + (i % 7) * 1e-3 for i in range(steps)],
                  "wait": [(i % 3) * 1e-3 for i in range(steps)]},
    }  # fmt: skip
    if samples:
        n = int(steps * 0.05 / 0.5)
        batch["device"] = {"t": [t0 + i * 0.5 for i in range(n)], "gpu": [0] * n,
                           "util": [60.0 + (i % 20) for i in range(n)]}  # fmt: skip
    hello = {"type": "hello", "protocol": 1, "run_key": uuid.uuid4().hex, "name": name,
             "project": "disk"}  # fmt: skip
    body = {"hello": hello, "batches": [batch], "end": {"type": "end", "status": "finished"}}
    return httpx.post(f"{server.url}/api/v1/ingest", json=body, timeout=60)


def _database_directory(url: str) -> Path:
    """Where the database's rows are written: the SQLite file's directory, PostgreSQL's data
    directory (the tests' cluster keeps its tables there)."""
    if url.startswith("sqlite:///"):
        return Path(url.removeprefix("sqlite:///")).parent
    engine = create_engine(url)
    with engine.connect() as connection:
        directory = connection.exec_driver_sql("SHOW data_directory").scalar_one()
    engine.dispose()
    return Path(directory)


@pytest.mark.parametrize("database", DATABASES, indirect=True)
def test_disk_endpoint_measures_database_profiles_and_free_space(
    tmp_path: Path, database: str
) -> None:
    server = ServerProcess(
        data_dir=tmp_path / "server", env={"STOKER_DATABASE_URL": database}
    ).start()
    try:
        assert _ingest(server, "sized", steps=500).status_code == 200
        disk = server.get("/api/v1/disk")
        usage = shutil.disk_usage(server.data_dir)
        assert disk["database_bytes"] > 0 and disk["profiles_bytes"] == 0
        assert disk["total_bytes"] == usage.total
        assert 0 < disk["free_bytes"] <= disk["total_bytes"]
        assert disk["sqlite"] is database.startswith("sqlite")
        assert (disk["low_free_share"], disk["low_free_bytes"]) == (0.05, 10**9)
        # Whether the disks count as nearly full follows from the real figures: the data
        # directory's, and the database's own where the server can read it.
        own = shutil.disk_usage(_database_directory(database))
        assert disk["database_total_bytes"] == own.total
        low = any(u.free < 0.05 * u.total or u.free < 10**9 for u in (usage, own))
        assert (disk["full"], disk["low"], disk["refusals"]) == (False, low, 0)
    finally:
        server.stop()


def test_nearly_full_banner_and_disk_use_on_the_runs_page(
    tmp_path: Path, page: Any, artifacts: Path
) -> None:
    # A threshold above the real free share: the disk counts as nearly full.
    env = {"STOKER_DISK_LOW_FREE_SHARE": "1", "STOKER_DISK_LOW_FREE_BYTES": "0"}
    server = ServerProcess(data_dir=tmp_path / "server", env=env).start()
    try:
        assert _ingest(server, "still-readable", steps=200).status_code == 200
        assert server.get("/api/v1/disk")["low"] is True
        page.goto(server.url)
        banner = page.get_by_test_id("disk-banner")
        expect(banner).to_be_visible()
        expect(banner).to_have_attribute("data-level", "low")
        expect(banner).to_contain_text("The database's disk is nearly full")
        expect(banner).to_contain_text("nothing is lost")
        expect(banner).to_contain_text("STOKER_RETENTION_TIME_S")
        expect(page.get_by_test_id("runs-table")).to_contain_text("still-readable")  # reads work
        line = page.get_by_test_id("disk-use")
        expect(line).to_contain_text("Disk: Database ")
        expect(line).to_contain_text(" free of ")
        expect(line).to_have_attribute("data-state", "low")
        page.screenshot(path=str(artifacts / "ui-disk-low.png"))
        # Every page shows it, the run page too.
        page.get_by_role("link", name="still-readable").click()
        expect(page.get_by_test_id("run-name")).to_have_text("still-readable")
        expect(page.get_by_test_id("disk-banner")).to_be_visible()
    finally:
        server.stop()


@pytest.mark.parametrize("database", ["postgres"], indirect=True)
def test_runs_page_names_postgresqls_own_disk(server: ServerProcess, page: Any) -> None:
    # The tests' PostgreSQL runs on this machine as a superuser: its data directory's disk
    # is readable, and the disk line says what it holds beside the data directory's.
    use = server.get("/api/v1/disk")
    assert use["sqlite"] is False and use["database_total_bytes"], use
    page.goto(server.url)
    line = page.get_by_test_id("disk-use")
    expect(line).to_contain_text("PostgreSQL's disk ")
    expect(line).to_contain_text(f"free of {_gib(use['database_total_bytes'])}")


def _gib(size: int) -> str:
    return f"{size / 1024**3:.1f} GiB"


@pytest.fixture
def small_disk(tmp_path: Path) -> Iterator[Path]:
    disk = tmp_path / "disk"
    disk.mkdir()
    require(_mount(disk, "3m"), "a tmpfs mount (root)")
    try:
        yield disk
    finally:
        subprocess.run(["umount", "-l", str(disk)], check=False)


def test_full_disk_banner_says_rows_are_refused_and_goes_once_there_is_room(
    small_disk: Path, page: Any, artifacts: Path
) -> None:
    data = small_disk / "data"
    env = {
        "STOKER_DATABASE_URL": f"sqlite:///{data / 'stoker.db'}",
        "STOKER_DISK_LOW_FREE_BYTES": "0",  # a 64 MB disk is not "nearly full" by size
    }
    server = ServerProcess(data_dir=data, env=env).start()
    url = f"{server.ws_url}/api/v1/agent"
    hello = {"type": "hello", "protocol": 1, "run_key": uuid.uuid4().hex, "name": "filling"}
    try:
        # An agent streams until 3 MB are full: the server closes with a retry-later code.
        _, acked, code = run_coroutine(_send(url, hello, 1, 200))
        assert code == 1011 and acked > 0
        assert server.get("/api/v1/disk")["full"] is True
        page.goto(server.url)
        banner = page.get_by_test_id("disk-banner")
        expect(banner).to_have_attribute("data-level", "full")
        expect(banner).to_contain_text("The database's disk is full: new rows are refused.")
        expect(banner).to_contain_text("Agents keep their rows in their spool")
        expect(page.get_by_test_id("runs-table")).to_contain_text("filling")  # reads work
        expect(page.get_by_test_id("disk-use")).to_have_attribute("data-state", "full")
        page.screenshot(path=str(artifacts / "ui-disk-full.png"))

        # Room again: the agent sends what was refused, and the banner goes at the next read.
        assert _mount(small_disk, "64m", "remount")
        assert run_coroutine(_send(url, hello, acked + 1, acked + 2))[1:] == (acked + 2, 0)
        wait_for(lambda: not server.get("/api/v1/disk")["full"], what="the disk no longer full")
        page.reload()
        expect(page.get_by_test_id("disk-use")).to_have_attribute("data-state", "ok")
        expect(page.get_by_test_id("disk-banner")).to_be_hidden()
    finally:
        server.stop()


@pytest.fixture(scope="module")
def retention_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    # Ended runs are compacted a second after they end.
    env = {"STOKER_RETENTION_TIME_S": "1", "STOKER_RETENTION_INTERVAL_S": "0.5"}
    process = ServerProcess(data_dir=tmp_path_factory.mktemp("disk-ui"), env=env).start()
    yield process
    process.stop()


def test_pin_control_pins_and_unpins_the_run(
    retention_server: ServerProcess, page: Any, artifacts: Path
) -> None:
    response = _ingest(retention_server, "keep-me", steps=300)
    assert response.status_code == 200, response.text
    run_id = response.json()["run_id"]
    page.goto(f"{retention_server.url}/#/runs/{run_id}")
    pin = page.get_by_test_id("run-pin")
    expect(pin).to_have_text("Pin")
    expect(pin).to_have_attribute("aria-pressed", "false")
    pin.click()
    expect(page.get_by_test_id("run-pin")).to_have_text("Pinned")
    expect(page.get_by_test_id("run-pin")).to_have_attribute("aria-pressed", "true")
    assert retention_server.get(f"/api/v1/runs/{run_id}")["pinned"] is True
    page.screenshot(path=str(artifacts / "ui-disk-pinned.png"))
    page.get_by_test_id("run-pin").click()
    expect(page.get_by_test_id("run-pin")).to_have_text("Pin")
    assert retention_server.get(f"/api/v1/runs/{run_id}")["pinned"] is False


def test_compacted_run_chart_says_when_finer_detail_is_gone(
    retention_server: ServerProcess, page: Any, artifacts: Path
) -> None:
    steps = 40_000
    response = _ingest(retention_server, "compacted", steps=steps, samples=True)
    assert response.status_code == 200, response.text
    run_id = response.json()["run_id"]
    wait_for(
        lambda: retention_server.get(f"/api/v1/runs/{run_id}")["compacted_at"],
        what="the run compacted by retention",
    )
    series = retention_server.get(f"/api/v1/runs/{run_id}/steps", max_points=1000)
    assert series["compacted"] is True and series["finest_steps"] == 16

    page.goto(f"{retention_server.url}/#/runs/{run_id}")
    expect(page.get_by_test_id("run-compacted")).to_be_visible()
    chart = page.get_by_test_id("step-time-chart")
    expect(page.get_by_test_id("chart-info")).to_contain_text("points")
    # The default zoom: the rollups give a point per pixel or two, nothing is said.
    expect(page.get_by_test_id("retention-note")).to_be_hidden()

    # The server's starved stretches redraw the chart when they arrive: a drag begun before
    # that landed on the plot it replaced (a loaded CI run saw no zoom at all).
    expect(chart).to_have_attribute("data-starved-source", "server")
    # Zoom onto 4 % of the run: 1,600 steps, 100 rollups for a chart over 1,000 px wide.
    box = chart.locator(".u-over").bounding_box()
    assert box is not None and box["width"] > 1000
    y = box["y"] + box["height"] / 2
    page.mouse.move(box["x"] + box["width"] * 0.48, y)
    page.mouse.down()
    page.mouse.move(box["x"] + box["width"] * 0.50, y, steps=5)
    page.mouse.move(box["x"] + box["width"] * 0.52, y, steps=5)
    page.mouse.up()
    note = page.get_by_test_id("retention-note")
    expect(note).to_be_visible()
    expect(note).to_have_text(
        "Finer detail removed by retention: this run keeps one point per 16 steps."
    )
    page.screenshot(path=str(artifacts / "ui-disk-compacted-zoom.png"))
    chart.locator(".u-over").dblclick()  # back to the default zoom
    expect(note).to_be_hidden()

    # The samples, thinned to 2,000 over the run's 2,000 s: 4 % of it holds 80 of them.
    gpu = page.get_by_test_id("gpu-util-chart").locator(".u-over")
    gpu.scroll_into_view_if_needed()
    samples_note = page.get_by_test_id("samples-retention-note")
    expect(samples_note).to_be_hidden()
    box = gpu.bounding_box()
    assert box is not None
    y = box["y"] + box["height"] / 2
    page.mouse.move(box["x"] + box["width"] * 0.48, y)
    page.mouse.down()
    page.mouse.move(box["x"] + box["width"] * 0.50, y, steps=5)
    page.mouse.move(box["x"] + box["width"] * 0.52, y, steps=5)
    page.mouse.up()
    expect(samples_note).to_have_text(
        "Finer detail removed by retention: this run's samples were thinned."
    )
    page.screenshot(path=str(artifacts / "ui-disk-compacted-samples.png"))


def test_alerts_page_lists_a_disk_alert_as_the_servers(
    retention_server: ServerProcess, page: Any, artifacts: Path
) -> None:
    rule = next(
        r for r in retention_server.get("/api/v1/alert-rules")["data"] if r["builtin"] == "disk_low"
    )
    url = f"{retention_server.url}/api/v1/alert-rules/{rule['id']}"
    # Over the real free share (below 1 on any disk with something on it): it fires.
    assert httpx.patch(url, json={"threshold": 1.0, "for_s": 0}).status_code == 200
    try:
        # The rule is judged on the detectors' tick (seconds apart by default): the page is
        # opened once it has fired, so what it shows does not race the tick.
        wait_for(
            lambda: [
                a
                for a in retention_server.get("/api/v1/alerts", state="firing")["data"]
                if a["rule_id"] == rule["id"]
            ],
            what="the disk alert firing",
        )
        page.goto(f"{retention_server.url}/#/alerts")
        row = page.get_by_test_id("alert-row").filter(has_text=rule["name"]).first
        expect(row).to_have_attribute("data-state", "firing")
        expect(row).to_contain_text("server")
        # Its value written as the UI writes a share, beside its rule (issue 38).
        said = r"on the server: free disk space [\d.]+ % \(rule: < 100.0 %\)"
        expect(row).to_contain_text(re.compile(said))
        expect(page.get_by_test_id("nav-alerts-count")).to_have_text("1")
        page.screenshot(path=str(artifacts / "ui-disk-alert.png"))
    finally:
        httpx.patch(url, json={"threshold": 0.05, "for_s": 60})
