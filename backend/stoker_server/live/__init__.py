"""Live updates: the hub that fans messages out to browsers, the agents connected to each run
(told whether a browser watches it, sent commands), and the fan-out across servers sharing one
PostgreSQL. It imports diagnosis, ingest and core (the layers contract in pyproject.toml); the
browser socket's route is api/live_updates.py."""
