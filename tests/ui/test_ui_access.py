"""Roles in the UI, in real headless Chromium against a real `stoker serve` with a viewer and
an admin token (issue 39): the URL `stoker serve` prints (with the viewer token) opens the
UI without a prompt and leaves the token out of the address bar; a reader is offered no
edit, delete, pin, rule change or profile capture; the admin token, entered from the top
bar, offers them. The content security policy the server sends lets the UI run (no
violation reported)."""

import json
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from tests.harness.support import ServerProcess
from tests.server.test_ingest_websocket import hello

expect = pytest.importorskip("playwright.sync_api").expect

VIEW, ADMIN = "ui-viewer-token", "ui-admin-token"


@pytest.fixture(scope="module")
def locked(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[ServerProcess, int]]:
    env = {"STOKER_VIEW_TOKEN": VIEW, "STOKER_ADMIN_TOKEN": ADMIN}
    server = ServerProcess(data_dir=tmp_path_factory.mktemp("ui-access"), env=env).start()
    batch = {"type": "batch", "seq": 1, "steps": {"step": [0, 1], "t": [1.7e9, 1.7e9 + 1],
                                                 "dur": [0.1, 0.1]}}  # fmt: skip
    stored = httpx.post(
        f"{server.url}/api/v1/ingest",
        json={"hello": hello(name="shared-run", config={"lr": 0.1}), "batches": [batch],
              "end": {"type": "end"}},
    )  # fmt: skip
    stored.raise_for_status()
    yield server, stored.json()["run_id"]
    server.stop()


def _csp_violations(page: Any) -> list[str]:
    found: list[str] = []
    page.on(
        "console",
        lambda message: "Content Security Policy" in message.text and found.append(message.text),
    )
    return found


def test_a_reader_sees_no_admin_actions_until_the_admin_token_is_entered(
    page: Any, locked: tuple[ServerProcess, int]
) -> None:
    server, run_id = locked
    violations = _csp_violations(page)
    page.goto(f"{server.url}/?token={VIEW}#/runs/{run_id}")
    expect(page.get_by_test_id("run-name")).to_have_text("shared-run")
    assert "token=" not in page.url  # kept for the tab, not in the address bar or history
    expect(page.get_by_test_id("token-dialog")).to_have_count(0)
    expect(page.get_by_test_id("export-csv")).to_be_visible()
    for action in ("run-delete", "run-edit-button", "run-pin"):
        expect(page.get_by_test_id(action)).to_have_count(0)
    badge = page.get_by_test_id("access-badge")
    expect(badge).to_have_text("Read-only")

    page.goto(f"{server.url}/#/alerts")
    expect(page.get_by_test_id("rules-read-only")).to_be_visible()
    expect(page.get_by_test_id("rule-submit")).to_be_hidden()
    expect(page.get_by_test_id("alert-rule-row").first).to_be_visible()
    expect(page.get_by_test_id("rule-delete")).to_have_count(0)

    badge.click()  # the admin token, asked for from the top bar
    dialog = page.get_by_test_id("token-dialog")
    expect(dialog).to_contain_text("admin token")
    page.locator("#stoker-token").fill(ADMIN)
    dialog.get_by_role("button", name="Continue").click()
    expect(badge).to_have_text("Admin")
    expect(page.get_by_test_id("rule-submit")).to_be_visible()
    expect(page.get_by_test_id("rule-delete").first).to_be_visible()

    page.goto(f"{server.url}/#/runs/{run_id}")
    expect(page.get_by_test_id("run-delete")).to_be_visible()
    page.once("dialog", lambda confirm: confirm.accept())
    page.get_by_test_id("run-delete").click()
    expect(page.locator("main[data-route=runs]")).to_be_visible()
    gone = httpx.get(
        f"{server.url}/api/v1/runs/{run_id}", headers={"Authorization": f"Bearer {VIEW}"}
    )
    assert gone.status_code == 404
    assert violations == [], json.dumps(violations)


def test_a_page_without_a_token_asks_for_one(page: Any, locked: tuple[ServerProcess, int]) -> None:
    server, _ = locked
    page.goto(f"{server.url}/")
    dialog = page.get_by_test_id("token-dialog")
    expect(dialog).to_contain_text("requires an access token")
    page.locator("#stoker-token").fill(VIEW)
    dialog.get_by_role("button", name="Continue").click()
    expect(page.get_by_test_id("access-badge")).to_have_text("Read-only")
