"""The `stoker` command: the console script is `trainer_agent.cli.main:main`, and
`python -m trainer_agent.cli` runs the same."""
