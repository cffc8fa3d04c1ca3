"""The agent's tests on Keras 3's JAX backend, in a venv without TensorFlow (`make test-jax`).

They run only where TensorFlow is not installed: that install is what they test, and Keras
picks its backend once per process (`KERAS_BACKEND`, set here before Keras is imported).
"""

import importlib.util
import os

collect_ignore_glob: list[str] = []
if importlib.util.find_spec("tensorflow") is not None or importlib.util.find_spec("jax") is None:
    collect_ignore_glob = ["test_*.py"]
else:
    os.environ["KERAS_BACKEND"] = "jax"
