"""The relay of browsers' watches between servers is set from the environment."""

import pytest
from pydantic import ValidationError

from stoker_server.core.settings import Settings


def test_watch_relay_settings_come_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    assert (Settings().watch_refresh_s, Settings().watch_expiry_s) == (3.0, 10.0)
    monkeypatch.setenv("STOKER_WATCH_REFRESH_S", "1.5")
    monkeypatch.setenv("STOKER_WATCH_EXPIRY_S", "4")
    assert (Settings().watch_refresh_s, Settings().watch_expiry_s) == (1.5, 4.0)


def test_a_watch_that_would_expire_before_its_renewal_is_refused() -> None:
    with pytest.raises(ValidationError, match="must exceed watch_refresh_s"):
        Settings(watch_refresh_s=5, watch_expiry_s=5)
