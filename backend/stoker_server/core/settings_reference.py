"""docs/settings.md, generated from the settings models of both sides: every `STOKER_*`
variable, its default, its unit and what it means.

    python -m stoker_server.core.settings_reference docs/settings.md

(`make settings-doc`) rewrites the page; tests/unit/test_settings_reference.py fails while the
page and the models differ.
"""

import sys
from pathlib import Path
from typing import Any

from pydantic.fields import FieldInfo
from pydantic_core import PydanticUndefined

from stoker_server.core.settings import Settings
from trainer_agent.setting_units import duration_text
from trainer_agent.settings import shown_default, variables

HEADER = """# Settings

Every `STOKER_*` environment variable of both sides. Generated from the settings models
(`backend/stoker_server/core/settings.py`, `trainer_agent/settings.py`) by
`make settings-doc`; a test fails when this page and the models differ.

Durations and sizes read the same on both sides: a number (seconds, bytes) or one with a unit,
`500ms`, `90s`, `2m`, `12h`, `90d`, `1w`; `50GB`, `512MiB` (kB, MB, GB, TB: powers of 1000;
KiB, MiB, GiB, TiB: of 1024). Switches: `1`/`0`, `true`/`false`, `yes`/`no`, `on`/`off`. A value
the server cannot read stops it with the variable named; one the agent cannot read is said
once (naming it and what it accepts) and the default is used, training runs on. An explicit
argument (`StokerCallback(server=...)`) or flag (`stoker serve --port`) wins over the variable.
"""


def _server_kind(name: str, info: FieldInfo) -> str:
    annotation = str(info.annotation)
    if name.endswith("_token"):
        return "token"
    if name.endswith("_url"):
        return "URL"
    if info.annotation is Path:
        return "path"
    if name.endswith("_s"):
        return "duration (s)"
    if name.endswith("_bytes"):
        return "size (bytes)"
    if info.annotation is bool:
        return "switch"
    if "list" in annotation:
        return "list (a,b or JSON)"
    if info.annotation in (int, float) or annotation in ("float | None", "int | None"):
        return "number"
    return "text"


def _server_default(name: str, info: FieldInfo, extra: dict[str, Any]) -> str:
    if "default_text" in extra:
        return str(extra["default_text"])
    default = info.default
    if default is PydanticUndefined or default is None:
        return "none"
    if isinstance(default, bool):
        return "on" if default else "off"
    if isinstance(default, list):
        return "[]"
    if name.endswith("_s"):
        return duration_text(default)
    if name.endswith("_bytes") and default >= 2**20 and default % 2**20 == 0:
        return f"{default // 2**30}GiB" if default % 2**30 == 0 else f"{default // 2**20}MiB"
    if name.endswith("_bytes") and default >= 10**9 and default % 10**9 == 0:
        return f"{default // 10**9}GB"
    return str(default)


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def _row(*cells: str) -> str:
    return "| " + " | ".join(_cell(c) for c in cells) + " |"


def server_rows() -> list[str]:
    rows = []
    for name, info in Settings.model_fields.items():
        extra = info.json_schema_extra if isinstance(info.json_schema_extra, dict) else {}
        flag = str(extra.get("flag", ""))
        rows.append(
            _row(
                f"`STOKER_{name.upper()}`",
                f"`{flag}`" if flag else "",
                _server_default(name, info, extra),
                _server_kind(name, info),
                info.description or "",
            )
        )
    return rows


def agent_rows() -> list[str]:
    rows = []
    for _, variable, default in variables():
        where = [f"`{variable.argument}`"] if variable.argument else []
        where += [f"`{variable.flag}`"] if variable.flag else []
        rows.append(
            _row(
                f"`{variable.env}`",
                ", ".join(where),
                shown_default(variable, default),
                variable.kind,
                variable.meaning,
            )
        )
    return rows


def render() -> str:
    head = [
        "| variable | argument, flag | default | unit | meaning |",
        "| --- | --- | --- | --- | --- |",
    ]
    return "\n".join(
        [
            HEADER,
            "## Server (`stoker serve`, `stoker demo`)",
            "",
            *head,
            *server_rows(),
            "",
            "## Agent (the callback, `Monitor`, `stoker run`, `stoker upload`, `stoker top`)",
            "",
            *head,
            *agent_rows(),
            "",
        ]
    )


def main(argv: list[str]) -> int:
    if len(argv) != 1:
        print("usage: python -m stoker_server.core.settings_reference PATH", file=sys.stderr)
        return 2
    Path(argv[0]).write_text(render(), encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
