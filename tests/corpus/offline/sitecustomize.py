"""The corpus's offline stand-ins and History recorder, run at startup of every corpus script.

bench/corpus.py puts this directory on PYTHONPATH for the plain run and the `stoker run` run
alike (`stoker run` puts its own sitecustomize first and chains to this one). Nothing here
edits a script; it acts through an import hook only:

- `keras.datasets.{mnist,fashion_mnist,cifar10,cifar100,boston_housing,imdb}.load_data`
  (Keras 3, `tf.keras` and `tf_keras`) return seeded synthetic arrays of the real dtype and
  shape (imdb: lists of word indices below `num_words`, of 20 to 400 words, and 0/1 labels),
  `STOKER_CORPUS_<NAME>` ("train,test", e.g. `STOKER_CORPUS_MNIST=12000,2000`) samples, so no
  script downloads anything;
- every `History` appends its fit's `history` and `params` (epochs, steps) as one JSON line
  to the file named by `STOKER_CORPUS_HISTORY`, so the runner can compare fits without
  touching `Model.fit` (which autolog wraps);
- Python's `random`, NumPy's and TensorFlow's global seeds are set to 0, so unseeded
  scripts give the same losses in both runs.
"""

import importlib.abc
import importlib.machinery
import json
import os
import random
import sys
from collections.abc import Callable, Sequence
from types import ModuleType
from typing import Any

HISTORY_ENV = "STOKER_CORPUS_HISTORY"
DEFAULT_SIZES = {
    "mnist": (2048, 512),
    "fashion_mnist": (2048, 512),
    "cifar10": (512, 128),
    "cifar100": (512, 128),
    "boston_housing": (404, 102),
    "imdb": (1024, 256),
}


def _sizes(dataset: str) -> tuple[int, int]:
    raw = os.environ.get(f"STOKER_CORPUS_{dataset.upper()}")
    if not raw:
        return DEFAULT_SIZES[dataset]
    train, test = (int(part) for part in raw.split(","))
    return train, test


def _images(
    dataset: str, shape: tuple[int, ...], label_shape: tuple[int, ...], classes: int = 10
) -> Any:
    import numpy as np

    rng = np.random.default_rng(1234)
    train, test = _sizes(dataset)

    def split(count: int) -> tuple[Any, Any]:
        x = rng.integers(0, 256, size=(count, *shape), dtype=np.uint8)
        y = rng.integers(0, classes, size=(count, *label_shape), dtype=np.uint8)
        return x, y

    return split(train), split(test)


def _mnist_load_data(*_args: Any, **_kwargs: Any) -> Any:
    return _images("mnist", (28, 28), ())


def _fashion_mnist_load_data(*_args: Any, **_kwargs: Any) -> Any:
    return _images("fashion_mnist", (28, 28), ())


def _cifar10_load_data(*_args: Any, **_kwargs: Any) -> Any:
    return _images("cifar10", (32, 32, 3), (1,))


def _cifar100_load_data(*_args: Any, **_kwargs: Any) -> Any:
    # Keras gives cifar100 labels as int64 (cifar10's are uint8).
    (x, y), (xt, yt) = _images("cifar100", (32, 32, 3), (1,), classes=100)
    return (x, y.astype("int64")), (xt, yt.astype("int64"))


def _boston_housing_load_data(*_args: Any, **_kwargs: Any) -> Any:
    """13 float64 features and a float64 price per house, like the real set."""
    import numpy as np

    rng = np.random.default_rng(1234)
    train, test = _sizes("boston_housing")

    def split(count: int) -> tuple[Any, Any]:
        x = rng.uniform(0.0, 100.0, size=(count, 13))
        y = rng.uniform(5.0, 50.0, size=(count,))
        return x, y

    return split(train), split(test)


def _imdb_load_data(*_args: Any, num_words: int | None = None, **_kwargs: Any) -> Any:
    """Reviews as object arrays of word-index lists (start_char 1 first, indices from 3 on,
    below `num_words`), labels 0/1 as int64, like the real set."""
    import numpy as np

    rng = np.random.default_rng(1234)
    train, test = _sizes("imdb")
    vocabulary = num_words or 10000

    def split(count: int) -> tuple[Any, Any]:
        x = np.empty(count, dtype=object)
        for i in range(count):
            length = int(rng.integers(20, 401))
            x[i] = [1, *rng.integers(3, vocabulary, size=length - 1).tolist()]
        return x, rng.integers(0, 2, size=count).astype("int64")

    return split(train), split(test)


def _plain(value: Any) -> Any:
    if isinstance(value, dict):
        return {str(key): _plain(item) for key, item in value.items()}
    if isinstance(value, list | tuple):
        return [_plain(item) for item in value]
    try:
        return float(value)
    except (TypeError, ValueError):
        return repr(value)


def _record_history(history: Any) -> None:
    path = os.environ.get(HISTORY_ENV)
    if not path:
        return
    params = getattr(history, "params", None) or {}
    line = {
        "history": _plain(getattr(history, "history", {}) or {}),
        "epochs": params.get("epochs"),
        "steps": params.get("steps"),
        "module": type(history).__module__,
    }
    with open(path, "a", encoding="utf-8") as out:
        out.write(json.dumps(line) + "\n")


def _patch_history(module: ModuleType) -> None:
    history_class = getattr(module, "History", None)
    if history_class is None or getattr(history_class, "_stoker_corpus", False):
        return
    original = history_class.on_train_end

    def on_train_end(self: Any, logs: Any = None) -> None:
        original(self, logs)
        _record_history(self)

    history_class.on_train_end = on_train_end
    history_class._stoker_corpus = True


def _set(name: str, value: Callable[..., Any]) -> Callable[[ModuleType], None]:
    def patch(module: ModuleType) -> None:
        setattr(module, name, value)

    return patch


def _seed_numpy(module: ModuleType) -> None:
    module.random.seed(0)


def _seed_tensorflow(module: ModuleType) -> None:
    module.random.set_seed(0)


STAND_INS: dict[str, Callable[..., Any]] = {
    "mnist": _mnist_load_data,
    "fashion_mnist": _fashion_mnist_load_data,
    "cifar10": _cifar10_load_data,
    "cifar100": _cifar100_load_data,
    "boston_housing": _boston_housing_load_data,
    "imdb": _imdb_load_data,
}

PATCHES: dict[str, Callable[[ModuleType], None]] = {
    **{
        f"{package}.src.datasets.{name}": _set("load_data", load)
        for package in ("keras", "tf_keras")
        for name, load in STAND_INS.items()
    },
    "keras.src.callbacks.history": _patch_history,
    "tf_keras.src.callbacks": _patch_history,
    "numpy": _seed_numpy,
    "tensorflow": _seed_tensorflow,
}


class _PatchingLoader(importlib.abc.Loader):
    def __init__(self, loader: Any, patch: Callable[[ModuleType], None]) -> None:
        self._loader = loader
        self._patch = patch

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> ModuleType | None:
        return self._loader.create_module(spec)

    def exec_module(self, module: ModuleType) -> None:
        self._loader.exec_module(module)
        self._patch(module)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._loader, name)


class _PostImportFinder(importlib.abc.MetaPathFinder):
    """Finds the patched modules as Python would, and patches each once it has run."""

    def find_spec(
        self, fullname: str, path: Sequence[str] | None, target: ModuleType | None = None
    ) -> importlib.machinery.ModuleSpec | None:
        patch = PATCHES.get(fullname)
        if patch is None:
            return None
        spec = importlib.machinery.PathFinder.find_spec(fullname, path, target)
        if spec is None or spec.loader is None:
            return spec
        spec.loader = _PatchingLoader(spec.loader, patch)
        return spec


def _install() -> None:
    random.seed(0)
    sys.meta_path.insert(0, _PostImportFinder())


_install()
