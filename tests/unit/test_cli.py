"""`python -m stoker_server.cli` and `stoker` are one command line: the agent's commands (doctor,
upload) have one implementation, trainer_agent.cli.main's, and the server's (serve, demo) are
stoker_server.cli's, whichever entry point is called."""

from pathlib import Path
from typing import Any

import pytest

import trainer_agent.cli.doctor
import trainer_agent.delivery.upload
from stoker_server.cli import main as server_main
from trainer_agent.cli.main import main as agent_main


@pytest.mark.parametrize("entry", [server_main, agent_main])
def test_agent_commands_run_the_agent_implementation(
    entry: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    calls: list[tuple[str, tuple[Any, ...], dict[str, Any]]] = []
    monkeypatch.setattr(
        trainer_agent.delivery.upload, "main", lambda *a, **kw: calls.append(("upload", a, kw)) or 0
    )
    monkeypatch.setattr(
        trainer_agent.cli.doctor, "main", lambda *a, **kw: calls.append(("doctor", a, kw)) or 0
    )
    assert entry(["upload", "spool", "--server", "http://s", "--token", "t"]) == 0
    assert entry(["doctor"]) == 0
    assert calls == [
        ("upload", (Path("spool"),), {"server": "http://s", "token": "t"}),
        ("doctor", (), {}),
    ]


@pytest.mark.parametrize("entry", [server_main, agent_main])
def test_an_unknown_command_is_refused_once(entry: Any, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_:
        entry(["bogus"])
    assert exit_.value.code == 2
    assert "invalid choice: 'bogus'" in capsys.readouterr().err


def test_server_commands_are_the_servers(capsys: pytest.CaptureFixture[str]) -> None:
    for entry in (server_main, agent_main):
        with pytest.raises(SystemExit):
            entry(["serve", "--help"])
        assert "--database-url" in capsys.readouterr().out
