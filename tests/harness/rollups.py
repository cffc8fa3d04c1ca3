"""What the step rollups must hold: every step sent, folded by hand into each tier."""

from collections import defaultdict
from collections.abc import Iterable

import pytest
from sqlalchemy import text
from sqlalchemy.engine import Connection

from stoker_server.ingest.agent_writes import ROLLUP_WIDTHS

# (rank, step, dur, wait or None) of each step sent
SentStep = tuple[int, int, float, float | None]


def expected_rollups(sent: Iterable[SentStep], width: int) -> dict[tuple[int, int], list]:
    """Per (rank, bucket): n, step_max, dur_sum, dur_min, dur_max, wait_sum, wait_n."""
    expected: dict[tuple[int, int], list] = defaultdict(
        lambda: [0, -1, 0.0, float("inf"), 0.0, 0.0, 0]
    )
    for rank, step, dur, wait in sent:
        bucket = expected[(rank, step // width)]
        bucket[0] += 1
        bucket[1] = max(bucket[1], step)
        bucket[2] += dur
        bucket[3], bucket[4] = min(bucket[3], dur), max(bucket[4], dur)
        if wait is not None:
            bucket[5] += wait
            bucket[6] += 1
    return expected


def assert_rollups_hold(connection: Connection, run_id: int, sent: list[SentStep]) -> None:
    """Every tier of the run's stored rollups equals `sent` folded by hand (sums to 1e-12)."""
    for width in ROLLUP_WIDTHS:
        expected = expected_rollups(sent, width)
        stored = connection.execute(
            text(
                "SELECT rank, bucket, n, step_max, dur_sum, dur_min, dur_max, wait_sum, "
                "wait_n FROM steprollup WHERE run_id = :r AND width = :w ORDER BY rank, bucket"
            ),
            {"r": run_id, "w": width},
        ).all()
        assert [(r[0], r[1]) for r in stored] == sorted(expected), width
        for row in stored:
            n, step_max, dur_sum, dur_min, dur_max, wait_sum, wait_n = expected[row[:2]]
            assert (row[2], row[3], row[8]) == (n, step_max, wait_n)
            assert (row[5], row[6]) == (dur_min, dur_max)
            assert row[4] == pytest.approx(dur_sum, rel=1e-12)
            assert row[7] == pytest.approx(wait_sum, rel=1e-12, abs=1e-15)
