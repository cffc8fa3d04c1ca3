"""`StokerCallback`, `Monitor` and `autolog` take one options type (`RunOptions`): the same
keyword-only arguments, the same clear error for a misspelt one, and `stoker run`'s options
reach autolog through the same type."""

import dataclasses
import importlib
import inspect
import json
import os
from collections.abc import Callable, Iterator
from typing import Any

import pytest

import trainer_agent
from trainer_agent.capture.run import OPTIONS_ENV, command_environment
from trainer_agent.config import RUN_OPTION_NAMES, RunArguments, RunOptions

# The module (the package's `autolog` attribute is the function).
autolog_module = importlib.import_module("trainer_agent.capture.autolog")
pytest.importorskip("keras")

from trainer_agent.capture.callback import StokerCallback  # noqa: E402
from trainer_agent.capture.monitor import Monitor  # noqa: E402

NOWHERE = "http://127.0.0.1:9"
EVERY_OPTION: dict[str, Any] = {
    "run_name": "r", "project": "p", "tags": ["a", "b"], "config": {"lr": 0.1},
    "server": NOWHERE, "token": "t", "run_key": "job-7", "every_n_batches": 5,
    "sample_interval_s": 0.5, "all_gpus": True,
}  # fmt: skip
OWNERS: dict[str, Callable[..., Any]] = {
    "StokerCallback": StokerCallback,
    "Monitor": Monitor,
    "autolog": trainer_agent.autolog,
}


@pytest.fixture(autouse=True)
def autolog_off() -> Iterator[None]:
    yield
    trainer_agent.autolog(disable=True)


def _keywords(function: Callable[..., Any]) -> set[str]:
    parameters = inspect.signature(function).parameters.values()
    assert all(p.kind is p.KEYWORD_ONLY for p in parameters), function
    return {p.name for p in parameters}


def test_the_three_take_the_same_keyword_only_options() -> None:
    assert set(EVERY_OPTION) == set(RUN_OPTION_NAMES) == set(RunArguments.__annotations__)
    assert _keywords(StokerCallback) == _keywords(Monitor) == set(RUN_OPTION_NAMES)
    assert _keywords(trainer_agent.autolog) == {*RUN_OPTION_NAMES, "disable"}
    expected = RunOptions.of("test", EVERY_OPTION)
    assert StokerCallback(**EVERY_OPTION).options == expected
    assert Monitor(**EVERY_OPTION).options == expected
    trainer_agent.autolog(**EVERY_OPTION)
    assert autolog_module._options == expected
    assert expected.tags == ("a", "b") and expected.run_key == "job-7"


def test_the_options_reach_the_run_they_configure() -> None:
    callback = StokerCallback(**EVERY_OPTION)
    config = callback._agent_config
    assert (config.run_name, config.project, config.tags) == ("r", "p", ["a", "b"])
    assert (config.server, config.token, config.config) == (NOWHERE, "t", {"lr": 0.1})
    assert (config.sample_interval_s, config.all_gpus, callback.every_n_batches) == (0.5, True, 5)
    assert Monitor().options == RunOptions()  # None and absent alike: the defaults


@pytest.mark.parametrize("owner", OWNERS)
def test_an_unknown_option_is_a_clear_type_error(owner: str) -> None:
    with pytest.raises(TypeError) as raised:
        OWNERS[owner](run_nmae="typo", project="p")
    message = str(raised.value)
    assert message.startswith(f"{owner}() got an unexpected keyword argument 'run_nmae'")
    assert "it accepts run_name, project, tags, config, server, token, run_key" in message
    assert autolog_module._options is None  # nothing half-applied


@pytest.mark.parametrize("owner", OWNERS)
def test_options_are_keyword_only(owner: str) -> None:
    with pytest.raises(TypeError):
        OWNERS[owner]("run", "project")


def test_stoker_run_hands_autolog_the_options_that_differ_and_the_server_by_variable() -> None:
    options = RunOptions.of("run", {"run_name": None, "project": "p", "tags": ["x"],
                                    "server": NOWHERE, "run_key": "k"})  # fmt: skip
    env = command_environment({"PYTHONPATH": "/elsewhere"}, options)
    handed = json.loads(env[OPTIONS_ENV])
    assert handed == {"project": "p", "tags": ["x"], "run_key": "k"}
    assert env["STOKER_SERVER"] == NOWHERE
    assert env["PYTHONPATH"].endswith(os.pathsep + "/elsewhere")
    trainer_agent.autolog(**handed)  # what autolog_site/sitecustomize.py does with them
    assert autolog_module._options == dataclasses.replace(options, server=None)
