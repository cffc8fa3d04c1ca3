"""The server's commands of `stoker` (`serve`, `demo`): the `stoker` script
(`trainer_agent.cli.main:main`) hands them to `main` here."""

from stoker_server.cli.main import main

__all__ = ["main"]
