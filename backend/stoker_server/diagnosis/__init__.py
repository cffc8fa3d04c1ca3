"""Verdicts over a sliding window per run, stalls, stragglers, alert rules and webhooks, and
their stored events: the watched runs, a pure evaluation, its effects and the scheduler that
joins them (detectors.py). It imports ingest and core (the layers contract in pyproject.toml);
what it pushes to browsers goes through a publisher it is handed."""
