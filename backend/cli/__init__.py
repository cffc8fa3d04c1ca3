"""The server's commands of `stoker` (`serve`, `demo`): the `stoker` script
(`trainer_agent.cli:main`) hands them to `main` here."""

from backend.cli.main import main

__all__ = ["main"]
