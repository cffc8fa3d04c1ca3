"""The server and `stoker top` write each quantity with one function (trainer_agent/figures.py),
as the UI does: both are checked against the same cases (frontend/src/app/formats.cases.json),
so a figure in the evidence, an alert, an event or `stoker top` reads as the card beside it."""

import json
from collections.abc import Callable
from typing import Any

import pytest

from tests.harness.support import REPO
from trainer_agent.figures import (
    count_text,
    duration_text,
    lost_time_text,
    ms_text,
    percent_text,
    rate_text,
    share_text,
)

CASES: dict[str, Any] = json.loads(
    (REPO / "frontend" / "src" / "app" / "formats.cases.json").read_text()
)
WRITERS: dict[str, Callable[[Any], str]] = {
    "share": share_text,
    "percent": percent_text,
    "ms": ms_text,
    "count": count_text,
    "rate": rate_text,
    "duration": duration_text,
    "lost": lost_time_text,
}


@pytest.mark.parametrize(
    ("quantity", "value", "text"),
    [(q, v, t) for q in WRITERS for v, t in CASES[q]],
)
def test_the_server_writes_each_quantity_as_the_ui_does(
    quantity: str, value: float, text: str
) -> None:
    assert WRITERS[quantity](value) == text


def test_every_quantity_of_the_cases_has_its_server_writer() -> None:
    assert set(CASES) - {"_"} == set(WRITERS)
