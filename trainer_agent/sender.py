"""Moved to trainer_agent.delivery; these names stay importable from here."""

from trainer_agent.delivery.backoff import Backoff
from trainer_agent.delivery.http import http_chunks
from trainer_agent.delivery.sender import Sender

__all__ = ["Backoff", "Sender", "http_chunks"]
