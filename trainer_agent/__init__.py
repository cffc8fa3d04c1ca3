"""Stoker's in-process agent: a Keras callback and samplers that stream to a Stoker server.

Example:
    from trainer_agent import StokerCallback

    cb = StokerCallback(run_name="baseline", project="cifar10")
    model.fit(train_ds, epochs=3, callbacks=[cb])
"""

from typing import TYPE_CHECKING, Any

__version__ = "0.1.0"
__all__ = ["StokerCallback"]

if TYPE_CHECKING:
    from trainer_agent.callback import StokerCallback


def __getattr__(name: str) -> Any:
    # Keras is imported only when the callback is used, so the samplers work without it.
    if name == "StokerCallback":
        from trainer_agent.callback import StokerCallback

        return StokerCallback
    raise AttributeError(f"module 'trainer_agent' has no attribute {name!r}")
