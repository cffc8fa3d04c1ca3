"""The UI's layout at the widths people use, in real headless Chromium against a real server.

- at 1024 px and wider the runs table shows every column (input wait, lost device time, GPU
  utilization included) without a horizontal scroll (at 1400 px it once lost its last column
  when the wrapping applied only up to 1280 px);
- at 1400 px the profile panel's "Top ops" table, with TensorFlow's long op names, stays
  inside its card.
"""

import time
import uuid
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from sqlmodel import Session

from stoker_server.core.db import make_engine
from stoker_server.core.settings import Settings
from stoker_server.ingest import profiles as store
from tests.harness.support import ServerProcess

# The right edge of every header cell, the table's and its scroll box's (CSS pixels).
OVERFLOW_JS = """(wrap) => {
  const box = wrap.getBoundingClientRect();
  return {
    scroll: wrap.scrollWidth, client: wrap.clientWidth, right: box.right,
    cells: [...wrap.querySelectorAll("th")]
      .map((th) => [th.textContent, th.getBoundingClientRect().right]),
  };
}"""


@pytest.fixture(params=[1024, 1400, 1920], ids=lambda width: f"{width}px")
def narrow_page(browser: Any, request: pytest.FixtureRequest) -> Iterator[Any]:
    context = browser.new_context(viewport={"width": request.param, "height": 768})
    yield context.new_page()
    context.close()


def _ingest_run(server: ServerProcess, name: str, tags: list[str]) -> int:
    """A finished run with steps waiting for input and GPU samples, so every column has a value."""
    n, t0 = 200, time.time() - 60
    batch = {
        "type": "batch", "seq": 1,
        "steps": {"step": list(range(n)), "t": [t0 + i * 0.1 for i in range(n)],
                  "dur": [0.1] * n, "wait": [0.04] * n, "batch_size": [64] * n},
        "device": {"t": [t0 + i for i in range(21)], "gpu": [0] * 21, "util": [55.0] * 21,
                   "energy_j": [250.0 * i for i in range(21)]},
    }  # fmt: skip
    hello = {"type": "hello", "protocol": 1, "run_key": uuid.uuid4().hex, "name": name,
             "project": "layout-project", "tags": tags}  # fmt: skip
    body = {"hello": hello, "batches": [batch], "end": {"type": "end", "status": "finished"}}
    response = httpx.post(f"{server.url}/api/v1/ingest", json=body, timeout=30)
    assert response.status_code == 200, response.text
    return response.json()["run_id"]


def test_runs_table_shows_every_column_from_1024_px(
    server: ServerProcess, narrow_page: Any
) -> None:
    _ingest_run(server, "resnet50-imagenet-baseline-lr0.1-bs256", ["baseline", "imagenet"])
    page = narrow_page
    page.goto(f"{server.url}/#/")
    page.get_by_test_id("run-row").first.wait_for()
    wrap = page.locator(".table-wrap").first
    layout = wrap.evaluate(OVERFLOW_JS)
    assert layout["scroll"] <= layout["client"], layout
    headers = {text.strip(): right for text, right in layout["cells"]}
    for label in ("Input wait · whole run", "Lost device time", "GPU util"):
        assert any(label.lower() in h.lower() for h in headers), (label, headers)
    for text, right in layout["cells"]:
        assert right <= layout["right"] + 0.5, (text, right, layout["right"])


def _profile_with_ops(server: ServerProcess, database: str, run_id: int) -> None:
    """A ready capture whose analysis lists ops under TensorFlow's long generated names."""
    # A fusion is named after every op it fused, joined without a space.
    fused = ";".join(f"gradient_tape/sequential/dense_{j}/MatMul/MatMul_1" for j in range(6))
    ops = [
        {"where": "Device", "type": "_FusedMatMul", "name": f"{fused};sequential/dense_{i}/BiasAdd",
         "count": 120, "self_ms": 30.0 - i}
        for i in range(5)
    ]  # fmt: skip
    analysis = {
        "available": True,
        "conclusion": "Your program is not input-bound.",
        "step_ms_average": 100.0,
        "breakdown_ms": {"step_ms": 100.0, "input_ms": 4.0, "host_compute_ms": 96.0},
        "top_ops": ops,
    }
    engine = make_engine(Settings(data_dir=server.data_dir, database_url=database),
                         migrate_schema=False)  # fmt: skip
    with Session(engine, expire_on_commit=False) as session:
        pid = store.create_profile(
            session=session, run_id=run_id, steps=20, stale_after_s=600, ranks=[0]
        ).id
        data = b"xplane " * 100
        store.update_status(
            session=session, run_id=run_id, pid=pid, rank=0,
            report={"status": "uploading", "first_step": 10, "last_step": 29,
                    "bytes": len(data)},
        )  # fmt: skip
        store.store_chunk(
            session=session, data_dir=server.data_dir, run_id=run_id, pid=pid, rank=0,
            offset=0, total=len(data), data=data, max_bytes=2**20,
        )  # fmt: skip
        store.finish(
            session=session, pid=pid, analysis=analysis, profiler_share=0.04,
            steps=(11, 28), data_dir=server.data_dir, quota_bytes=2**30,
        )  # fmt: skip
    engine.dispose()


def test_profile_top_ops_stay_inside_their_card_at_1400_px(
    server: ServerProcess, database: str, page: Any
) -> None:
    run_id = _ingest_run(server, "profiled", [])
    _profile_with_ops(server, database, run_id)
    page.goto(f"{server.url}/#/runs/{run_id}")
    ops = page.get_by_test_id("profile-ops")
    ops.wait_for()
    assert page.viewport_size["width"] == 1400
    assert ops.locator("tbody tr").count() == 5
    card = page.get_by_test_id("profile-panel")
    card_box, ops_box = card.bounding_box(), ops.bounding_box()
    assert ops_box["x"] >= card_box["x"] - 0.5, (ops_box, card_box)
    card_right = card_box["x"] + card_box["width"]
    assert ops_box["x"] + ops_box["width"] <= card_right + 0.5, (ops_box, card_box)
    # Nor does a cell run past the table (a long name wraps rather than overflowing).
    widest = ops.evaluate(
        "(t) => Math.max(...[...t.querySelectorAll('td')]"
        ".map((c) => c.scrollWidth - c.clientWidth))"
    )
    assert widest <= 0, widest
