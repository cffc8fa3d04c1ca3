"""One source per rule: the verdict words are the server's (stoker_server/core/levels.py), the
input-bound thresholds the agent's (trainer_agent/input_bound.py, which levels.py imports). The
browser and `stoker top` show the words the server sends with each verdict (`verdict_label` of
a diagnosis and of a run summary) and read the thresholds from `GET /api/v1/settings/ui`; the
server's and the agent's Python import the thresholds. A copy of either in their code fails
here: a comparison with a threshold's value, or a name for one (`INPUT_BOUND_SHARE = 0.2`)."""

import re
from pathlib import Path

import pytest

from stoker_server.core.levels import HIGHLY_INPUT_BOUND, MODERATELY_INPUT_BOUND, VERDICT_WORDS
from tests.harness.support import REPO

# What renders verdicts: the UI's code (not its tests, their helpers in testing.ts, nor the
# generated API types) and the agent package's (`stoker top`, the CLI).
RENDERERS = sorted(
    [
        *(
            path
            for path in (REPO / "frontend" / "src").rglob("*.ts")
            if not path.name.endswith(".test.ts") and path.name not in ("api.gen.ts", "testing.ts")
        ),
        *(REPO / "trainer_agent").rglob("*.py"),
    ]
)
# Where a copy of the thresholds could be written: the renderers and the server's Python, all
# but the two modules that hold them.
THRESHOLD_HOLDERS = (
    REPO / "trainer_agent" / "input_bound.py",
    REPO / "backend" / "stoker_server" / "core" / "levels.py",
)
THRESHOLD_READERS = sorted(
    {
        *RENDERERS,
        *(
            path
            for path in (REPO / "backend" / "stoker_server").rglob("*.py")
            if "migrations" not in path.parts
        ),
    }
    - set(THRESHOLD_HOLDERS)
)
# "stalled" also names a run's state in plain words; the verdicts' other words name nothing
# else.
WORDS = [words for words in VERDICT_WORDS.values() if " " in words]


def _threshold_values() -> str:
    thresholds = (HIGHLY_INPUT_BOUND, MODERATELY_INPUT_BOUND)
    return "|".join(re.escape(f"{v:g}").replace(r"0\.", r"0?\.") for v in thresholds)


def _threshold_comparison() -> re.Pattern[str]:
    """A comparison with one of the thresholds' values, as a copy of them would be written."""
    return re.compile(rf"[<>]=?\s*(?:{_threshold_values()})0*\b")


def _named_threshold() -> re.Pattern[str]:
    """A name for an input-bound level or wait share given a threshold's value: a copy kept
    under a name of its own (`INPUT_BOUND_SHARE = 0.2`, `const highlyBound: number = .2`)."""
    name = r"\w*(?:bound|wait_?share)\w*"
    return re.compile(
        rf"\b{name}\s*(?::[^=\n]+)?=\s*(?:{_threshold_values()})0*\b(?!\.)", re.IGNORECASE
    )


def test_the_rule_is_where_the_renderers_look_for_a_copy() -> None:
    assert len(RENDERERS) > 50 and len(WORDS) == 4
    assert _threshold_comparison().search("share >= 0.2") and _threshold_comparison().search(
        "x<.05"
    )
    named = _named_threshold()
    for copy in ("INPUT_BOUND_SHARE = 0.2", "HIGHLY_INPUT_BOUND = 0.20",
                 "const highlyBound: number = .2;", "wait_share_limit=0.05"):  # fmt: skip
        assert named.search(copy), copy
    for other in ("ESCAPE_WAIT_S = 0.05", "NOISE_FLOOR = 0.05", "INPUT_BOUND = 0.25",
                  "HIGHLY_INPUT_BOUND = 0.2e3"):  # fmt: skip
        assert not named.search(other), other
    assert len(THRESHOLD_READERS) > len(RENDERERS)
    assert all(path.exists() for path in THRESHOLD_HOLDERS)


@pytest.mark.parametrize("path", RENDERERS, ids=lambda p: str(Path(p).relative_to(REPO)))
def test_no_renderer_holds_a_copy_of_the_verdict_words_or_thresholds(path: Path) -> None:
    text = path.read_text()
    copied = [words for words in WORDS if words in text.lower()]
    assert not copied, f"{path} writes the verdict words {copied}: render the server's"
    compared = _threshold_comparison().findall(text)
    assert not compared, f"{path} compares with an input-bound threshold: read the server's"


@pytest.mark.parametrize("path", THRESHOLD_READERS, ids=lambda p: str(Path(p).relative_to(REPO)))
def test_no_code_keeps_a_named_copy_of_the_thresholds(path: Path) -> None:
    text = path.read_text()
    named = [match.group(0) for match in _named_threshold().finditer(text)]
    assert not named, f"{path} keeps a copy of an input-bound threshold {named}: import it"
    if path not in RENDERERS:
        compared = _threshold_comparison().findall(text)
        assert not compared, f"{path} compares with an input-bound threshold: import it"
