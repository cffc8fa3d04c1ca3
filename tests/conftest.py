import os
import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.harness.fake_nvml import FakeNvml
from tests.harness.support import REPO, PostgresServer, ServerProcess

IN_CI = os.environ.get("CI", "").lower() in ("1", "true", "yes")
CHROMIUM = os.environ.get("STOKER_CHROMIUM", "/usr/bin/chromium")
ARTIFACTS = REPO / "test-artifacts"


# The tiers' modules in the order the run takes them: their modules are longest on average in
# this order (ui ~29 s, fit ~11, server ~8, unit well under 1). pytest-xdist hands each worker
# whole modules in collection order (--dist loadscope), so the run ends on the unit tier's
# short modules, not with one worker idle while the other finishes a 30 s module.
RUN_ORDER = ("ui", "fit", "server", "unit")


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    def tier(item: pytest.Item) -> int:
        name = item.path.parent.name
        return RUN_ORDER.index(name) if name in RUN_ORDER else len(RUN_ORDER)

    items.sort(key=tier)  # stable: each module's tests keep their order


def require(available: bool, what: str) -> None:
    """Skip locally when a real dependency is missing; in CI that is a failure, never a skip."""
    if available:
        return
    if IN_CI:
        pytest.fail(f"{what} is required in CI (.ci/run installs it)")
    pytest.skip(f"{what} not installed")


@pytest.fixture(autouse=True)
def agent_spool_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Agents started by a test (in process or in children) spool under its temp dir."""
    spool = tmp_path / "agent-spool"
    monkeypatch.setenv("STOKER_SPOOL_DIR", str(spool))
    return spool


# Backend tests that touch storage run on both databases:
#   pytestmark = pytest.mark.parametrize("database", DATABASES, indirect=True)
DATABASES = ["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)]


@pytest.fixture(scope="session")
def postgres_server() -> Iterator[PostgresServer]:
    require(PostgresServer.available(), "PostgreSQL (Debian package postgresql)")
    server = PostgresServer().start()
    yield server
    server.stop()


@pytest.fixture
def database(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """A database URL for one test: an SQLite file, or a fresh PostgreSQL database."""
    kind = getattr(request, "param", "sqlite")
    if kind == "sqlite":
        return f"sqlite:///{tmp_path / 'stoker.db'}"
    return request.getfixturevalue("postgres_server").create_database()


@pytest.fixture(scope="module", params=DATABASES)
def db_server(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[ServerProcess]:
    """One real server per test module and database (SQLite, PostgreSQL). Tests share it, so
    each keeps to its own runs (a unique run key or project) instead of counting all rows."""
    data_dir = tmp_path_factory.mktemp(f"server-{request.param}")
    if request.param == "sqlite":
        url = f"sqlite:///{data_dir / 'stoker.db'}"
    else:
        url = request.getfixturevalue("postgres_server").create_database()
    process = ServerProcess(data_dir=data_dir, env={"STOKER_DATABASE_URL": url}).start()
    yield process
    process.stop()


@pytest.fixture
def server(tmp_path: Path, database: str) -> Iterator[ServerProcess]:
    process = ServerProcess(
        data_dir=tmp_path / "server", env={"STOKER_DATABASE_URL": database}
    ).start()
    yield process
    process.stop()


@pytest.fixture(scope="module")
def shared_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    """One server for a whole module, for tests that leave no state the others read."""
    process = ServerProcess(data_dir=tmp_path_factory.mktemp("shared-server")).start()
    yield process
    process.stop()


@pytest.fixture(scope="session")
def browser() -> Iterator[object]:
    require(Path(CHROMIUM).exists() or shutil.which(CHROMIUM) is not None, "Chromium")
    require(
        (REPO / "backend" / "stoker_server" / "static" / "index.html").exists(),
        "the built frontend",
    )
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(
            executable_path=CHROMIUM,
            headless=True,
            args=[
                "--no-sandbox",
                "--disable-background-networking",
                "--disable-component-update",
                "--disable-sync",
                "--disable-gpu",
                "--no-first-run",
            ],
        )
        yield browser
        browser.close()


@pytest.fixture
def page(browser: object) -> Iterator[object]:
    context = browser.new_context(viewport={"width": 1400, "height": 900})  # type: ignore[attr-defined]
    page = context.new_page()
    yield page
    context.close()


@pytest.fixture
def artifacts() -> Path:
    ARTIFACTS.mkdir(exist_ok=True)
    return ARTIFACTS


@pytest.fixture(scope="session")
def fake_nvml_library(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The fake `libnvidia-ml.so.1`, compiled once per test session."""
    from tests.harness.fake_nvml import build, nvml_include_dir

    require(shutil.which("gcc") is not None, "gcc")
    require(nvml_include_dir() is not None, "nvml.h (nvidia-nvml-dev-cu12)")
    return build(tmp_path_factory.mktemp("fake-nvml"))


@pytest.fixture
def fake_nvml(fake_nvml_library: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> FakeNvml:
    """A fresh control file for the fake NVML; `preload()` binds this process's pynvml to it.

    The agent's process-wide NVML (`shared_nvml`) starts anew for the test, as in a new
    process: an earlier test's fit in this process found no NVML and kept that answer."""
    import trainer_agent.telemetry.nvml

    monkeypatch.setattr(trainer_agent.telemetry.nvml, "_shared", None)
    return FakeNvml(fake_nvml_library, tmp_path / "nvml-control.txt")
