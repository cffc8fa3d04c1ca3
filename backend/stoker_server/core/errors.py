"""Domain errors, mapped to JSON responses in the app factory."""

from pydantic import ValidationError


class StokerError(Exception):
    status_code = 400

    def __init__(self, detail: str) -> None:
        super().__init__(detail)
        self.detail = detail


class RunNotFound(StokerError):
    status_code = 404

    def __init__(self, run_id: int) -> None:
        super().__init__(f"run {run_id} not found")


class PayloadTooLarge(StokerError):
    status_code = 413


class UnsupportedMediaType(StokerError):
    status_code = 415


class Conflict(StokerError):
    """The resource is in a state that forbids this now (a running run deleted, say)."""

    status_code = 409


class Unauthorized(StokerError):
    status_code = 401


class Forbidden(StokerError):
    """A valid token that does not grant this (the agent token reading, say)."""

    status_code = 403


class BadRequest(StokerError):
    """Input that parsed but makes no sense (an unknown field name, a malformed id list)."""

    status_code = 422


def describe(error: ValidationError) -> str:
    """A short, readable account of what was wrong with a message."""
    parts = []
    for item in error.errors()[:5]:
        where = ".".join(str(p) for p in item["loc"]) or "message"
        parts.append(f"{where}: {item['msg']}")
    more = error.error_count() - len(parts)
    return "; ".join(parts) + (f" (+{more} more)" if more > 0 else "")
