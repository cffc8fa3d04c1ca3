"""`stoker` is one command line: one parser lists every command, agent's and server's, and runs
each command's own code; `stoker --help` imports neither the server nor TensorFlow, and
`python -m stoker_server.cli` is the same command."""

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

import stoker_server.cli.main
import trainer_agent.cli.doctor
import trainer_agent.delivery.upload
from stoker_server.core.settings import Settings
from trainer_agent.cli.main import SERVER_FLAGS, main

COMMANDS = ("serve", "demo", "run", "doctor", "upload", "top")


def test_agent_commands_run_the_agent_implementation(monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[tuple[str, tuple[Any, ...], dict[str, Any]]] = []
    monkeypatch.setattr(
        trainer_agent.delivery.upload, "main", lambda *a, **kw: calls.append(("upload", a, kw)) or 0
    )
    monkeypatch.setattr(
        trainer_agent.cli.doctor, "main", lambda *a, **kw: calls.append(("doctor", a, kw)) or 0
    )
    assert main(["upload", "spool", "--server", "http://s", "--token", "t"]) == 0
    assert main(["doctor"]) == 0
    assert calls == [
        ("upload", (Path("spool"),), {"server": "http://s", "token": "t"}),
        ("doctor", (), {}),
    ]


def test_server_commands_run_the_servers_with_the_flags_given(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    seen: list[Settings] = []
    monkeypatch.setattr(
        stoker_server.cli.main,
        "serve",
        lambda args: seen.append(stoker_server.cli.main.settings_from(args)) or 0,
    )
    monkeypatch.setenv("STOKER_HOST", "127.0.0.2")
    assert main(["serve", "--port", "9999", "--data-dir", str(tmp_path)]) == 0
    assert (seen[0].host, seen[0].port, seen[0].data_dir) == ("127.0.0.2", 9999, tmp_path)


def test_a_setting_the_server_cannot_use_is_one_line_per_setting(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("STOKER_RETENTION_TIME_S", "12 parsecs")
    with pytest.raises(SystemExit) as exit_:
        main(["serve", "--port", "0"])
    assert exit_.value.code == 2
    [line] = capsys.readouterr().err.splitlines()
    assert line.startswith("stoker serve: STOKER_RETENTION_TIME_S:") and "parsecs" in line


def test_an_unknown_command_is_refused_once(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_:
        main(["bogus"])
    assert exit_.value.code == 2
    assert "invalid choice: 'bogus'" in capsys.readouterr().err


def test_the_server_flags_defaults_shown_are_the_servers() -> None:
    defaults = Settings(data_dir=Path("~/.stoker"))
    shown = {flag: default for flag, _, default, _ in SERVER_FLAGS}
    assert shown["--host"] == defaults.host and shown["--port"] == str(defaults.port)
    assert shown["--data-dir"] == "~/.stoker" and defaults.database_url is None


# Runs a module as `stoker --help` would, then prints which of these it imported.
PROBE = """
import json, runpy, sys
sys.argv = ["stoker", "--help"]
try:
    runpy.run_module(sys.argv_module, run_name="__main__")
except SystemExit:
    pass
print(json.dumps(sorted({m.split(".")[0] for m in sys.modules} & {"stoker_server", "tensorflow"})))
"""


@pytest.mark.parametrize("module", ["trainer_agent.cli.main", "stoker_server.cli"])
def test_help_lists_every_command_and_imports_neither_server_nor_tensorflow(module: str) -> None:
    code = f"import sys; sys.argv_module = {module!r}\n{PROBE}"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    *help_lines, imported_line = done.stdout.splitlines()
    help_text, imported = "\n".join(help_lines), json.loads(imported_line)
    for name in COMMANDS:
        assert f"    {name} " in help_text, (name, help_text)
    assert "tensorflow" not in imported
    if module.startswith("trainer_agent"):  # the agent's entry point, `stoker` itself
        assert "stoker_server" not in imported
