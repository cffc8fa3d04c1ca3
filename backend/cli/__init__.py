"""The `stoker` command line (`stoker = "backend.cli:main"`)."""

from backend.cli.main import main

__all__ = ["main"]
