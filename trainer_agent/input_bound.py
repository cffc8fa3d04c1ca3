"""The input-bound thresholds: one source for the server and the agent.

After the TensorFlow profiler: steps waiting for input 20 % or more of their time are at the
highest input-bound level, from 5 % at the moderate one (the server's levels.VERDICT_WORDS
names the levels). The server's verdicts (stoker_server/core/levels.py,
whose thresholds the UI and `stoker top` read over the API) and the agent's own judgements
(`stoker tune`) import them from here, in the base install, because the agent has no server to
import; tests/unit/test_one_source.py fails on a copy anywhere else.
"""

from trainer_agent.figures import SHARE_DECIMALS

HIGHLY_INPUT_BOUND = 0.20
MODERATELY_INPUT_BOUND = 0.05


def highly_input_bound(share: float) -> bool:
    """Whether steps waiting for input `share` of their time are at the highest level, the
    share judged as every surface shows it (to a tenth of a percent), as the server does."""
    return round(share, SHARE_DECIMALS) >= HIGHLY_INPUT_BOUND
