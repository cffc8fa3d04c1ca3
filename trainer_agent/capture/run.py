"""`stoker run -- python train.py ARGS`: an unmodified script, every `fit` monitored.

The command runs with `trainer_agent/capture/autolog_site` first on `PYTHONPATH`; the
`sitecustomize` there calls `trainer_agent.autolog(**options)` as Python starts, with the
options this module put in `STOKER_AUTOLOG` (the `RunOptions` that differ from the defaults,
as JSON), then runs the `sitecustomize` it shadows.
Every Python the script starts inherits both, so its workers are monitored too. On POSIX the
command replaces this process, so signals and the exit code are the script's own.
"""

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Unpack

from trainer_agent.config import RunArguments, RunOptions, takes_run_options

OPTIONS_ENV = "STOKER_AUTOLOG"
SITE_DIR = Path(__file__).resolve().parent / "autolog_site"


def command_environment(environ: dict[str, str], options: RunOptions) -> dict[str, str]:
    """`environ` with the autolog options and the `sitecustomize` directory added. The server
    goes in `STOKER_SERVER`, so a callback or `Monitor` the script makes itself uses it too."""
    autolog_options = options.changed()
    server = autolog_options.pop("server", None)
    paths = [str(SITE_DIR), *filter(None, [environ.get("PYTHONPATH")])]
    env = {
        **environ,
        OPTIONS_ENV: json.dumps(autolog_options),
        "PYTHONPATH": os.pathsep.join(paths),
    }
    if server:
        env["STOKER_SERVER"] = server
    return env


@takes_run_options
def run(command: list[str], **options: Unpack[RunArguments]) -> int:
    """Run `command` with autolog active, with `options` (autolog's); return its exit code
    (POSIX: does not return)."""
    run_options = RunOptions.of("run", options)
    if not command:
        print("stoker run: no command given (stoker run -- python train.py)", file=sys.stderr)
        return 2
    if command[0].endswith(".py"):  # `stoker run train.py`: this Python runs it
        command = [sys.executable, *command]
    env = command_environment(dict(os.environ), run_options)
    try:
        if os.name == "posix":
            os.execvpe(command[0], command, env)
        return subprocess.call(command, env=env)
    except OSError as error:
        print(f"stoker run: cannot run {command[0]!r}: {error.strerror or error}", file=sys.stderr)
        return 127
