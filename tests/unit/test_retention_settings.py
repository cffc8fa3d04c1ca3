"""Retention settings read like Prometheus's flags: "90d", "12h", "50GB", "500MiB"."""

import pytest
from pydantic import ValidationError

from stoker_server.core.settings import Settings


def test_retention_settings_understand_units(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("STOKER_RETENTION_TIME_S", "90d")
    monkeypatch.setenv("STOKER_RETENTION_SIZE_BYTES", "50GB")
    settings = Settings()
    assert settings.retention_time_s == 90 * 86400
    assert settings.retention_size_bytes == 50 * 10**9
    assert Settings(retention_time_s="12h").retention_time_s == 12 * 3600
    assert Settings(retention_size_bytes="1.5KiB").retention_size_bytes == 1536
    assert Settings(retention_time_s=30).retention_time_s == 30


def test_retention_defaults_keep_a_year_and_any_size() -> None:
    settings = Settings()
    assert settings.retention_time_s == 365 * 86400 and settings.retention_size_bytes == 0


@pytest.mark.parametrize("value", ["12 parsecs", "-3d", "lots"])
def test_bad_retention_values_are_refused(value: str) -> None:
    with pytest.raises(ValidationError, match="retention_time_s"):
        Settings(retention_time_s=value)
