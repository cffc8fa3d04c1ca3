"""One source per rule: the verdict words and the input-bound thresholds are the server's
(stoker_server/core/levels.py). The browser and `stoker top` show the words the server sends
with each verdict (`verdict_label` of a diagnosis and of a run summary) and read the
thresholds from `GET /api/v1/settings/ui`; a copy of either in their code fails here."""

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
# "stalled" also names a run's state in plain words; the verdicts' other words name nothing
# else.
WORDS = [words for words in VERDICT_WORDS.values() if " " in words]


def _threshold_comparison() -> re.Pattern[str]:
    """A comparison with one of the thresholds' values, as a copy of them would be written."""
    thresholds = (HIGHLY_INPUT_BOUND, MODERATELY_INPUT_BOUND)
    values = "|".join(re.escape(f"{v:g}").replace(r"0\.", r"0?\.") for v in thresholds)
    return re.compile(rf"[<>]=?\s*(?:{values})0*\b")


def test_the_rule_is_where_the_renderers_look_for_a_copy() -> None:
    assert len(RENDERERS) > 50 and len(WORDS) == 4
    assert _threshold_comparison().search("share >= 0.2") and _threshold_comparison().search(
        "x<.05"
    )


@pytest.mark.parametrize("path", RENDERERS, ids=lambda p: str(Path(p).relative_to(REPO)))
def test_no_renderer_holds_a_copy_of_the_verdict_words_or_thresholds(path: Path) -> None:
    text = path.read_text()
    copied = [words for words in WORDS if words in text.lower()]
    assert not copied, f"{path} writes the verdict words {copied}: render the server's"
    compared = _threshold_comparison().findall(text)
    assert not compared, f"{path} compares with an input-bound threshold: read the server's"
