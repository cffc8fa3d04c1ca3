"""The agent reads its `STOKER_*` variables like the server reads its own: the same units,
the same refusal of a value it cannot read (said once, naming it, then the default), and one
warn-once that `forget()` resets for every warning."""

import logging

import pytest
from pydantic import ValidationError

from stoker_server.core.settings import Settings
from trainer_agent import log_once
from trainer_agent.config import AgentConfig, RunOptions, resolve_interval_s
from trainer_agent.setting_units import parse_duration_s, parse_size_bytes
from trainer_agent.settings import DEFAULT_SPOOL_MAX_BYTES, read_agent_settings


@pytest.fixture(autouse=True)
def _fresh_warnings() -> None:
    log_once.forget()


def _said(caplog: pytest.LogCaptureFixture, name: str) -> list[str]:
    return [r.getMessage() for r in caplog.records if name in r.getMessage()]


def test_sizes_and_durations_with_units_are_read(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("STOKER_SPOOL_MAX_BYTES", "1GB")
    monkeypatch.setenv("STOKER_SAMPLE_INTERVAL_S", "1s")
    monkeypatch.setenv("STOKER_WATCHED_FLUSH_INTERVAL_S", "50ms")
    config = AgentConfig()
    assert config.spool_max_bytes == 10**9
    assert config.watched_flush_interval_s == pytest.approx(0.05)
    assert resolve_interval_s(None) == 1.0


def test_a_value_that_cannot_be_read_is_said_once_and_the_default_used(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setenv("STOKER_SPOOL_MAX_BYTES", "1 gigabyte")
    monkeypatch.setenv("STOKER_FLUSH_INTERVAL_S", "0")
    monkeypatch.setenv("STOKER_GPM", "maybe")
    with caplog.at_level(logging.WARNING, logger="trainer_agent"):
        first, second = read_agent_settings(), read_agent_settings()
    assert first == second
    assert first.spool_max_bytes == DEFAULT_SPOOL_MAX_BYTES
    assert first.flush_interval_s == 1.0 and first.gpm is True
    [size] = _said(caplog, "STOKER_SPOOL_MAX_BYTES")
    assert "'1 gigabyte' is not a size" in size and "using the default, 512MiB" in size
    [interval] = _said(caplog, "STOKER_FLUSH_INTERVAL_S")
    assert "not more than 0" in interval and "using the default, 1s" in interval
    [switch] = _said(caplog, "STOKER_GPM")
    assert "'maybe' is not a switch" in switch


@pytest.mark.parametrize("text", ["90", "1.5", "500ms", "90s", "2m", "12h", "90d", "1w", "1e3"])
def test_both_sides_read_a_duration_alike(text: str) -> None:
    assert Settings(retention_time_s=text).retention_time_s == pytest.approx(parse_duration_s(text))


@pytest.mark.parametrize("text", ["512", "500kB", "50GB", "512MiB", "1.5KiB"])
def test_both_sides_read_a_size_alike(text: str) -> None:
    assert Settings(retention_size_bytes=text).retention_size_bytes == parse_size_bytes(text)


@pytest.mark.parametrize("text", ["12 parsecs", "-3d", "lots", "1.5B"])
def test_both_sides_refuse_a_value_with_the_same_sentence(text: str) -> None:
    parse = parse_size_bytes if text.endswith("B") else parse_duration_s
    with pytest.raises(ValueError) as agent:
        parse(text)
    field = "retention_size_bytes" if parse is parse_size_bytes else "retention_time_s"
    with pytest.raises(ValidationError) as server:
        Settings(**{field: text})
    assert str(agent.value) in str(server.value)


def test_forget_lets_the_server_notice_be_said_again(caplog: pytest.LogCaptureFixture) -> None:
    options = RunOptions(server="127.0.0.1:8470")
    with caplog.at_level(logging.WARNING, logger="trainer_agent"):
        AgentConfig.from_options(options)
        AgentConfig.from_options(options)
        assert len(_said(caplog, "has no scheme")) == 1
        log_once.forget()
        AgentConfig.from_options(options)
    assert len(_said(caplog, "has no scheme")) == 2
