"""The server assembled: the app factory (app.py), `build_state` and the long-running loops
(build.py), the run reaper (lifecycle.py). It imports every layer below it; only cli imports it
(the layers contract in pyproject.toml)."""
