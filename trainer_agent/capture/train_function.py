"""Stoker's wrapper around Keras's `model.train_function`, recognised by its own marker.

Keras makes `model.train_function` before `on_train_begin` and calls it every step (or every
`steps_per_execution` steps). `watch_train_function` puts a thin Python wrapper in its place:
- under TensorFlow it hands the pipeline view (trainer_agent/capture/pipeline_model.py) each new
  `tf.data` iterator and, when the fit measures input wait, calls the train function with the
  same iterator whose fetches are stamped in its graph (`Stamper`;
  trainer_agent/capture/stamped_iterator.py); the wrapper costs one identity comparison a
  step (one Python call: tests/unit/test_train_function.py counts each backend's);
- under JAX (`train_function(state, iterator)`: the batches are fetched inside it, between
  the batch-begin and batch-end hooks) it passes a `FetchTimer` for the iterator, which
  times each `next()`: the input wait, measured where the step asks for its batch. It also
  stamps when the call returned, on the training thread: on backends that Keras calls
  thread-safe (JAX, PyTorch) the batch-end hook may run later on a thread pool
  (`CallbackList`'s async dispatch), so its own clock is no step's end;
- under PyTorch (`train_function(data)`: the epoch iterator fetched the batches before the
  batch-begin hook) it stamps the return, so the wait is the time from one call's return to
  the next batch-begin (the callback's part, `_fetched_before_begin`).

What it sees goes to the fit's `StepBoundary` (trainer_agent/capture/step_boundary.py), which
installs it: the new iterators as a `watcher`, the returns as `on_return`.

The wrapper is found again by the attribute `STOKER_ORIGINAL`, never by `__wrapped__`: on
tf_keras (and TF <= 2.15's tf.keras) `model.train_function` is a `tf.function`, whose
`__wrapped__` is the undecorated Python function; unwrapping that ran every step eagerly.
Nothing the wrapper holds outlives the fit: `unwatch_train_function` puts the original back
and lets go of the iterator.
"""

import logging
import sys
import time
from collections.abc import Callable, Iterator
from typing import Any, Protocol

from trainer_agent.capture.input_wait import Fetch, batch_size_of

log = logging.getLogger("trainer_agent")

_perf_counter = time.perf_counter
# The attribute of Stoker's wrapper that holds the train function it wraps.
STOKER_ORIGINAL = "__stoker_original_train_function__"


class IteratorWatcher(Protocol):
    def watch(self, iterator: Any) -> None: ...


class Stamper(Protocol):
    """Makes the train function's iterator one whose fetches are stamped (TensorFlow)."""

    def stamped(self, iterator: Any) -> Any:
        """The iterator to give the train function for `iterator` (itself if unstamped)."""

    def failed(self, error: BaseException) -> None:
        """Tracing the stamps raised `error`: the fit went on with the plain iterator."""


# Called on the training thread when a train-function call returned: (when, the stamps of
# the batches it fetched itself or None where the backend fetches elsewhere).
ReturnedCallback = Callable[[float, list[Fetch] | None], None]


class FetchTimer:
    """An iterator that stamps each `next()` of the one it wraps: handed over, batch size,
    asked, as a plain tuple (`Fetch`, in the order of `Stamp`'s fields).

    Its `__next__` runs once per step on the training thread: two clock reads, the fetch and
    one append (tests/unit/test_train_function.py counts its calls). The batch size is read
    along the path to the element's first array, found at the first element.
    """

    __slots__ = ("_iterator", "_path", "stamps")

    def __init__(self, iterator: Iterator[Any]) -> None:
        self._iterator = iterator
        self._path: tuple[Any, ...] | None = None
        self.stamps: list[Fetch] = []

    def __iter__(self) -> "FetchTimer":
        return self

    def __next__(self) -> Any:
        asked = _perf_counter()
        element = next(self._iterator)  # StopIteration passes through: the data ran out
        got = _perf_counter()
        try:
            leaf = element
            for key in self._path:  # type: ignore[union-attr]  # None: found below
                leaf = leaf[key]
            size = leaf.shape[0]
        except Exception:
            size = self._first_leaf(element)
        self.stamps.append((got, size, asked))
        return element

    def _first_leaf(self, element: Any) -> int | None:
        """The batch size of `element` (None when it has none), and the path to its first
        array kept for the next elements."""
        path: list[Any] = []
        leaf = element
        while isinstance(leaf, tuple | list | dict) and leaf:
            key = next(iter(leaf)) if isinstance(leaf, dict) else 0
            path.append(key)
            leaf = leaf[key]
        self._path = tuple(path)
        return batch_size_of(leaf)


def keras_backend(model: Any) -> str:
    """The backend a Keras 3 model trains on ("tensorflow", "jax", "torch", ...); "tensorflow"
    for Keras 2 (tf_keras, TF <= 2.15's tf.keras)."""
    module = type(model).__module__
    keras = sys.modules.get("keras")
    if keras is None or module.startswith("tf_keras") or ".engine." in module:
        return "tensorflow"
    try:
        return str(keras.config.backend())
    except Exception:
        return "tensorflow"


def watch_train_function(
    model: Any,
    watcher: IteratorWatcher,
    on_return: ReturnedCallback | None = None,
    stamp: Stamper | None = None,
) -> str:
    """Wrap `model.train_function`: `watcher` is handed each new `tf.data` iterator; under
    JAX and PyTorch `on_return` is told of each call's return (and under JAX, its fetches).
    Under TensorFlow, `stamp` (when given) makes each new iterator the one the function
    fetches from: the same iterator with its fetches stamped (input wait).

    Returns how steps are timed: "returns" when `on_return` will be called, "hooks" when the
    batch hooks must time them (TensorFlow, or no wrapper)."""
    current = getattr(model, "train_function", None)
    # A wrapper of ours is left over only by a fit that raised before on_train_end.
    original = getattr(current, STOKER_ORIGINAL, current)
    if not callable(original):
        log.info("Stoker: no train_function to watch; the pipeline view stays empty")
        return "hooks"
    backend = keras_backend(model)
    if backend == "jax" and on_return is not None:
        train_function = _jax_wrapper(original, on_return)
    elif backend != "tensorflow" and on_return is not None:
        train_function = _returns_wrapper(original, on_return)
    else:
        train_function = _tf_wrapper(original, watcher, stamp)
        on_return = None
    setattr(train_function, STOKER_ORIGINAL, original)
    model.train_function = train_function
    return "hooks" if on_return is None else "returns"


def _tf_wrapper(
    original: Callable[..., Any], watcher: IteratorWatcher, stamp: Stamper | None
) -> Callable[..., Any]:
    # The iterator Keras passes, what the train function is given for it (the same, stamped),
    # and whether a call with the stamped iterator has succeeded yet.
    seen: list[Any] = [None, None, False]

    def train_function(iterator: Any, *args: Any, **kwargs: Any) -> Any:
        if iterator is not seen[0]:
            seen[0] = seen[1] = iterator
            watcher.watch(iterator)
            if stamp is not None:
                seen[1] = stamp.stamped(iterator)
        given = seen[1]
        if given is iterator or seen[2]:
            return original(given, *args, **kwargs)
        return _first_stamped_call(original, iterator, given, args, kwargs)

    def _first_stamped_call(
        original: Callable[..., Any], iterator: Any, given: Any, args: Any, kwargs: Any
    ) -> Any:
        """The first call with a stamped iterator traces the stamps: if that fails (an
        iterator TensorFlow builds differently), the fit goes on unstamped."""
        try:
            result = original(given, *args, **kwargs)
        except StopIteration:
            raise
        except Exception as error:
            if type(error).__module__.startswith("tensorflow.python.framework.errors"):
                raise  # raised while running: the data's or the step's, not the tracing's
            assert stamp is not None
            stamp.failed(error)
            seen[1] = iterator
            return original(iterator, *args, **kwargs)
        seen[2] = True
        return result

    def release() -> None:
        seen[0] = seen[1] = None
        seen[2] = False

    train_function.stoker_release = release  # type: ignore[attr-defined]
    return train_function


def _jax_wrapper(original: Callable[..., Any], on_return: ReturnedCallback) -> Callable[..., Any]:
    # Keras's JAX trainer calls train_function(state, iterator): the same iterator all epoch.
    timer: list[FetchTimer | None] = [None]
    seen: list[Any] = [None]

    def train_function(state: Any, iterator: Any, *args: Any, **kwargs: Any) -> Any:
        if iterator is not seen[0]:
            seen[0] = iterator
            timer[0] = FetchTimer(iterator) if hasattr(iterator, "__next__") else None
        fetches = timer[0]
        if fetches is None:
            result = original(state, iterator, *args, **kwargs)
            on_return(_perf_counter(), None)
            return result
        result = original(state, fetches, *args, **kwargs)
        stamps, fetches.stamps = fetches.stamps, []
        on_return(_perf_counter(), stamps)
        return result

    def release() -> None:
        seen[0] = timer[0] = None

    train_function.stoker_release = release  # type: ignore[attr-defined]
    return train_function


def _returns_wrapper(
    original: Callable[..., Any], on_return: ReturnedCallback
) -> Callable[..., Any]:
    def train_function(*args: Any, **kwargs: Any) -> Any:
        result = original(*args, **kwargs)
        on_return(_perf_counter(), None)
        return result

    train_function.stoker_release = lambda: None  # type: ignore[attr-defined]
    return train_function


def unwatch_train_function(model: Any) -> None:
    """Put Keras's own train function back (a no-op when Stoker's wrapper is not there)."""
    current: Any = getattr(model, "train_function", None)
    original = getattr(current, STOKER_ORIGINAL, None)
    if original is None:
        return
    current.stoker_release()
    model.train_function = original


def is_watched(model: Any) -> bool:
    return hasattr(getattr(model, "train_function", None), STOKER_ORIGINAL)
