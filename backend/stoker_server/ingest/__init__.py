"""A batch's way into storage: the wire protocol, the writer thread and what it stores (runs,
their workers, steps, samples, rollups, profiles), the summaries, retention. It imports only
core (the layers contract in pyproject.toml); what a stored batch then changes elsewhere is
published by api/publish.py."""
