"""The server's commands of `stoker` (`serve`, `demo`) and the demo. The one `stoker` parser is
trainer_agent.cli.main's; `python -m stoker_server.cli` runs it too."""
