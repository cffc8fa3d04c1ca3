"""What reads badly on a page, from the browser's own element measurements (no pixels):

- the page scrolls sideways;
- an element's content is wider than its box (`scrollWidth > clientWidth`), charts' canvases
  and the elements that scroll on purpose (`overflow-x: auto|scroll`, when `scrolling_ok`) apart;
- an element with text of its own sticks out of its parent box;
- a word is broken across lines (a range over it has boxes on two lines): words up to
  `LONG_WORD` characters; longer ones (an op name of 80 characters) may wrap anywhere. In
  running text (more than three words) a line may break after a hyphen, as in print; a
  `<wbr>` (after the dots of `fit_params.epochs`) is a break between two words;
- a badge (status, verdict, alert state) takes more than one line.

`layout_problems(page)` returns them as short strings, each naming the element and the text.
"""

from pathlib import Path
from typing import Any

# Words longer than this may wrap where they must (TensorFlow op names, URLs, file paths).
LONG_WORD = 30

# The function Playwright evaluates in the page (its header comment left out).
PROBE_JS = "\n".join(
    line
    for line in (Path(__file__).parent / "page_layout.js").read_text().splitlines()
    if not line.startswith("//")
)


def layout_problems(page: Any, *, scrolling_ok: bool = False) -> list[str]:
    """What reads badly on `page` now (see the module's docstring)."""
    problems: list[str] = page.evaluate(
        PROBE_JS, {"longWord": LONG_WORD, "scrollingOk": scrolling_ok}
    )
    return problems
