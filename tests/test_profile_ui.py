"""Issue 19 in headless Chromium: the run page's "Profile N steps" button, its progress and
its result (xprof's analysis beside Stoker's input wait), and a failure's message."""

from pathlib import Path
from typing import Any

import pytest

from tests.support import ServerProcess, wait_for
from tests.test_profile_capture import Training, small_dataset, steps_stored
from trainer_agent.guard import FAULT_ENV


def _open_live_run(server: ServerProcess, page: Any, name: str) -> Training:
    training = Training(server, small_dataset(), name)
    run_id = training.run_id()
    wait_for(lambda: steps_stored(server, run_id) >= 20, timeout_s=60, what="steps")
    page.goto(f"{server.url}/#/runs/{run_id}")
    page.get_by_test_id("profile-panel").wait_for()
    return training


def _status(page: Any) -> str:
    result = page.get_by_test_id("profile-result")
    return result.get_attribute("data-status") if result.count() else ""


def test_profile_button_shows_progress_and_result(
    server: ServerProcess,
    page: Any,
    artifacts: Path,
) -> None:
    training = _open_live_run(server, page, "ui-profile")
    try:
        page.get_by_test_id("profile-steps").fill("10")
        button = page.get_by_test_id("profile-button")
        assert button.text_content() == "Profile 10 steps"
        wait_for(button.is_enabled, what="the button enabled for a live run")
        button.click()
        seen = wait_for(lambda: _status(page), what="the profile's progress")
        assert seen in ("requested", "capturing", "uploading", "ready")
        wait_for(lambda: _status(page) == "ready", timeout_s=180, what="the profile ready")
        shares = page.get_by_test_id("profile-shares")
        wait_for(lambda: "waiting" not in shares.text_content(), what="Stoker's input share")
    finally:
        training.stop()
    assert "input" in page.get_by_test_id("profile-conclusion").text_content()
    assert "Difference" in shares.text_content()
    assert "Input" in page.get_by_test_id("profile-breakdown").text_content()
    assert page.get_by_test_id("profile-iterators").locator("tbody tr").count() > 0
    assert page.get_by_test_id("profile-ops").locator("tbody tr").count() > 0
    assert "Capture overhead" in page.get_by_test_id("profile-overhead").text_content()
    with page.expect_download() as download:
        page.get_by_test_id("profile-download").click()
    assert download.value.suggested_filename.endswith(".xplane.pb")
    page.screenshot(path=str(artifacts / "run-page-profile.png"), full_page=True)


def test_failed_profile_shows_its_message(
    server: ServerProcess,
    page: Any,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv(FAULT_ENV, "profile_start")
    training = _open_live_run(server, page, "ui-profile-fails")
    try:
        button = page.get_by_test_id("profile-button")
        wait_for(button.is_enabled, what="the button enabled for a live run")
        button.click()
        wait_for(lambda: _status(page) == "failed", timeout_s=60, what="the failure shown")
        assert training.thread.is_alive()
    finally:
        training.stop()
    status = page.get_by_test_id("profile-status").text_content()
    assert status.startswith("profile failed: InjectedFault")
