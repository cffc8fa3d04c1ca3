"""Stoker's in-process agent: a Keras callback, a custom-loop monitor, and samplers.

Example:
    from trainer_agent import StokerCallback

    cb = StokerCallback(run_name="baseline", project="cifar10")
    model.fit(cb.wrap(train_ds), epochs=3, callbacks=[cb])

Or, without changing the script: `trainer_agent.autolog()` (or `stoker run -- python train.py`).
"""

from typing import TYPE_CHECKING, Any

# Imported now (it imports no Keras): `trainer_agent.autolog` is the function from the start.
from trainer_agent.capture.autolog import autolog

__version__ = "0.1.0"
__all__ = ["Monitor", "StokerCallback", "autolog", "flush"]

if TYPE_CHECKING:
    from trainer_agent.capture.callback import StokerCallback
    from trainer_agent.capture.monitor import Monitor
    from trainer_agent.capture.session import flush


def __getattr__(name: str) -> Any:
    # Keras is imported only when the callback is used, so the samplers work without it.
    if name == "StokerCallback":
        from trainer_agent.capture.callback import StokerCallback

        return StokerCallback
    if name == "Monitor":
        from trainer_agent.capture.monitor import Monitor

        return Monitor
    if name == "flush":  # wait until the runs that ended are delivered (fit() does not)
        from trainer_agent.capture.session import flush

        return flush
    raise AttributeError(f"module 'trainer_agent' has no attribute {name!r}")
