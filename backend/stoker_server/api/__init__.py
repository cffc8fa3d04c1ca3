"""Every HTTP and WebSocket route: the REST API the UI reads and edits (runs, series, compare,
diagnosis, alerts, profiles), the agents' ingest socket and its HTTP fallback, the browsers'
live socket; the dependencies they take (deps.py), the app state they read (state.py) and the
server's gauges (telemetry.py). It imports live, diagnosis, ingest and core; only service and
cli import it (the layers contract in pyproject.toml)."""
