"""The script's own random stream, untouched by what the agent imports.

A seeded script's unseeded Keras initializers (Keras 3's and tf_keras's default seeds) draw
from Python's global `random` stream, so anything else that draws from it between two models
changes the second model's weights. Some of the agent's dependencies draw at import time
(httpx imports rich, whose `rich.style` calls `random.getrandbits`); their imports run inside
`script_random_untouched()`. Import them on the training thread only: restoring the state from
another thread would undo the script's own draws made meanwhile.
"""

import contextlib
import random
from collections.abc import Iterator


@contextlib.contextmanager
def script_random_untouched() -> Iterator[None]:
    """Python's global random stream as it was before the block, whatever the block drew."""
    state = random.getstate()
    try:
        yield
    finally:
        random.setstate(state)
