"""`autolog()`: every Keras `Model.fit` monitored, without changing the training script.

In the manner of `mlflow.tensorflow.autolog()`, `autolog()` replaces `fit` on the `Model` class
of each Keras it finds: `keras` (Keras 3, or Keras 2 under TensorFlow <= 2.15) and `tf_keras`
(what `tf.keras` names with `TF_USE_LEGACY_KERAS=1`). A Keras already imported is patched at
once; one not imported yet is patched when it is, by an import hook, so `autolog()` itself
imports neither TensorFlow nor Keras.

The patched `fit` adds a `StokerCallback` (one run per `fit`) unless the caller passed one,
and, under TensorFlow, wraps a `tf.data.Dataset` given as `x` with `cb.wrap` so input wait is
measured. Under TensorFlow other training data (NumPy arrays, generators, `PyDataset`) still
gets step timing and samplers; the server then infers input wait. Under JAX every input's
wait is measured where the train function fetches each batch
(trainer_agent/capture/train_function.py). Validation data is never wrapped. If anything in the
patch fails, it logs once and calls the original `fit` unchanged. `autolog(disable=True)` restores
the original `fit`; calling `autolog()` again only updates the options.
"""

import functools
import importlib.abc
import importlib.machinery
import logging
import sys
import threading
from collections.abc import Callable
from types import ModuleType
from typing import TYPE_CHECKING, Any, Protocol, Unpack, cast

from trainer_agent import log_once
from trainer_agent.config import RunArguments, RunOptions, takes_run_options

if TYPE_CHECKING:
    import inspect

log = logging.getLogger("trainer_agent")

# The modules whose `Model.fit` is patched.
KERAS_MODULES = ("keras", "tf_keras")

_MISSING = object()
_lock = threading.RLock()
# The StokerCallback options of every patched fit; None while autolog is off.
_options: RunOptions | None = None
# Keras module name -> (its Model class, the `fit` in that class's own __dict__ before).
_patched: dict[str, tuple[Any, Any]] = {}
_hook: "_PatchOnImport | None" = None
_inside_fit = threading.local()


class FitHooks(Protocol):
    """What `stoker tune` does to a monitored fit (trainer_agent/tune/trial.py), given once
    with `set_fit_hooks`."""

    def prepare(
        self, model: Any, keras_name: str, arguments: dict[str, Any], callback: Any
    ) -> bool:
        """Change the fit's bound `arguments` (its `callbacks` already hold the Stoker
        `callback`, its `x` is not wrapped yet) before it runs; False leaves the fit
        unmonitored."""
        ...

    def declined(self, reason: str) -> None:
        """A fit autolog leaves alone (the script passes its own Stoker callback)."""
        ...


_fit_hooks: FitHooks | None = None


def set_fit_hooks(hooks: FitHooks | None) -> None:
    """Hand every monitored fit to `hooks` before it runs (None: no more)."""
    global _fit_hooks
    _fit_hooks = hooks


@takes_run_options
def autolog(*, disable: bool = False, **options: Unpack[RunArguments]) -> None:
    """Monitor every `Model.fit` of this process with a `StokerCallback` (one run per `fit`).

    Takes the callback's keyword arguments (`trainer_agent.config.RunOptions`).
    `disable=True` restores Keras's own `fit`.

    Example:
        import trainer_agent
        trainer_agent.autolog(project="cifar10", tags=["baseline"])
        model.fit(train_ds, epochs=3)  # streamed to Stoker, input wait measured
    """
    global _options, _hook
    with _lock:
        if disable:
            _options = None
            log_once.forget()  # a later autolog() says again what it cannot monitor
            _remove_hook()
            for name in list(_patched):
                _restore(name)
            return
        _options = RunOptions.of("autolog", options)
        for name in KERAS_MODULES:
            module = sys.modules.get(name)
            if module is not None:
                _patch(name, module)
        if any(name not in _patched for name in KERAS_MODULES) and _hook is None:
            _hook = _PatchOnImport()
            sys.meta_path.insert(0, _hook)


def _patch(name: str, module: ModuleType) -> None:
    """Replace `fit` on `module.Model`, once; never raises."""
    with _lock:
        if name in _patched or _options is None:
            return
        try:
            model_class = module.Model
            own = model_class.__dict__.get("fit", _MISSING)
            model_class.fit = _patched_fit(model_class.fit, name)
            _patched[name] = (model_class, own)
        except Exception as error:
            log_once.warn_once(
                f"patch:{name}", "Stoker autolog cannot patch %s.Model.fit (%r)", name, error
            )
        if _hook is not None and all(name in _patched for name in KERAS_MODULES):
            _remove_hook()


def _restore(name: str) -> None:
    model_class, own = _patched.pop(name)
    if not getattr(model_class.__dict__.get("fit"), "__stoker_autolog__", False):
        # Someone patched over ours: leave theirs in place; ours passes through while off.
        return
    if own is _MISSING:
        del model_class.fit
    else:
        model_class.fit = own


def _remove_hook() -> None:
    global _hook
    if _hook is not None:
        if _hook in sys.meta_path:
            sys.meta_path.remove(_hook)
        _hook = None


def _patched_fit(original: Callable[..., Any], keras_name: str) -> Callable[..., Any]:
    @functools.wraps(original)
    def fit(self: Any, *args: Any, **kwargs: Any) -> Any:
        options = _options
        if options is None or getattr(_inside_fit, "active", False):
            return original(self, *args, **kwargs)
        try:
            call = _monitored_call(original, keras_name, self, args, kwargs, options)
        except Exception as error:
            log_once.warn_once(
                "fit", "Stoker autolog steps aside: this fit runs unmonitored (%s: %s)",
                type(error).__name__, error,
            )  # fmt: skip
            call = None
        if call is None:
            return original(self, *args, **kwargs)
        _inside_fit.active = True  # a fit inside this one (a subclass's super().fit) passes
        try:
            return original(*call.args, **call.kwargs)
        finally:
            _inside_fit.active = False

    fit.__stoker_autolog__ = True  # type: ignore[attr-defined]
    return fit


@functools.cache
def _signature(function: Callable[..., Any]) -> "inspect.Signature":
    import inspect  # not at import time: every Python under `stoker run` imports this module

    return inspect.signature(function)


def _monitored_call(
    original: Callable[..., Any],
    keras_name: str,
    model: Any,
    args: tuple[Any, ...],
    kwargs: dict[str, Any],
    options: RunOptions,
) -> "inspect.BoundArguments | None":
    """The fit's arguments with a `StokerCallback` added and `x` wrapped, or None to leave
    the call as it is (the caller passed its own callback, or an error Keras will report)."""
    try:
        bound = _signature(original).bind(model, *args, **kwargs)
    except TypeError:
        return None  # Keras raises its own error for these arguments
    from trainer_agent.capture.callback import StokerHooks, callback_class
    from trainer_agent.capture.train_function import keras_backend

    try:
        make_callback = callback_class(keras_name)
    except Exception as error:
        log_once.warn_once(
            f"family:{keras_name}", "Stoker autolog: %s fits are not monitored (%s: %s)",
            keras_name, type(error).__name__, error,
        )  # fmt: skip
        return None
    given = bound.arguments.get("callbacks")
    if given is None:
        callbacks: list[Any] = []
    elif isinstance(given, list | tuple):
        callbacks = list(given)
    else:
        raise TypeError(f"callbacks is a {type(given).__name__}, not a list")
    hooks = _fit_hooks
    if any(isinstance(callback, StokerHooks) for callback in callbacks):
        if hooks is not None:
            hooks.declined("the script passes its own StokerCallback to this fit")
        return None  # the script monitors this fit itself
    callback = make_callback(**options.arguments())
    bound.arguments["callbacks"] = [*callbacks, callback]
    if hooks is not None and not hooks.prepare(model, keras_name, bound.arguments, callback):
        return None
    x = bound.arguments.get("x")
    tf = sys.modules.get("tensorflow")
    if tf is not None and isinstance(x, tf.data.Dataset) and keras_backend(model) == "tensorflow":
        # On JAX and PyTorch the callback times each fetch in Python instead.
        bound.arguments["x"] = callback.wrap(x)
    return bound


class _PatchOnImport(importlib.abc.MetaPathFinder):
    """Patches a Keras module right after it is first imported (its loader is wrapped)."""

    def find_spec(
        self, fullname: str, path: Any = None, target: ModuleType | None = None
    ) -> importlib.machinery.ModuleSpec | None:
        if fullname not in KERAS_MODULES or fullname in _patched:
            return None
        for finder in list(sys.meta_path):
            if finder is self or not hasattr(finder, "find_spec"):
                continue
            spec = finder.find_spec(fullname, path, target)
            if spec is not None:
                break
        else:
            return None
        if spec.loader is not None and hasattr(spec.loader, "exec_module"):
            # A Loader by what it does, not by inheritance: whatever else is asked of it is
            # the wrapped loader's (`__getattr__`), which inherited defaults would hide.
            spec.loader = cast(importlib.abc.Loader, _PatchingLoader(spec.loader, fullname))
        return spec


class _PatchingLoader:
    """Delegates to the module's own loader, then patches the module it executed."""

    def __init__(self, loader: Any, name: str) -> None:
        self._loader = loader
        self._name = name

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> ModuleType | None:
        return self._loader.create_module(spec)

    def exec_module(self, module: ModuleType) -> None:
        self._loader.exec_module(module)
        _patch(self._name, module)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._loader, name)
