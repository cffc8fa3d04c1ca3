"""docs/settings.md is the settings models' own reference: it fails here while they differ,
and every `STOKER_*` variable the code reads is in it."""

import re
from pathlib import Path

from stoker_server.core.settings_reference import render

ROOT = Path(__file__).resolve().parents[2]
PAGE = ROOT / "docs" / "settings.md"
# A variable read from the environment, by name: environ.get("STOKER_X"), environ["STOKER_X"],
# getenv("STOKER_X").
READ = re.compile(r"""(?:environ(?:\.get)?[\[(]|getenv\()\s*["'](STOKER_[A-Z0-9_]+)["']""")


def test_the_settings_page_is_generated_from_the_models() -> None:
    assert PAGE.read_text(encoding="utf-8") == render(), (
        "docs/settings.md differs from the settings models: run `make settings-doc`"
    )


def test_every_variable_the_code_reads_is_on_the_page() -> None:
    page = PAGE.read_text(encoding="utf-8")
    documented = set(re.findall(r"^\| `(STOKER_[A-Z0-9_]+)`", page, flags=re.MULTILINE))
    read: dict[str, str] = {}
    for package in (ROOT / "trainer_agent", ROOT / "backend" / "stoker_server"):
        for path in package.rglob("*.py"):
            for name in READ.findall(path.read_text(encoding="utf-8")):
                read.setdefault(name, str(path.relative_to(ROOT)))
    assert read, "the pattern finds no read at all: it no longer matches the code"
    missing = {name: where for name, where in read.items() if name not in documented}
    assert not missing, f"read by hand and not in the settings models: {missing}"
