"""The verdict event's text: the verdict words and the input-wait rounding of every surface."""

from stoker_server.core.levels import Verdict
from stoker_server.diagnosis.effects import verdict_event_message
from stoker_server.diagnosis.verdict import Diagnosis


def _diagnosis(verdict: Verdict, share: float | None) -> Diagnosis:
    return Diagnosis(
        run_id=1, verdict=verdict, input_wait_share=share, source="measured", window_s=30,
        steps_in_window=100, evidence=[], advice=[],
    )  # fmt: skip


def test_a_change_is_written_in_the_verdict_words_with_the_shown_share() -> None:
    before = _diagnosis(Verdict.not_input_bound, 0.031)
    after = _diagnosis(Verdict.moderately_input_bound, 0.0496)
    assert verdict_event_message(after, before) == (
        "verdict not input-bound → moderately input-bound (input wait 5.0 % of step time)"
    )


def test_a_first_verdict_has_no_from_and_a_share_keeps_its_tenth() -> None:
    first = _diagnosis(Verdict.highly_input_bound, 0.2049)
    assert verdict_event_message(first, None) == (
        "verdict highly input-bound (input wait 20.5 % of step time)"
    )


def test_a_verdict_without_a_measured_share_says_no_share() -> None:
    stalled = _diagnosis(Verdict.stalled, None)
    before = _diagnosis(Verdict.highly_input_bound, 0.4)
    assert verdict_event_message(stalled, before) == "verdict highly input-bound → stalled"
