"""Stoker's wrapper around Keras's `model.train_function`, recognised by its own marker.

Keras makes `model.train_function` before `on_train_begin` and calls it with the epoch's
iterator every step. `watch_train_function` puts a thin Python wrapper in its place so the
pipeline view (trainer_agent/pipeline_model.py) sees the iterator; the wrapper costs one
identity comparison a step.

The wrapper is found again by the attribute `STOKER_ORIGINAL`, never by `__wrapped__`: on
tf_keras (and TF <= 2.15's tf.keras) `model.train_function` is a `tf.function`, whose
`__wrapped__` is the undecorated Python function; unwrapping that ran every step eagerly.
Nothing the wrapper holds outlives the fit: `unwatch_train_function` puts the original back
and lets go of the iterator.
"""

import logging
from typing import Any, Protocol

log = logging.getLogger("trainer_agent")

# The attribute of Stoker's wrapper that holds the train function it wraps.
STOKER_ORIGINAL = "__stoker_original_train_function__"


class IteratorWatcher(Protocol):
    def watch(self, iterator: Any) -> None: ...


def watch_train_function(model: Any, watcher: IteratorWatcher) -> None:
    """Wrap `model.train_function` so `watcher` is handed each new iterator."""
    if _keras2_under_a_strategy(model):
        # Keras 2 (tf_keras, TF <= 2.15's tf.keras) under a distribution strategy: wrapping its
        # train function there made the input-wait stamps miss (tested with MirroredStrategy).
        log.info("Stoker: the pipeline view is off for Keras 2 under a distribution strategy")
        return
    current = getattr(model, "train_function", None)
    # A wrapper of ours is left over only by a fit that raised before on_train_end.
    original = getattr(current, STOKER_ORIGINAL, current)
    if not callable(original):
        log.info("Stoker: no train_function to watch; the pipeline view stays empty")
        return
    seen: list[Any] = [None]

    def train_function(iterator: Any, *args: Any, **kwargs: Any) -> Any:
        if iterator is not seen[0]:
            seen[0] = iterator
            watcher.watch(iterator)
        return original(iterator, *args, **kwargs)

    setattr(train_function, STOKER_ORIGINAL, original)
    train_function.stoker_release = lambda: seen.__setitem__(0, None)  # type: ignore[attr-defined]
    model.train_function = train_function


def unwatch_train_function(model: Any) -> None:
    """Put Keras's own train function back (a no-op when Stoker's wrapper is not there)."""
    current = getattr(model, "train_function", None)
    original = getattr(current, STOKER_ORIGINAL, None)
    if original is None:
        return
    current.stoker_release()
    model.train_function = original


def is_watched(model: Any) -> bool:
    return hasattr(getattr(model, "train_function", None), STOKER_ORIGINAL)


def _keras2_under_a_strategy(model: Any) -> bool:
    keras2 = ".engine." in type(model).__module__ or type(model).__module__.startswith("tf_keras")
    strategy = getattr(model, "distribute_strategy", None)
    return keras2 and strategy is not None and "Default" not in type(strategy).__name__
