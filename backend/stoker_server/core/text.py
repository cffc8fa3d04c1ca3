"""Text both databases can store, for every model that takes text from outside (the agent's
messages, the UI's edits, alert rules)."""

from typing import Annotated

from pydantic import AfterValidator, StringConstraints


def without_nul(text: str) -> str:
    """`text` with NUL dropped: PostgreSQL text cannot hold it (a filter or sort key the user
    typed compares as the text stored, which never holds one)."""
    return text.replace("\x00", "")


def no_nul(text: str) -> str:
    """Text both databases can store: NUL dropped (PostgreSQL text cannot hold it, and no real
    name or tag contains one); lone surrogates (not encodable as UTF-8) refused."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        raise ValueError("text must be valid Unicode (no lone surrogates)") from None
    return without_nul(text)


Tag = Annotated[str, StringConstraints(min_length=1, max_length=100), AfterValidator(no_nul)]
