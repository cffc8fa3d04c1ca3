"""The verdicts and the input-bound levels: one rule for the diagnosis (over a run's window),
the run summary (over the whole run) and the UI (which reads the thresholds from
`GET /api/v1/settings/ui` and the verdicts from the server).

Input-bound levels follow the TensorFlow profiler: highly input-bound when 20 % or more of
step time is spent waiting for input, moderately from 5 %. A leaf module of the server (no
server imports), so the models can use it.
"""

from enum import StrEnum

from pydantic import BaseModel

from trainer_agent import figures

HIGHLY_INPUT_BOUND = 0.20
MODERATELY_INPUT_BOUND = 0.05
# An input-wait share is shown, and judged, to a tenth of a percent: 0.0496 is "5.0 %" and
# moderately input-bound on every surface (API, UI, CLI, evidence; trainer_agent.figures).
SHARE_DECIMALS = figures.SHARE_DECIMALS


class Verdict(StrEnum):
    highly_input_bound = "highly_input_bound"
    moderately_input_bound = "moderately_input_bound"
    not_input_bound = "not_input_bound"
    stalled = "stalled"
    insufficient_data = "insufficient_data"


# The words every surface (UI, CLI, docs) writes for a verdict.
VERDICT_WORDS: dict[Verdict, str] = {
    Verdict.highly_input_bound: "highly input-bound",
    Verdict.moderately_input_bound: "moderately input-bound",
    Verdict.not_input_bound: "not input-bound",
    Verdict.stalled: "stalled",
    Verdict.insufficient_data: "not enough data",
}


def shown_share(share: float) -> float:
    """An input-wait share as every surface shows it (to a tenth of a percent)."""
    return round(share, SHARE_DECIMALS)


class InputBoundThresholds(BaseModel):
    """The shares of step time spent waiting for input from which steps are highly and
    moderately input-bound (a share at a threshold is at that level)."""

    highly_input_bound: float
    moderately_input_bound: float


INPUT_BOUND = InputBoundThresholds(
    highly_input_bound=HIGHLY_INPUT_BOUND, moderately_input_bound=MODERATELY_INPUT_BOUND
)


def input_bound_verdict(
    share: float,
    *,
    highly: float = HIGHLY_INPUT_BOUND,
    moderately: float = MODERATELY_INPUT_BOUND,
) -> Verdict:
    """The input-bound level of a measured input-wait share of step time."""
    # Compared as shown (to a tenth of a percent): a share shown as "5.0 %" is moderately
    # input-bound, and exactly 20 % is 20 % whatever order the floating-point sums happened in.
    shown = shown_share(share)
    if shown >= highly:
        return Verdict.highly_input_bound
    if shown >= moderately:
        return Verdict.moderately_input_bound
    return Verdict.not_input_bound


def run_verdict(share: float | None) -> Verdict | None:
    """A run summary's verdict: the level of its measured input-wait share, null when the
    wait is not measured."""
    return None if share is None else input_bound_verdict(share)
