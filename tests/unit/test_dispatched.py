"""One fit's JAX executions matched to their device time (trainer_agent/capture/dispatched.py)."""

from trainer_agent.capture.dispatched import DispatchedSteps
from trainer_agent.capture.input_wait import Execution, Row


def _call(first: int, begin: float, end: float, *, epoch_start: bool = False) -> Execution:
    fetched = [(begin + 0.001, 16, begin)]
    return Execution(first, 1, begin, end, epoch_start, returned=end, fetched=fetched)


def test_calls_are_matched_in_order_once_their_device_time_is_known() -> None:
    done: dict[int, float] = {}
    rows: list[Row] = []
    steps = DispatchedSteps(done, rows.extend)
    for call in (_call(0, 1.0, 1.1, epoch_start=True), _call(1, 1.1, 1.2), _call(2, 1.2, 1.3)):
        steps.closed(call)
    done[0], done[2] = 1.5, 2.5  # call 1's outputs are not ready yet
    steps.before_flush()
    assert [row[0] for row in rows] == [0]  # call 2 waits behind call 1
    done[1] = 2.0
    steps.before_flush()
    assert [row[0] for row in rows] == [0, 1, 2]
    assert [row[1] for row in rows] == [1.0, 1.5, 2.0]  # each from when the device was free


def test_an_epochs_end_matches_every_call_and_an_ended_fit_records_only_its_own() -> None:
    """The sender of a fit that ended may still flush while the next fit runs: each fit's
    calls go to its own run, whichever thread matches them."""
    first_rows: list[Row] = []
    second_rows: list[Row] = []
    first = DispatchedSteps({}, first_rows.extend)
    first.closed(_call(0, 1.0, 1.1, epoch_start=True))
    first.resolve(final=True)  # no device time seen: the call ends where it closed
    assert [(row[0], row[1] + row[2]) for row in first_rows] == [(0, 1.1)]
    second = DispatchedSteps({0: 3.5}, second_rows.extend)
    second.closed(_call(0, 3.0, 3.1, epoch_start=True))
    first.before_flush()  # the ended fit's sender, late
    assert len(first_rows) == 1 and second_rows == []
    second.before_flush()
    assert [row[0] for row in second_rows] == [0]
