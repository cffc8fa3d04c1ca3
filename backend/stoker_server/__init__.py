"""Stoker server: ingest, storage, live fan-out and the REST API."""

__version__ = "0.1.0"
