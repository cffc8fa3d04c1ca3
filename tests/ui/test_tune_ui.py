"""`stoker tune` in real headless Chromium against a real `stoker serve`:

- a tune group's page shows its table (steps/s, input wait, speed-up, verdict, the line to
  edit; the best marked) and its trials' step times overlaid, one line per trial's run;
- a trial's run page links its group;
- "Prove it" under a run's diagnosis shows the `stoker tune` command with the run's own
  command line, quoted for the shell.

The runs are delivered as an agent would (POST /ingest) and the group as `stoker tune` posts
it. Screenshots go to test-artifacts/ui-tune-*.png.
"""

import time
import uuid
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.harness.support import ServerProcess
from tests.harness.tune_groups import edit, group_body, post_group

expect = pytest.importorskip("playwright.sync_api").expect


def _run(
    server: ServerProcess,
    run_key: str,
    name: str,
    *,
    dur: float,
    wait: float,
    config: dict[str, Any] | None = None,
    environment: dict[str, Any] | None = None,
) -> int:
    """A finished run of 60 steps of `dur` s, each waiting `wait` s for input."""
    n, t0 = 60, time.time() - 60
    batch = {
        "type": "batch", "seq": 1,
        "steps": {"step": list(range(n)), "t": [t0 + i * dur for i in range(n)],
                  "dur": [dur] * n, "wait": [wait] * n, "batch_size": [64] * n},
    }  # fmt: skip
    hello = {"type": "hello", "protocol": 1, "run_key": run_key, "name": name,
             "project": "ui-tune", "tags": ["tune"], "config": config or {},
             "environment": environment or {}}  # fmt: skip
    body = {"hello": hello, "batches": [batch], "end": {"type": "end", "status": "finished"}}
    response = httpx.post(f"{server.url}/api/v1/ingest", json=body, timeout=30)
    assert response.status_code == 200, response.text
    return int(response.json()["run_id"])


EDIT = edit("train.py:42")
TIMES = "\u00d7"  # the multiplication sign the UI writes a speed-up with


def test_a_tune_group_shows_its_table_and_each_trials_step_time(
    shared_server: ServerProcess, page: Any, artifacts: Path
) -> None:
    key = uuid.uuid4().hex[:16]
    keys = [f"tune-{key}-{i}" for i in range(3)]
    config = {"tune": {"group": key, "trial": "parallel:2", "change": "parallel map slow_decode"}}
    runs = [
        _run(shared_server, keys[0], "tune train.py: unchanged", dur=0.1, wait=0.09),
        _run(shared_server, keys[1], "tune train.py: parallel", dur=0.045, wait=0.03,
             config=config),
        _run(shared_server, keys[2], "tune train.py: parallel (again)", dur=0.047, wait=0.03),
    ]  # fmt: skip
    rows = [
        {"id": "unchanged", "label": "unchanged", "verdict": "unchanged", "steps_per_s": 10.0,
         "input_wait_share": 0.9, "batches": 60, "examples": 3840, "run_key": keys[0]},
        {"id": "parallel:2", "advice": "parallel", "label": "parallel map slow_decode",
         "title": "num_parallel_calls=AUTOTUNE, deterministic=True on map slow_decode",
         "verdict": "speed-up", "steps_per_s": 22.2, "speedup": 2.22, "repeat_speedup": 2.13,
         "input_wait_share": 0.66, "function": "slow_decode", "edit": EDIT, "run_key": keys[1]},
        {"id": "cache", "advice": "cache", "label": "cache <b>after</b>", "verdict": "not tried",
         "note": "map slow_decode (stage 2) runs Python: Stoker cannot tell <i>whether</i>"},
    ]  # fmt: skip
    trials = [("unchanged", "unchanged", keys[0]),
              ("parallel:2", "parallel map slow_decode", keys[1]),
              ("repeat", "parallel map slow_decode (again)", keys[2])]  # fmt: skip
    group = group_body(
        key, ["python", "train.py", "--lr", "0.1"], trials, rows, project="ui-tune", steps=60,
        noise=0.05, best="parallel:2", noise_text="the best change's two runs differ by 4.2%",
        conclusion="Best: num_parallel_calls=AUTOTUNE on map slow_decode: 2.22x",
    )  # fmt: skip
    stored = post_group(shared_server, group)
    assert stored.status_code == 200, stored.text
    group_id = stored.json()["id"]

    page.goto(f"{shared_server.url}/#/tune/{group_id}")
    view = page.get_by_test_id("tune-view")
    expect(view.get_by_test_id("tune-name")).to_have_text(
        "Tune: python train.py --lr 0.1", timeout=15_000
    )
    expect(view.get_by_test_id("tune-command")).to_have_text(
        "stoker tune --steps 60 -- python train.py --lr 0.1"
    )
    table = view.get_by_test_id("tune-table")
    expect(table.locator("tbody tr")).to_have_count(3)
    best = table.locator('tr[data-change="parallel:2"]')
    expect(best).to_have_attribute("data-verdict", "speed-up")
    expect(best.locator("td")).to_have_text(
        [
            "22.2",
            "66.0 %",
            f"2.22{TIMES} (2.13{TIMES} again)",
            "speed-up",
            f"train.py:42{EDIT['before']}→{EDIT['after']}",
        ]
    )
    expect(best.locator(".best-mark")).to_have_count(1)
    expect(best.locator("th a")).to_have_attribute("href", f"#/runs/{runs[1]}")
    skipped = table.locator('tr[data-change="cache"]')
    expect(skipped.locator("th")).to_have_text("cache <b>after</b>")  # the server's text as text
    expect(view.locator("b, i")).to_have_count(0)
    chart = view.get_by_test_id("tune-chart")
    expect(chart).to_have_attribute("data-trials", "3")
    expect(chart).to_have_attribute("data-points", "60", timeout=15_000)
    page.screenshot(path=str(artifacts / "ui-tune-group.png"), full_page=True)

    # The trial's run page links its group.
    page.goto(f"{shared_server.url}/#/runs/{runs[1]}")
    link = page.get_by_test_id("run-tune-link")
    expect(link).to_contain_text("A trial of tune group", timeout=15_000)
    expect(link.locator("a")).to_have_attribute("href", f"#/tune/{group_id}")

    page.goto(f"{shared_server.url}/#/tune")
    expect(
        page.locator(f'[data-testid="tune-list-table"] tr[data-group="{group_id}"]')
    ).to_contain_text(f"parallel map slow_decode: 2.22{TIMES}", timeout=15_000)


def test_prove_it_shows_the_tune_command_for_the_runs_own_script(
    shared_server: ServerProcess, page: Any, artifacts: Path
) -> None:
    environment = {"command": ["/venv/bin/python", "train.py", "--name", "bs 64"],
                   "cwd": "/work/cifar"}  # fmt: skip
    run_id = _run(shared_server, uuid.uuid4().hex, "starved", dur=0.1, wait=0.08,
                  environment=environment)  # fmt: skip
    page.goto(f"{shared_server.url}/#/runs/{run_id}")
    banner = page.get_by_test_id("verdict-banner")
    expect(banner).to_have_attribute("data-verdict", "highly_input_bound", timeout=15_000)
    button = banner.get_by_test_id("prove-it-button")
    expect(banner.get_by_test_id("prove-it-box")).to_be_hidden()
    button.click()
    expect(button).to_have_attribute("aria-expanded", "true")
    box = banner.get_by_test_id("prove-it-box")
    expect(box.get_by_test_id("prove-it-command")).to_have_text(
        "stoker tune --steps 200 -- /venv/bin/python train.py --name 'bs 64'"
    )
    expect(box).to_contain_text("In /work/cifar, run:")
    banner.screenshot(path=str(artifacts / "ui-tune-prove-it.png"))
