"""Run at startup by every Python that `stoker run` starts (see trainer_agent/capture/run.py)."""


def _chain_shadowed_sitecustomize() -> None:
    # This file hides any other sitecustomize (a distribution's, a virtualenv's): run it.
    import importlib.machinery
    import importlib.util
    import os
    import sys

    here = os.path.dirname(os.path.abspath(__file__))
    spec = None
    path = [entry for entry in sys.path if os.path.abspath(entry or ".") != here]
    try:
        spec = importlib.machinery.PathFinder.find_spec("sitecustomize", path)
        if spec is not None and spec.loader is not None:
            module = importlib.util.module_from_spec(spec)
            spec.loader.exec_module(module)
    except Exception as error:
        print(
            f"stoker run: error in {spec.origin if spec else 'sitecustomize'}: {error!r}",
            file=sys.stderr,
        )


def _start_autolog() -> None:
    import json
    import os
    import sys

    try:
        import trainer_agent
    except ImportError:
        print(
            f"stoker run: Stoker is not installed in this Python ({sys.executable}); its fits "
            "run unmonitored. Install stoker there, or run the script with the Python that has it.",
            file=sys.stderr,
        )
        return
    try:
        options = json.loads(os.environ.get("STOKER_AUTOLOG") or "{}")
        tune_trial = os.environ.get("STOKER_TUNE")
        if tune_trial:  # one trial of `stoker tune` (trainer_agent/tune/trial.py)
            from trainer_agent.tune.trial import start_trial

            start_trial(tune_trial, options)
        else:
            trainer_agent.autolog(**options)
    except Exception as error:  # never stop the script from starting
        print(f"stoker run: Stoker is not active in this Python: {error!r}", file=sys.stderr)


_chain_shadowed_sitecustomize()
_start_autolog()
