"""Fixtures of the fit tier shared by more than one module."""

from collections.abc import Iterator

import pytest

from tests.conftest import DATABASES
from tests.harness.detect_support import FAST_DETECTORS
from tests.harness.support import ServerProcess


@pytest.fixture(scope="module", params=DATABASES)
def alert_server(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[ServerProcess]:
    """One server per database for the module; a silent run is reaped after 2 s."""
    data_dir = tmp_path_factory.mktemp(f"alerts-{request.param}")
    if request.param == "sqlite":
        url = f"sqlite:///{data_dir / 'stoker.db'}"
    else:
        url = request.getfixturevalue("postgres_server").create_database()
    env = {**FAST_DETECTORS, "STOKER_DATABASE_URL": url, "STOKER_HEARTBEAT_TIMEOUT_S": "2"}
    process = ServerProcess(data_dir=data_dir, env=env).start()
    yield process
    process.stop()
