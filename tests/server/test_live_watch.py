"""Live by default: a browser watching a run makes its agent send every 50 ms; when the last
browser leaves, the agent goes back to its 1 s pace."""

from tests.harness.support import ServerProcess
from tests.harness.watch_cycle import watch_cycle


def test_watching_browser_switches_the_agent_to_live_pace_and_back(server: ServerProcess) -> None:
    watch_cycle(ingest=server, view=server, run_name="watched")
