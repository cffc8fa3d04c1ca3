"""The wheel as a user installs it, in fresh virtual environments (bench/package_check.py):
the base install runs the agent's commands and imports no server module, `stoker serve`
without the server extra says what to install, and with it serves the built UI."""

import subprocess
import sys

from tests.harness.support import REPO


def test_wheel_installs_a_light_agent_and_a_server_that_serves_the_ui() -> None:
    check = subprocess.run(
        [sys.executable, str(REPO / "bench" / "package_check.py")],
        cwd=REPO, capture_output=True, text=True, timeout=280,
    )  # fmt: skip
    print(check.stdout)
    assert check.returncode == 0, check.stderr[-3000:]
    # No generic import name (`backend`, `app`, ...) that could shadow a user's package.
    assert "top-level packages: stoker_server, trainer_agent\n" in check.stdout
