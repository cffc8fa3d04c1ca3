"""Where `stoker demo` puts its runs, and how long its live run trains (the training itself:
tests/fit/test_demo.py)."""

import socket
import tempfile
from pathlib import Path

import pytest

from stoker_server.cli.demo import DEFAULT_PORT, demo_place, first_free_port, live_epochs
from tests.harness.support import free_port


def test_live_run_is_whole_epochs_near_the_time_asked() -> None:
    assert live_epochs(180.0, 3.3) == 55
    assert live_epochs(1.0, 3.3) == 1  # at least one
    assert live_epochs(180.0, 0.0) == 1


def test_next_free_port_is_taken_when_the_first_is_held() -> None:
    start = free_port()
    with socket.socket() as held:
        held.bind(("127.0.0.1", start))
        held.listen()
        chosen = first_free_port("127.0.0.1", start)
    assert chosen is not None and chosen > start


def test_by_default_a_fresh_directory_of_its_own_said_with_how_to_see_it_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    monkeypatch.setenv("STOKER_DATA_DIR", str(tmp_path / "users-own"))  # not the demo's
    monkeypatch.setenv("STOKER_DATABASE_URL", "postgresql+psycopg://u@127.0.0.1/users-own")
    place = demo_place(host="127.0.0.1", port=None, data_dir=None, database_url=None, server=None)
    assert place.fresh and place.settings is not None
    data_dir = place.settings.data_dir
    assert data_dir.parent == tmp_path
    assert data_dir.name.startswith("stoker-demo-") and not any(data_dir.iterdir())
    assert place.settings.database_url is None
    text = "\n".join(place.lines)
    assert f"{data_dir / 'stoker.db'} (SQLite)" in text
    assert f"stoker serve --data-dir {data_dir}" in text
    assert place.url.startswith("http://127.0.0.1:")
    if place.settings.port != DEFAULT_PORT:  # this machine's 8470 is taken
        assert f"port {DEFAULT_PORT} is in use" in text


def test_a_directory_or_server_asked_for_is_used_and_said_to_show_its_runs(
    tmp_path: Path,
) -> None:
    port = free_port()
    asked = demo_place(
        host="127.0.0.1", port=port, data_dir=tmp_path, database_url=None, server=None
    )
    assert not asked.fresh and asked.settings is not None
    assert asked.settings.data_dir == tmp_path and asked.settings.port == port
    assert "runs already there show too" in "\n".join(asked.lines)
    shared = demo_place(
        host="127.0.0.1", port=None, data_dir=None, database_url=None,
        server="http://127.0.0.1:9999/",
    )  # fmt: skip
    assert shared.settings is None and shared.url == "http://127.0.0.1:9999"
    assert "join its other runs" in "\n".join(shared.lines)
